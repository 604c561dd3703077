import { Keyring } from "@polkadot/keyring";
import { u8aWrapBytes } from "@polkadot/util";
import { cryptoWaitReady, sr25519PairFromSeed, sr25519Sign, sr25519Verify } from "@polkadot/util-crypto";
import * as schnorrkel from "@polkadot/wasm-crypto";
import fc from "fast-check";
import { beforeAll, describe, expect, it } from "vitest";
import { Keypair } from "./keys";
import { isWrapped, loadSchnorrkelWasm, scureSr25519, verifyMessage, wrapBytes, type Sr25519Verifier } from "./sr25519";

let wasmVerifier: Sr25519Verifier;
beforeAll(async () => {
  await cryptoWaitReady();
  wasmVerifier = await loadSchnorrkelWasm();
});

const text = (s: string) => new TextEncoder().encode(s);

describe("sr25519 interop", () => {
  it("verifies signatures made by @polkadot/util-crypto, and polkadot verifies ours", () => {
    fc.assert(
      fc.property(fc.uint8Array({ minLength: 32, maxLength: 32 }), fc.uint8Array({ maxLength: 200 }), (seed, message) => {
        const pair = sr25519PairFromSeed(seed);
        const theirs = sr25519Sign(message, pair);
        expect(verifyMessage(message, theirs, pair.publicKey, { wrapping: "raw" })).toBe(true);
        const ours = Keypair.fromUri(`0x${Buffer.from(seed).toString("hex")}`);
        expect(Buffer.from(ours.publicKey).equals(Buffer.from(pair.publicKey))).toBe(true);
        expect(sr25519Verify(message, ours.sign(message), pair.publicKey)).toBe(true);
      }),
      { numRuns: 15 },
    );
  });

  it("interoperates with schnorrkel itself (the Rust crate via @polkadot/wasm-crypto)", () => {
    const pairBytes = schnorrkel.sr25519KeypairFromSeed(new Uint8Array(32).fill(9));
    const [secret, publicKey] = [pairBytes.slice(0, 64), pairBytes.slice(64)];
    const message = text("hello schnorrkel");
    const theirs = schnorrkel.sr25519Sign(publicKey, secret, message);
    expect(verifyMessage(message, theirs, publicKey, { wrapping: "raw" })).toBe(true);
    const ours = Keypair.fromUri(`0x${"09".repeat(32)}`);
    expect(Buffer.from(ours.publicKey).equals(Buffer.from(publicKey))).toBe(true);
    expect(schnorrkel.sr25519Verify(ours.sign(message), message, publicKey)).toBe(true);
    expect(wasmVerifier.verify(message, ours.sign(message), publicKey)).toBe(true);
  });

  it("accepts the polkadot.js <Bytes> wrapping made by a wallet, unless raw-only is asked", () => {
    const alice = new Keyring({ type: "sr25519" }).addFromUri("//Alice");
    const message = text("epistula message");
    const walletSignature = alice.sign(u8aWrapBytes(message));
    expect(verifyMessage(message, walletSignature, alice.address)).toBe(true);
    expect(verifyMessage(message, walletSignature, alice.address, { wrapping: "bytes" })).toBe(true);
    expect(verifyMessage(message, walletSignature, alice.address, { wrapping: "raw" })).toBe(false);
    const rawSignature = alice.sign(message);
    expect(verifyMessage(wrapBytes(message), rawSignature, alice.address)).toBe(true);
    expect(verifyMessage(message, rawSignature, alice.address, { wrapping: "bytes" })).toBe(false);
    expect(isWrapped(wrapBytes(message))).toBe(true);
    expect(wrapBytes(wrapBytes(message))).toEqual(wrapBytes(message));
  });

  it("rejects a changed message, another key, and garbage signatures or keys with false (both engines)", () => {
    const key = Keypair.generate();
    const message = text("payload");
    const signature = key.sign(message);
    for (const verifier of [scureSr25519, wasmVerifier]) {
      expect(verifier.verify(message, signature, key.publicKey)).toBe(true);
      expect(verifier.verify(text("payloaD"), signature, key.publicKey)).toBe(false);
      expect(verifier.verify(message, signature, Keypair.generate().publicKey)).toBe(false);
      expect(verifier.verify(message, new Uint8Array(64), key.publicKey)).toBe(false);
      expect(verifier.verify(message, signature, new Uint8Array(32).fill(255))).toBe(false);
      expect(verifier.verify(message, signature.subarray(0, 63), key.publicKey)).toBe(false);
    }
  });
});
