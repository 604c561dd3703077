import { readFileSync, statSync } from "node:fs";
import { blake2b } from "@noble/hashes/blake2.js";
import { pbkdf2 } from "@noble/hashes/pbkdf2.js";
import { sha512 } from "@noble/hashes/sha2.js";
import { hexToBytes } from "@noble/hashes/utils.js";
import type { Logger } from "@proctor/schema";
import { silentLogger } from "@proctor/schema";
import { mnemonicToEntropy } from "@scure/bip39";
import { wordlist as english } from "@scure/bip39/wordlists/english.js";
import * as scure from "@scure/sr25519";
import { KeyLoadError } from "./errors";
import { decodeAddress, encodeAddress, SUBSTRATE_SS58_PREFIX } from "./ss58";

/** The phrase behind Substrate's development accounts (`//Alice`, `//Bob`, ...). Public: never use for real funds or access. */
export const DEV_PHRASE = "bottom drive obey lake curtain smoke basket hold race lonely fit walk";

/** Default environment variables read by `loadKeypair`. */
export const HOTKEY_URI_ENV = "PROCTOR_HOTKEY_URI";
export const HOTKEY_FILE_ENV = "PROCTOR_HOTKEY_FILE";

const INSPECT = Symbol.for("nodejs.util.inspect.custom");

/**
 * An sr25519 key pair that can sign. The secret stays in a private field: it is not enumerable,
 * not printed by `console.log`/`util.inspect`, and not serialised by `JSON.stringify`.
 */
export class Keypair {
  readonly #secretKey: Uint8Array;
  readonly #publicKey: Uint8Array;
  /** The SS58 address of the public key (prefix given when loading, default 42). */
  readonly address: string;

