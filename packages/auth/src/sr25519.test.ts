import { Keyring } from "@polkadot/keyring";
import { u8aWrapBytes } from "@polkadot/util";
import { cryptoWaitReady, sr25519PairFromSeed, sr25519Sign, sr25519Verify } from "@polkadot/util-crypto";
import * as schnorrkel from "@polkadot/wasm-crypto";
import * as scure from "@scure/sr25519";
import fc from "fast-check";
import { beforeAll, describe, expect, it } from "vitest";
import { Keypair } from "./keys";
import { defaultSr25519, isWrapped, loadSchnorrkelWasm, scureSr25519, sr25519Ready, verifyMessage, wrapBytes, type Sr25519Verifier } from "./sr25519";

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

  it("gives the same answer in both engines for signatures and keys with bits flipped", () => {
    const key = Keypair.generate();
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 100 }), fc.nat(64 * 8 - 1), fc.nat(32 * 8 - 1), fc.boolean(), (message, sigBit, keyBit, flipKey) => {
        const signature = key.sign(message);
        const publicKey = key.publicKey.slice();
        if (flipKey) publicKey[keyBit >> 3]! ^= 1 << (keyBit & 7);
        else signature[sigBit >> 3]! ^= 1 << (sigBit & 7);
        const answer = scureSr25519.verify(message, signature, publicKey);
        expect(wasmVerifier.verify(message, signature, publicKey)).toBe(answer);
        expect(answer).toBe(false);
      }),
      { numRuns: 300 },
    );
  });

  it("refuses, in both engines, a scalar not reduced mod l, a signature without schnorrkel's marker, and any signature by the identity key", () => {
    // A secret key's first 32 bytes hold its scalar times the cofactor 8 (schnorrkel's
    // ed25519-style encoding): 456 = 57 x 8 is the scalar 57; the nonce is zero.
    const secret = new Uint8Array(64);
    secret.set([456 & 0xff, 456 >> 8]);
    const message = text("anything at all");
    const signature = scure.sign(secret, message);
    const publicKey = scure.getPublicKey(secret);
    const l = 2n ** 252n + 27742317777372353535851937790883648493n;
    const le = (n: bigint) => Uint8Array.from({ length: 32 }, (_, i) => Number((n >> BigInt(8 * i)) & 0xffn));
    const scalarOf = (sig: Uint8Array) => sig.subarray(32).reduceRight((n, byte, i) => n | (BigInt(i === 31 ? byte & 0x7f : byte) << BigInt(8 * i)), 0n);

    const unreduced = signature.slice();
    unreduced.set(le(scalarOf(signature) + l), 32);
    unreduced[63]! |= 0x80;
    const unmarked = signature.slice();
    unmarked[63]! &= 0x7f;
    // (R = s·B, s) for the identity key A = 0 passes R == s·B - k·A for every message: R here is
    // the public key of the scalar 57 (57·B), s = 57.
    const forged = new Uint8Array(64);
    forged.set(publicKey, 0);
    forged.set(le(57n), 32);
    forged[63]! |= 0x80;
    const identity = new Uint8Array(32);
    expect(schnorrkel.sr25519Verify(forged, message, identity)).toBe(true); // schnorrkel alone takes it

    for (const verifier of [scureSr25519, wasmVerifier, defaultSr25519]) {
      expect(verifier.verify(message, signature, publicKey)).toBe(true);
      expect(verifier.verify(message, unreduced, publicKey)).toBe(false);
      expect(verifier.verify(message, unmarked, publicKey)).toBe(false);
      expect(verifier.verify(message, forged, identity)).toBe(false);
    }
  });

  it("the default verifier is schnorrkel once loaded, and verifyMessage uses it", async () => {
    expect(await sr25519Ready()).toBe("@polkadot/wasm-crypto (schnorrkel)");
    expect(defaultSr25519.name).toBe("@polkadot/wasm-crypto (schnorrkel)");
    const key = Keypair.generate();
    const message = text("default");
    expect(verifyMessage(message, key.sign(message), key.address, { wrapping: "raw" })).toBe(true);
    expect(verifyMessage(text("defaulT"), key.sign(message), key.address, { wrapping: "raw" })).toBe(false);
  });
});
