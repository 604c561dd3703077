import * as scure from "@scure/sr25519";
import { AuthError } from "./errors";
import { decodeAddress, type AddressOptions } from "./ss58";

/**
 * An sr25519 signature check. The default, `defaultSr25519`, is schnorrkel itself (the Rust
 * crate compiled to WebAssembly, `loadSchnorrkelWasm()`) once it has loaded, and the audited
 * pure-TypeScript `scureSr25519` until then. `verify` returns false for anything that is not a
 * valid signature by `publicKey`, including byte strings that are not curve points and the
 * identity key.
 */
export interface Sr25519Verifier {
  readonly name: string;
  verify(message: Uint8Array, signature: Uint8Array, publicKey: Uint8Array): boolean;
}

/** Thrown by `loadSchnorrkelWasm` when the optional `@polkadot/wasm-crypto` cannot be loaded. */
export class Sr25519EngineError extends AuthError {}

/** sr25519 verification by @scure/sr25519. */
export const scureSr25519: Sr25519Verifier = {
  name: "@scure/sr25519",
  verify(message, signature, publicKey) {
    if (signature.length !== 64 || publicKey.length !== 32) return false;
    try {
      return scure.verify(message, signature, publicKey);
    } catch {
      // scure throws for a missing schnorrkel marker bit or bytes that are not a ristretto point:
      // such a signature/key cannot verify, which is exactly what `false` says.
      return false;
    }
  },
};

/** True for the 32 zero bytes: the ristretto encoding of the identity point (its only encoding). */
function isIdentityKey(publicKey: Uint8Array): boolean {
  for (const byte of publicKey) if (byte !== 0) return false;
  return true;
}

/**
 * Load sr25519 verification from `@polkadot/wasm-crypto` (schnorrkel compiled to WebAssembly),
 * 4-7x faster than `scureSr25519`. Throws `Sr25519EngineError` when it cannot load.
 *
 * schnorrkel accepts any `(R = s·B, s)` as a signature by the identity key (32 zero bytes, the
 * SS58 "zero account"), for every message; @scure/sr25519 refuses that key, and so does this
 * wrapper, so both engines give the same answers (sr25519.test.ts checks them against each other).
 */
export async function loadSchnorrkelWasm(): Promise<Sr25519Verifier> {
  let wasm: typeof import("@polkadot/wasm-crypto");
  try {
    wasm = await import("@polkadot/wasm-crypto");
  } catch (cause) {
    throw new Sr25519EngineError("@polkadot/wasm-crypto did not load (reinstall with pnpm install); the default verifier stays on @scure/sr25519", { cause });
  }
  if (!(await wasm.waitReady())) throw new Sr25519EngineError("@polkadot/wasm-crypto failed to initialise its WebAssembly module");
  return {
    name: "@polkadot/wasm-crypto (schnorrkel)",
    verify(message, signature, publicKey) {
      if (signature.length !== 64 || publicKey.length !== 32 || isIdentityKey(publicKey)) return false;
      try {
        return wasm.sr25519Verify(signature, message, publicKey);
      } catch {
        // Should the Rust side trap on some input, that input cannot be a valid signature.
        return false;
      }
    },
  };
}

let fast: Sr25519Verifier | null = null;
let loading: Promise<Sr25519Verifier> | undefined;
function loadFast(): Promise<Sr25519Verifier> {
  loading ??= loadSchnorrkelWasm().then((verifier) => (fast = verifier));
  return loading;
}

/**
 * The default verifier: schnorrkel in WebAssembly once loaded, `scureSr25519` before. Its first
 * use starts the load (tens of ms, in the background: `verify` stays synchronous), so a process
 * that never verifies never loads it; `await sr25519Ready()` at start-up to have it from the first
 * request and to hear of a failure. Both engines give the same answers; only speed differs.
 */
export const defaultSr25519: Sr25519Verifier = {
  get name() {
    return fast?.name ?? scureSr25519.name;
  },
  verify(message, signature, publicKey) {
    if (fast) return fast.verify(message, signature, publicKey);
    loadFast().catch(() => undefined); // sr25519Ready() reports the failure; until then scure answers
    return scureSr25519.verify(message, signature, publicKey);
  },
};

/**
 * Loads the default verifier's fast engine; resolves to its name. Rejects with
 * `Sr25519EngineError` when it cannot load (the default then keeps using @scure/sr25519).
 */
export async function sr25519Ready(): Promise<string> {
  return (await loadFast()).name;
}

const BYTES_OPEN = new TextEncoder().encode("<Bytes>");
const BYTES_CLOSE = new TextEncoder().encode("</Bytes>");

/** Wrap `message` as polkadot.js extensions do before signing raw bytes: `<Bytes>message</Bytes>`. */
export function wrapBytes(message: Uint8Array): Uint8Array {
  if (isWrapped(message)) return message;
  const out = new Uint8Array(BYTES_OPEN.length + message.length + BYTES_CLOSE.length);
  out.set(BYTES_OPEN, 0);
  out.set(message, BYTES_OPEN.length);
  out.set(BYTES_CLOSE, BYTES_OPEN.length + message.length);
  return out;
}

/** True when `message` already carries the `<Bytes>…</Bytes>` wrapping. */
export function isWrapped(message: Uint8Array): boolean {
  if (message.length < BYTES_OPEN.length + BYTES_CLOSE.length) return false;
  for (let i = 0; i < BYTES_OPEN.length; i++) if (message[i] !== BYTES_OPEN[i]) return false;
  const tail = message.length - BYTES_CLOSE.length;
  for (let i = 0; i < BYTES_CLOSE.length; i++) if (message[tail + i] !== BYTES_CLOSE[i]) return false;
  return true;
}

/** Which message forms a signature may cover. */
export type MessageWrapping = "raw" | "bytes" | "either";

export interface VerifyMessageOptions extends AddressOptions {
  /** "raw": exactly the message; "bytes": the polkadot.js `<Bytes>` wrapping; "either" (default): both. */
  wrapping?: MessageWrapping;
  verifier?: Sr25519Verifier;
}

/**
 * Verify an sr25519 signature over `message` by `signer` (a 32-byte public key or an SS58
 * address). With wrapping "either", a signature made by a polkadot.js wallet over
 * `<Bytes>message</Bytes>` verifies too. An invalid address throws `InvalidAddressError`.
 */
export function verifyMessage(
  message: Uint8Array,
  signature: Uint8Array,
  signer: Uint8Array | string,
  options: VerifyMessageOptions = {},
): boolean {
  const publicKey = typeof signer === "string" ? decodeAddress(signer, options).publicKey : signer;
  const verifier = options.verifier ?? defaultSr25519;
  const wrapping = options.wrapping ?? "either";
  if (wrapping !== "bytes" && verifier.verify(message, signature, publicKey)) return true;
  if (wrapping === "raw") return false;
  if (isWrapped(message)) {
    // A wrapped message may also have been signed as its inner bytes (mirrors polkadot.js).
    if (wrapping === "bytes") return verifier.verify(message, signature, publicKey);
    const inner = message.subarray(BYTES_OPEN.length, message.length - BYTES_CLOSE.length);
    return verifier.verify(inner, signature, publicKey);
  }
  return verifier.verify(wrapBytes(message), signature, publicKey);
}
