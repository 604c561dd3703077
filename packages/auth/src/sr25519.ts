import * as scure from "@scure/sr25519";
import { AuthError } from "./errors";
import { decodeAddress, type AddressOptions } from "./ss58";

/**
 * The sr25519 signature check Proctor uses. The default is `scureSr25519` (pure TypeScript,
 * audited); `loadSchnorrkelWasm()` returns a faster one backed by the schnorrkel Rust crate.
 * `verify` returns false for anything that is not a valid signature by `publicKey`, including
 * byte strings that are not curve points.
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

/**
 * Load sr25519 verification from `@polkadot/wasm-crypto` (schnorrkel compiled to WebAssembly;
 * an optional peer dependency). About 4x faster than the pure TypeScript default; use it on
 * servers that verify many requests. Throws `Sr25519EngineError` when it is not installed.
 */
export async function loadSchnorrkelWasm(): Promise<Sr25519Verifier> {
  let wasm: typeof import("@polkadot/wasm-crypto");
  try {
    wasm = await import("@polkadot/wasm-crypto");
  } catch (cause) {
    throw new Sr25519EngineError("@polkadot/wasm-crypto is not installed; add it to your app (pnpm add @polkadot/wasm-crypto) or use the default verifier", { cause });
  }
  if (!(await wasm.waitReady())) throw new Sr25519EngineError("@polkadot/wasm-crypto failed to initialise its WebAssembly module");
  return {
    name: "@polkadot/wasm-crypto (schnorrkel)",
    verify(message, signature, publicKey) {
      if (signature.length !== 64 || publicKey.length !== 32) return false;
      try {
        return wasm.sr25519Verify(signature, message, publicKey);
      } catch {
        // The Rust side rejects non-point keys by trapping; such a key cannot have signed anything.
        return false;
      }
    },
  };
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
  const verifier = options.verifier ?? scureSr25519;
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