  private constructor(secretKey: Uint8Array, ss58Prefix: number) {
    this.#secretKey = secretKey;
    this.#publicKey = scure.getPublicKey(secretKey);
    this.address = encodeAddress(this.#publicKey, ss58Prefix);
  }

  /** A copy of the 32-byte public key. */
  get publicKey(): Uint8Array {
    return this.#publicKey.slice();
  }

  /** Sign `message` (raw, no `<Bytes>` wrapping). */
  sign(message: Uint8Array): Uint8Array {
    return scure.sign(this.#secretKey, message);
  }

  /**
   * Load a key from a Substrate secret URI: `<mnemonic>[//hard][/soft][///password]`,
   * `0x<64 hex seed>[//hard][/soft]`, or a dev URI such as `//Alice` (the well-known dev phrase).
   * Throws `KeyLoadError` (whose message never contains the secret).
   */
  static fromUri(suri: string, options: { ss58Prefix?: number; source?: string } = {}): Keypair {
    return new Keypair(secretFromUri(suri, options.source ?? "secret URI"), options.ss58Prefix ?? SUBSTRATE_SS58_PREFIX);
  }

  /** A key from a random 32-byte seed (for tests and throwaway clients). */
  static generate(options: { ss58Prefix?: number } = {}): Keypair {
    return new Keypair(scure.secretFromSeed(crypto.getRandomValues(new Uint8Array(32))), options.ss58Prefix ?? SUBSTRATE_SS58_PREFIX);
  }

  toJSON(): { address: string } {
    return { address: this.address };
  }

  toString(): string {
    return `Keypair(${this.address})`;
  }

  [INSPECT](): string {
    return `Keypair { address: '${this.address}' }`;
  }
}

interface ParsedUri {
  phrase: string;
  junctions: { hard: boolean; code: string }[];
  password: string | undefined;
}

/** Split a secret URI the way Substrate's `SecretUri` does. Never echoes the secret in errors. */
function parseUri(suri: string, source: string): ParsedUri {
  const match = /^([\p{L}\p{N} ]*?)((?:\/\/?[^/]+)*)(?:\/\/\/(.*))?$/su.exec(suri);
  if (!match) {
    throw new KeyLoadError(source, "is not a secret URI; expected a mnemonic, a 0x-prefixed 32-byte hex seed, or a dev URI like //Alice, optionally followed by //hard and /soft derivations and ///password");
  }
  const phrase = (match[1] ?? "").trim();
  const junctions = [...(match[2] ?? "").matchAll(/(\/\/?)([^/]+)/g)].map((m) => ({ hard: m[1] === "//", code: m[2] ?? "" }));
  return { phrase: phrase === "" ? DEV_PHRASE : phrase, junctions, password: match[3] };
}

/** SCALE compact length prefix (enough for any derivation junction). */
function compactLength(n: number): Uint8Array {
  if (n < 1 << 6) return Uint8Array.of(n << 2);
  if (n < 1 << 14) return Uint8Array.of(((n << 2) | 0b01) & 0xff, n >> 6);
  if (n < 1 << 30) {
    const v = ((n << 2) | 0b10) >>> 0;
    return Uint8Array.of(v & 0xff, (v >>> 8) & 0xff, (v >>> 16) & 0xff, v >>> 24);
  }
  throw new RangeError(`derivation junction of ${n} bytes is too long`);
}

/** A junction's 32-byte chain code: a u64 for numbers, else the SCALE-encoded string; blake2b-256 when longer than 32 bytes. */
function chainCode(code: string): Uint8Array {
  let encoded: Uint8Array;
  if (/^\d+$/.test(code) && BigInt(code) < 1n << 64n) {
    encoded = new Uint8Array(8);
    new DataView(encoded.buffer).setBigUint64(0, BigInt(code), true);
  } else {
    const text = new TextEncoder().encode(code);
    const prefix = compactLength(text.length);
    encoded = new Uint8Array(prefix.length + text.length);
    encoded.set(prefix, 0);
    encoded.set(text, prefix.length);
  }
  if (encoded.length > 32) return blake2b(encoded, { dkLen: 32 });
  const out = new Uint8Array(32);
  out.set(encoded, 0);
  return out;
}

/** Substrate's mini-secret from a BIP39 mnemonic: pbkdf2-sha512 over the *entropy* (not the phrase), salt "mnemonic"+password. */
function miniSecretFromMnemonic(phrase: string, password: string, source: string): Uint8Array {
  let entropy: Uint8Array;
  try {
    entropy = mnemonicToEntropy(phrase.split(/\s+/).join(" "), english);
  } catch {
    // The library's message may quote words of the phrase: never pass it on.
    throw new KeyLoadError(source, "is not a valid BIP39 mnemonic (unknown word, wrong word count or bad checksum); check the phrase (it is not shown here)");
  }
  return pbkdf2(sha512, entropy, `mnemonic${password.normalize("NFKD")}`, { c: 2048, dkLen: 64 }).slice(0, 32);
}

function secretFromUri(suri: string, source: string): Uint8Array {
  if (typeof suri !== "string" || suri.trim() === "") throw new KeyLoadError(source, "is empty; expected a mnemonic, a 0x hex seed or a dev URI like //Alice");
  const { phrase, junctions, password } = parseUri(suri.trim(), source);
  let seed: Uint8Array;
  if (/^0x/i.test(phrase)) {
    if (!/^0x[0-9a-f]{64}$/i.test(phrase)) throw new KeyLoadError(source, "hex seed must be 0x followed by 64 hex digits (32 bytes)");
    if (password !== undefined) throw new KeyLoadError(source, "a ///password only applies to mnemonics, not to hex seeds; remove it");
    seed = hexToBytes(phrase.slice(2));
  } else {
    seed = miniSecretFromMnemonic(phrase, password ?? "", source);
  }
  let secret: Uint8Array = scure.secretFromSeed(seed);
  for (const junction of junctions) {
    const cc = chainCode(junction.code);
    secret = junction.hard ? scure.HDKD.secretHard(secret, cc) : scure.HDKD.secretSoft(secret, cc);
  }
  return secret;
}

export interface LoadKeypairOptions {
  /** A secret URI given directly (e.g. from a CLI flag); wins over everything else. */
  uri?: string;
  /** A file holding a secret URI, or a Bittensor hotkey JSON file (`secretPhrase`/`secretSeed`). */
  file?: string;
  /** Environment to read `PROCTOR_HOTKEY_URI` / `PROCTOR_HOTKEY_FILE` from (default `process.env`). */
  env?: Readonly<Record<string, string | undefined>>;
  uriEnvVar?: string;
  fileEnvVar?: string;
  ss58Prefix?: number;
  logger?: Logger;
}

/**
 * Load the client's signing key from (first match wins) `uri`, `file`, `$PROCTOR_HOTKEY_URI`,
 * or the file named by `$PROCTOR_HOTKEY_FILE`. Warns when a dev key (`//Alice`) is used or the
 * key file is readable by other users. Throws `KeyLoadError` naming the source, never the secret.
 */
export function loadKeypair(options: LoadKeypairOptions = {}): Keypair {
  const env = options.env ?? process.env;
  const logger = options.logger ?? silentLogger;
  const uriVar = options.uriEnvVar ?? HOTKEY_URI_ENV;
  const fileVar = options.fileEnvVar ?? HOTKEY_FILE_ENV;
  let suri: string;
  let source: string;
  let expectedAddress: string | undefined;
  if (options.uri !== undefined) {
    [suri, source] = [options.uri, "signing key URI"];
  } else if (options.file !== undefined) {
    source = options.file;
    ({ suri, expectedAddress } = readKeyFile(options.file, logger));
  } else {
    const fromEnv = env[uriVar];
    const fileFromEnv = env[fileVar];
    if (fromEnv && fileFromEnv) throw new KeyLoadError(`$${uriVar}`, `both $${uriVar} and $${fileVar} are set; keep only one`);
    if (fromEnv) {
      [suri, source] = [fromEnv, `$${uriVar}`];
    } else if (fileFromEnv) {
      source = `${fileFromEnv} (from $${fileVar})`;
      ({ suri, expectedAddress } = readKeyFile(fileFromEnv, logger));
    } else {
      throw new KeyLoadError(`$${uriVar}`, `no signing key configured: set $${uriVar} to a mnemonic, 0x seed or //Dev URI, or $${fileVar} to a file holding one`);
    }
  }
  const keypair = Keypair.fromUri(suri, { ss58Prefix: options.ss58Prefix, source });
  if (expectedAddress !== undefined && !sameKey(expectedAddress, keypair.publicKey)) {
    throw new KeyLoadError(source, `ss58Address ${expectedAddress} does not match the key derived from the file (${keypair.address})`);
  }
  if (/^\s*\/\//.test(suri) || suri.trim().startsWith(DEV_PHRASE)) {
    logger.warn("using a well-known development key; anyone can sign as it", { address: keypair.address, source });
  }
  return keypair;
}

function sameKey(address: string, publicKey: Uint8Array): boolean {
  let decoded: Uint8Array;
  try {
    decoded = decodeAddress(address).publicKey;
  } catch (cause) {
    throw new KeyLoadError("key file", `ss58Address ${address} is not a valid SS58 address`, { cause });
  }
  return decoded.every((byte, i) => byte === publicKey[i]);
}

function readKeyFile(path: string, logger: Logger): { suri: string; expectedAddress?: string } {
  let text: string;
  try {
    text = readFileSync(path, "utf8");
    const mode = statSync(path).mode;
    if (process.platform !== "win32" && (mode & 0o077) !== 0) {
      logger.warn("signing key file is readable by other users; run chmod 600 on it", { file: path, mode: (mode & 0o777).toString(8) });
    }
  } catch (cause) {
    throw new KeyLoadError(path, `cannot read signing key file (${(cause as NodeJS.ErrnoException).code ?? "error"})`, { cause });
  }
  const trimmed = text.trim();
  if (trimmed === "") throw new KeyLoadError(path, "signing key file is empty");
  if (!trimmed.startsWith("{")) {
    if (trimmed.startsWith("$NACL") || trimmed.startsWith("$ANSIBLE") || trimmed.startsWith("gAAAAA")) {
      throw new KeyLoadError(path, "is an encrypted keyfile; decrypt it (or export the mnemonic) first");
    }
    return { suri: trimmed };
  }
  let json: unknown;
  try {
    json = JSON.parse(trimmed);
  } catch {
    // JSON.parse messages can quote the text around the error, which may be secret.
    throw new KeyLoadError(path, "starts with { but is not valid JSON; expected a Bittensor hotkey file or a plain secret URI");
  }
  const record = (json ?? {}) as Record<string, unknown>;
  const secret = typeof record.secretSeed === "string" ? record.secretSeed : typeof record.secretPhrase === "string" ? record.secretPhrase : undefined;
  if (secret === undefined) throw new KeyLoadError(path, "JSON key file has neither secretSeed nor secretPhrase");
  const expectedAddress = typeof record.ss58Address === "string" ? record.ss58Address : undefined;
  return { suri: secret, ...(expectedAddress === undefined ? {} : { expectedAddress }) };
}
