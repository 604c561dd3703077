import { chmodSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { inspect } from "node:util";
import { Keyring } from "@polkadot/keyring";
import { cryptoWaitReady, mnemonicGenerate, mnemonicValidate } from "@polkadot/util-crypto";
import * as schnorrkel from "@polkadot/wasm-crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { catchError, recordingLogger } from "../test/helpers";
import { KeyLoadError } from "./errors";
import { DEV_PHRASE, Keypair, loadKeypair } from "./keys";
import { verifyMessage } from "./sr25519";

const ALICE = "5GrwvaEF5zXb26Fz9rcQpDWS57CtERHpNehXCPcNoHGKutQY";
let dir: string;
let mnemonic: string;
beforeAll(async () => {
  await cryptoWaitReady();
  await schnorrkel.waitReady();
  dir = mkdtempSync(join(tmpdir(), "proctor-auth-keys-"));
  mnemonic = mnemonicGenerate(12);
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const keyring = () => new Keyring({ type: "sr25519", ss58Format: 42 });

describe("Keypair.fromUri", () => {
  it("derives //Alice to the well-known address", () => {
    expect(Keypair.fromUri("//Alice").address).toBe(ALICE);
  });

  it("matches @polkadot/keyring for dev URIs, mnemonics, hex seeds, hard/soft/numeric/long junctions and passwords", () => {
    const seed = `0x${"ab".repeat(32)}`;
    const uris = [
      "//Bob",
      "//Alice/stash",
      `${DEV_PHRASE}//Charlie`,
      mnemonic,
      `${mnemonic}//hard/soft//0/42`,
      `${mnemonic}//${"a-very-long-junction-name-longer-than-thirty-two-bytes"}`,
      `${mnemonic}///secret password`,
      `${mnemonic}//polkadot///pw`,
      seed,
      `${seed}//validator/1`,
    ];
    for (const uri of uris) {
      expect(Keypair.fromUri(uri).address, uri).toBe(keyring().addFromUri(uri).address);
    }
  });

  it("matches schnorrkel's own hard derivation (independent of polkadot.js)", () => {
    const seed = new Uint8Array(32).fill(3);
    const cc = new Uint8Array(32);
    cc.set([5 << 2, ...new TextEncoder().encode("Alice")]);
    const derived = schnorrkel.sr25519DeriveKeypairHard(schnorrkel.sr25519KeypairFromSeed(seed), cc);
    const ours = Keypair.fromUri(`0x${"03".repeat(32)}//Alice`);
    expect(Buffer.from(ours.publicKey).toString("hex")).toBe(Buffer.from(derived.slice(64)).toString("hex"));
  });

  it("signs so that the signature verifies for its address", () => {
    const key = Keypair.fromUri(`${mnemonic}//proctor`);
    const message = new TextEncoder().encode("m");
    expect(verifyMessage(message, key.sign(message), key.address, { wrapping: "raw" })).toBe(true);
  });

  it("never shows the secret in JSON, inspect or String()", () => {
    const key = Keypair.fromUri(mnemonic);
    for (const shown of [JSON.stringify(key), inspect(key, { showHidden: true, depth: 5 }), String(key), `${key.toString()}`]) {
      expect(shown).not.toContain(mnemonic.split(" ").slice(0, 2).join(" "));
      expect(shown).not.toMatch(/secret|Uint8Array/i);
      expect(shown).toContain(key.address);
    }
    expect(Object.keys(key)).toEqual(["address"]);
  });

  it("rejects a bad mnemonic without echoing it, and malformed seeds", () => {
    // Fixed vectors with a wrong BIP39 checksum (a random phrase with its words rotated keeps a
    // valid checksum about 1 time in 16, which made this test flaky).
    const invalid = [
      "drive obey lake curtain smoke basket hold race lonely fit walk bottom", // DEV_PHRASE rotated
      "winner thank year wave sausage worth useful legal winner thank yellow legal", // BIP39 vector rotated
      Array(12).fill("abandon").join(" "), // "abandon" x11 + "about" is the valid one
    ];
    for (const phrase of invalid) {
      expect(mnemonicValidate(phrase), phrase).toBe(false);
      const error = catchError(() => Keypair.fromUri(`${phrase}//x`));
      expect(error, phrase).toBeInstanceOf(KeyLoadError);
      expect((error as Error).message).toContain("not a valid BIP39 mnemonic");
      for (const word of new Set(phrase.split(" "))) expect((error as Error).message).not.toContain(word);
    }
    expect(catchError(() => Keypair.fromUri("0x1234"))).toBeInstanceOf(KeyLoadError);
    expect(catchError(() => Keypair.fromUri(`0x${"00".repeat(32)}///pw`))).toBeInstanceOf(KeyLoadError);
    expect(catchError(() => Keypair.fromUri("   "))).toBeInstanceOf(KeyLoadError);
  });
});

describe("loadKeypair", () => {
  it("loads from $PROCTOR_HOTKEY_URI and warns that a dev key is in use", () => {
    const { lines, logger } = recordingLogger();
    const key = loadKeypair({ env: { PROCTOR_HOTKEY_URI: "//Alice" }, logger });
    expect(key.address).toBe(ALICE);
    expect(lines.some((l) => l.level === "warn" && /development key/.test(l.message))).toBe(true);
    const spelledOut = recordingLogger();
    loadKeypair({ uri: `${DEV_PHRASE}//Bob`, logger: spelledOut.logger });
    expect(spelledOut.lines.some((l) => /development key/.test(l.message))).toBe(true);
    const real = recordingLogger();
    loadKeypair({ uri: mnemonic, logger: real.logger });
    expect(real.lines).toEqual([]);
  });

  it("loads a mnemonic file named by $PROCTOR_HOTKEY_FILE and warns about loose permissions", () => {
    const file = join(dir, "hotkey.txt");
    writeFileSync(file, `${mnemonic}//x\n`);
    chmodSync(file, 0o644);
    const { lines, logger } = recordingLogger();
    const key = loadKeypair({ env: { PROCTOR_HOTKEY_FILE: file }, logger });
    expect(key.address).toBe(keyring().addFromUri(`${mnemonic}//x`).address);
    expect(lines.some((l) => l.level === "warn" && /chmod 600/.test(l.message))).toBe(true);
    expect(JSON.stringify(lines)).not.toContain(mnemonic);
    chmodSync(file, 0o600);
    const quiet = recordingLogger();
    loadKeypair({ file, logger: quiet.logger });
    expect(quiet.lines).toEqual([]);
  });

  it("reads a Bittensor hotkey JSON file and checks its ss58Address", () => {
    const pair = keyring().addFromUri(mnemonic);
    const file = join(dir, "default");
    writeFileSync(file, JSON.stringify({ secretPhrase: mnemonic, ss58Address: pair.address }), { mode: 0o600 });
    expect(loadKeypair({ file }).address).toBe(pair.address);
    writeFileSync(file, JSON.stringify({ secretPhrase: mnemonic, ss58Address: ALICE }), { mode: 0o600 });
    const error = catchError(() => loadKeypair({ file }));
    expect(error).toBeInstanceOf(KeyLoadError);
    expect((error as Error).message).toContain("does not match");
  });

  it("names the missing or conflicting source", () => {
    const none = catchError(() => loadKeypair({ env: {} }));
    expect(none).toBeInstanceOf(KeyLoadError);
    expect((none as Error).message).toContain("PROCTOR_HOTKEY_URI");
    const both = catchError(() => loadKeypair({ env: { PROCTOR_HOTKEY_URI: "//Bob", PROCTOR_HOTKEY_FILE: "/x" } }));
    expect((both as Error).message).toContain("keep only one");
    const missing = catchError(() => loadKeypair({ file: join(dir, "nope") }));
    expect((missing as KeyLoadError).source).toBe(join(dir, "nope"));
  });
});
