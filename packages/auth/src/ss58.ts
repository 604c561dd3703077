import { blake2b } from "@noble/hashes/blake2.js";
import bs58 from "bs58";
import {
  AddressBase58Error,
  AddressChecksumError,
  AddressLengthError,
  AddressPrefixError,
  InvalidAddressError,
} from "./errors";

/** The generic Substrate network prefix (addresses starting with "5"); Bittensor uses it too. */
export const SUBSTRATE_SS58_PREFIX = 42;

/** Largest network prefix SS58 can encode (14 bits). */
export const MAX_SS58_PREFIX = 16383;

/** An SS58 address split into its account id and network prefix. */
export interface DecodedAddress {
  /** The 32-byte account id, for sr25519 keys the public key. */
  readonly publicKey: Uint8Array;
  /** The network prefix, 0..16383. */
  readonly prefix: number;
}

export interface AddressOptions {
  /** When set, an address for another network is rejected with `AddressPrefixError`. */
  expectedPrefix?: number;
}

const ACCOUNT_ID_BYTES = 32;
const CHECKSUM_BYTES = 2;
/** 36 bytes (2-byte prefix) encode to at most 50 base58 characters; anything longer is not an address. */
const MAX_ADDRESS_CHARS = 60;
const SS58PRE = new TextEncoder().encode("SS58PRE");
/** Prefixes Substrate reserves and refuses to use for addresses. */
const RESERVED_PREFIXES = new Set([46, 47]);

function checksum(payload: Uint8Array): Uint8Array {
  const input = new Uint8Array(SS58PRE.length + payload.length);
  input.set(SS58PRE, 0);
  input.set(payload, SS58PRE.length);
  return blake2b(input, { dkLen: 64 }).subarray(0, CHECKSUM_BYTES);
}

function prefixProblem(prefix: number): string | null {
  if (!Number.isInteger(prefix) || prefix < 0 || prefix > MAX_SS58_PREFIX) return `network prefix must be an integer 0..${MAX_SS58_PREFIX}`;
  if (RESERVED_PREFIXES.has(prefix)) return `network prefix ${prefix} is reserved by Substrate`;
  return null;
}

/**
 * Decode an SS58 address holding a 32-byte account id (simple and two-byte network prefixes).
 * Throws an `InvalidAddressError` subclass naming the problem: bad base58, bad checksum, wrong
 * length, or a wrong/reserved/non-canonical prefix.
 */
export function decodeAddress(address: string, options: AddressOptions = {}): DecodedAddress {
  if (typeof address !== "string" || address.length === 0) throw new AddressBase58Error(String(address));
  if (address.length > MAX_ADDRESS_CHARS) {
    throw new AddressLengthError(address, -1, `${address.length} characters is too long for an SS58 address`);
  }
  let data: Uint8Array;
  try {
    data = bs58.decode(address);
  } catch (cause) {
    throw new AddressBase58Error(address, { cause });
  }
  const first = data[0];
  if (first === undefined) throw new AddressLengthError(address, 0, "decodes to no bytes");
  let prefix: number;
  let prefixBytes: number;
  if (first < 64) {
    prefix = first;
    prefixBytes = 1;
  } else if (first < 128) {
    const second = data[1];
    if (second === undefined) throw new AddressLengthError(address, data.length, `decodes to ${data.length} byte(s)`);
    const lower = ((first << 2) | (second >> 6)) & 0xff;
    const upper = second & 0b0011_1111;
    prefix = lower | (upper << 8);
    prefixBytes = 2;
    if (prefix < 64) {
      throw new AddressPrefixError(address, prefix, options.expectedPrefix ?? null, `network prefix ${prefix} uses a non-canonical two-byte encoding`);
    }
  } else {
    throw new AddressPrefixError(address, null, options.expectedPrefix ?? null, `first byte ${first} is not a valid SS58 prefix byte (must be < 128)`);
  }
  const expectedLength = prefixBytes + ACCOUNT_ID_BYTES + CHECKSUM_BYTES;
  if (data.length !== expectedLength) {
    throw new AddressLengthError(address, data.length - prefixBytes - CHECKSUM_BYTES, `decodes to ${data.length} bytes instead of ${expectedLength}`);
  }
  const payload = data.subarray(0, prefixBytes + ACCOUNT_ID_BYTES);
  const sum = checksum(payload);
  if (sum[0] !== data[expectedLength - 2] || sum[1] !== data[expectedLength - 1]) throw new AddressChecksumError(address);
  const problem = prefixProblem(prefix);
  if (problem) throw new AddressPrefixError(address, prefix, options.expectedPrefix ?? null, problem);
  if (options.expectedPrefix !== undefined && prefix !== options.expectedPrefix) {
    throw new AddressPrefixError(
      address,
      prefix,
      options.expectedPrefix,
      `network prefix is ${prefix} but ${options.expectedPrefix} is expected; re-encode the key for the right network`,
    );
  }
  return { publicKey: data.slice(prefixBytes, prefixBytes + ACCOUNT_ID_BYTES), prefix };
}

/** Encode a 32-byte account id as an SS58 address for `prefix` (default 42, generic Substrate). */
export function encodeAddress(publicKey: Uint8Array, prefix: number = SUBSTRATE_SS58_PREFIX): string {
  if (!(publicKey instanceof Uint8Array) || publicKey.length !== ACCOUNT_ID_BYTES) {
    const length = publicKey instanceof Uint8Array ? publicKey.length : -1;
    throw new AddressLengthError("", length, `cannot encode ${length < 0 ? "a non-byte value" : `${length} bytes`}`);
  }
  const problem = prefixProblem(prefix);
  if (problem) throw new AddressPrefixError("", Number.isInteger(prefix) ? prefix : null, null, problem);
  const prefixBytes =
    prefix < 64
      ? Uint8Array.of(prefix)
      : Uint8Array.of(((prefix & 0b1111_1100) >> 2) | 0b0100_0000, (prefix >> 8) | ((prefix & 0b11) << 6));
  const payload = new Uint8Array(prefixBytes.length + ACCOUNT_ID_BYTES);
  payload.set(prefixBytes, 0);
  payload.set(publicKey, prefixBytes.length);
  const sum = checksum(payload);
  const full = new Uint8Array(payload.length + CHECKSUM_BYTES);
  full.set(payload, 0);
  full.set(sum, payload.length);
  return bs58.encode(full);
}

/** True when `address` decodes (and matches `expectedPrefix` if given); never throws. */
export function isValidAddress(address: string, options: AddressOptions = {}): boolean {
  try {
    decodeAddress(address, options);
    return true;
  } catch (error) {
    if (error instanceof InvalidAddressError) return false;
    throw error;
  }
}
