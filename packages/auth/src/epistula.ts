import { createHash, randomUUID } from "node:crypto";
import { hexToBytes } from "@noble/hashes/utils.js";
import type { Allowlist } from "./allowlist";
import {
  BadSignatureError,
  InvalidAddressError,
  MalformedHeaderError,
  NotAllowedError,
  ReplayedRequestError,
  TimestampOutOfWindowError,
  UnsupportedVersionError,
  WrongRecipientError,
} from "./errors";
import { contentDigestHeader, CONTENT_DIGEST_HEADER } from "./content-digest";
import { HeaderReader, type HeadersInput } from "./headers";
import type { Keypair } from "./keys";
import type { ReplayStore } from "./replay-cache";
import { defaultSr25519, verifyMessage, type Sr25519Verifier } from "./sr25519";
import { decodeAddress } from "./ss58";

/** Epistula v2 header names, as sent by `signRequest`. Matching is case-insensitive. */
export const EPISTULA_HEADERS = {
  version: "Epistula-Version",
  timestamp: "Epistula-Timestamp",
  uuid: "Epistula-Uuid",
  signedBy: "Epistula-Signed-By",
  signedFor: "Epistula-Signed-For",
  signature: "Epistula-Request-Signature",
} as const;

/** Default accepted clock difference between client and server. */
export const DEFAULT_MAX_SKEW_MS = 30_000;
/** Default extra time the split API allows between `checkHeaders` and `verifySignature` (body upload). */
export const DEFAULT_MAX_BODY_MS = 300_000;

const H = EPISTULA_HEADERS;
const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const TIMESTAMP_RE = /^\d{1,16}$/;
const SIGNATURE_RE = /^0x[0-9a-f]{128}$/i;
const SHA256_RE = /^[0-9a-f]{64}$/i;

/** A request body: its bytes, a UTF-8 string, or the hex sha256 a server computed while streaming it. */
export type BodyInput = Uint8Array | string | { readonly sha256Hex: string };

/** Lowercase hex sha256 of a body (strings are UTF-8). */
export function sha256Hex(body: Uint8Array | string): string {
  return createHash("sha256").update(body).digest("hex");
}

function bodyHash(body: BodyInput): string {
  if (typeof body === "string" || body instanceof Uint8Array) return sha256Hex(body);
  if (typeof body?.sha256Hex !== "string" || !SHA256_RE.test(body.sha256Hex)) {
    throw new TypeError("body.sha256Hex must be 64 hex digits (the sha256 of the request body)");
  }
  return body.sha256Hex.toLowerCase();
}

/** The exact text an Epistula v2 signature covers. */
export function epistulaMessage(bodySha256Hex: string, uuid: string, timestamp: string, signedFor: string | undefined): string {
  return `${bodySha256Hex}.${uuid}.${timestamp}.${signedFor ?? ""}`;
}

export interface SignRequestOptions {
  keypair: Keypair;
  body: BodyInput;
  /** SS58 address of the receiving server, when it has one. */
  signedFor?: string;
  /** Clock in ms since the epoch (default `Date.now()`). */
  now?: number;
  /** Request id (default a random UUID v4); tests only. */
  uuid?: string;
  /**
   * Also return `Content-Digest: sha-256=:<base64>:` (RFC 9530) for the body, so a server can
   * verify the signature before reading the body (required by Proctor's server for uploads).
   */
  contentDigest?: boolean;
}

/** Epistula v2 request headers, ready to merge into a fetch/undici request. */
export function signRequest(options: SignRequestOptions): Record<string, string> {
  const timestamp = String(Math.trunc(options.now ?? Date.now()));
  const uuid = options.uuid ?? randomUUID();
  const signedFor = options.signedFor === "" ? undefined : options.signedFor;
  const bodySha256 = bodyHash(options.body);
  const message = epistulaMessage(bodySha256, uuid, timestamp, signedFor);
  const signature = options.keypair.sign(new TextEncoder().encode(message));
  const headers: Record<string, string> = {
    [H.version]: "2",
    [H.timestamp]: timestamp,
    [H.uuid]: uuid,
    [H.signedBy]: options.keypair.address,
    [H.signature]: `0x${Buffer.from(signature).toString("hex")}`,
  };
  if (signedFor !== undefined) headers[H.signedFor] = signedFor;
  if (options.contentDigest === true) headers[CONTENT_DIGEST_HEADER] = contentDigestHeader(bodySha256);
  return headers;
}

export interface CheckHeadersOptions {
  headers: HeadersInput;
  allowlist: Allowlist;
  /** Server clock in ms since the epoch (default `Date.now()`). */
  now?: number;
  /** Accepted clock difference in either direction (default 30,000 ms). */
  maxSkewMs?: number;
  /**
   * Longest time after the timestamp window closes that `verifySignature` still accepts the
   * request (a slow body upload). Default 300,000 ms; `verifyRequest` uses 0. Replay entries are
   * kept this long too, so one uuid can never pass twice.
   */
  maxBodyMs?: number;
  /** This server's own SS58 address: when set, `Epistula-Signed-For` must be present and equal to it. */
  expectedSignedFor?: string;
  /** Reject `Epistula-Signed-By` addresses of other networks. */
  ss58Prefix?: number;
}

/** Headers that passed `checkHeaders`; hand it to `verifySignature` once the body hash is known. */
export interface CheckedHeaders {
  readonly hotkey: string;
  readonly publicKey: Uint8Array;
  readonly uuid: string;
  readonly timestamp: string;
  readonly timestampMs: number;
  readonly signedFor: string | undefined;
  readonly signature: Uint8Array;
  /** After this instant `verifySignature` refuses the request; the replay entry lives until then. */
  readonly deadlineMs: number;
}

const checked = new WeakSet<CheckedHeaders>();

/**
 * Check Epistula v2 headers without the body: presence (once each), version, shapes, the
 * timestamp window, the Signed-By address, Signed-For, and the allowlist. Does not touch the
 * replay cache. Throws a `RequestAuthError` (401, or 403 `NotAllowedError`).
 * Note: a 403 here only means the *claimed* hotkey is not allowed; nothing is proven yet.
 */
export function checkHeaders(options: CheckHeadersOptions): CheckedHeaders {
  const now = options.now ?? Date.now();
  const maxSkewMs = options.maxSkewMs ?? DEFAULT_MAX_SKEW_MS;
  const maxBodyMs = options.maxBodyMs ?? DEFAULT_MAX_BODY_MS;
  const reader = new HeaderReader(options.headers);
  const hint = "sign requests with Epistula v2 (see @proctor/auth signRequest)";
  const version = reader.require(H.version, hint);
  const timestamp = reader.require(H.timestamp, hint);
  const uuid = reader.require(H.uuid, hint);
  const signedBy = reader.require(H.signedBy, hint);
  const signatureHex = reader.require(H.signature, hint);
  const signedForRaw = reader.get(H.signedFor);
  const signedFor = signedForRaw === "" ? undefined : signedForRaw;

  if (version !== "2") throw new UnsupportedVersionError(H.version, version);
  if (!TIMESTAMP_RE.test(timestamp)) throw new MalformedHeaderError(H.timestamp, "milliseconds since the Unix epoch as a decimal integer");
  if (!UUID_RE.test(uuid)) throw new MalformedHeaderError(H.uuid, "a UUID like 0b7e3c9a-1f2d-4e5b-8a6c-7d8e9f0a1b2c");
  if (!SIGNATURE_RE.test(signatureHex)) throw new MalformedHeaderError(H.signature, "0x followed by 128 hex digits (a 64-byte sr25519 signature)");
  let publicKey: Uint8Array;
  try {
    publicKey = decodeAddress(signedBy, { expectedPrefix: options.ss58Prefix }).publicKey;
  } catch (cause) {
    if (!(cause instanceof InvalidAddressError)) throw cause;
    throw new MalformedHeaderError(H.signedBy, `an SS58 hotkey address (${cause.message})`, { cause });
  }
  if (signedFor !== undefined) {
    try {
      decodeAddress(signedFor);
    } catch (cause) {
      if (!(cause instanceof InvalidAddressError)) throw cause;
      throw new MalformedHeaderError(H.signedFor, `the receiver's SS58 address (${cause.message})`, { cause });
    }
  }
  if (options.expectedSignedFor !== undefined && signedFor !== options.expectedSignedFor) {
    throw new WrongRecipientError(H.signedFor, signedFor, options.expectedSignedFor);
  }
  const timestampMs = Number(timestamp);
  const skewMs = timestampMs - now;
  if (skewMs < -maxSkewMs) throw new TimestampOutOfWindowError(H.timestamp, "stale", skewMs, maxSkewMs);
  if (skewMs > maxSkewMs) throw new TimestampOutOfWindowError(H.timestamp, "future", skewMs, maxSkewMs);
  if (!options.allowlist.hasPublicKey(publicKey)) throw new NotAllowedError(H.signedBy, signedBy);

  const result: CheckedHeaders = Object.freeze({
    hotkey: signedBy,
    publicKey,
    uuid,
    timestamp,
    timestampMs,
    signedFor,
    signature: hexToBytes(signatureHex.slice(2)),
    deadlineMs: timestampMs + maxSkewMs + maxBodyMs,
  });
  checked.add(result);
  return result;
}

export interface VerifySignatureOptions {
  /** Server clock when the body has been read (default `Date.now()`). */
  now?: number;
  /** sr25519 implementation (default `defaultSr25519`). */
  verifier?: Sr25519Verifier;
}

/**
 * Second half of the split: check the signature over the body hash, then record the uuid in
 * the replay cache. Throws `BadSignatureError`, `ReplayedRequestError`, `TimestampOutOfWindowError`
 * (body arrived after `deadlineMs`) or `ReplayCacheFullError`.
 */
export function verifySignature(
  headers: CheckedHeaders,
  bodySha256Hex: string,
  replayCache: ReplayStore,
  options: VerifySignatureOptions = {},
): { hotkey: string } {
  if (!checked.has(headers)) throw new TypeError("verifySignature needs the object returned by checkHeaders");
  if (typeof bodySha256Hex !== "string" || !SHA256_RE.test(bodySha256Hex)) {
    throw new TypeError("bodySha256Hex must be the 64-hex-digit sha256 of the request body");
  }
  const now = options.now ?? Date.now();
  if (now > headers.deadlineMs) {
    throw new TimestampOutOfWindowError(
      H.timestamp,
      "stale",
      headers.timestampMs - now,
      headers.deadlineMs - headers.timestampMs,
      `request header ${H.timestamp} is ${now - headers.timestampMs} ms old by the time the body was read; the request took too long`,
    );
  }
  const message = new TextEncoder().encode(epistulaMessage(bodySha256Hex.toLowerCase(), headers.uuid, headers.timestamp, headers.signedFor));
  if (!verifyMessage(message, headers.signature, headers.publicKey, { verifier: options.verifier ?? defaultSr25519 })) {
    throw new BadSignatureError(
      H.signature,
      `does not verify for ${headers.hotkey} over sha256(body).uuid.timestamp.signedFor; the body or a signed header was changed, or another key signed it`,
    );
  }
  // Keyed by public key, not by the Signed-By text: the signature does not cover Signed-By, so the
  // same key re-encoded under another network prefix must not count as a new request.
  const replayKey = `${Buffer.from(headers.publicKey).toString("hex")}/${headers.uuid.toLowerCase()}`;
  if (!replayCache.checkAndRecord(replayKey, headers.deadlineMs, now)) {
    throw new ReplayedRequestError(H.uuid);
  }
  return { hotkey: headers.hotkey };
}

export interface VerifyRequestOptions extends Omit<CheckHeadersOptions, "maxBodyMs"> {
  body: BodyInput;
  replayCache: ReplayStore;
  verifier?: Sr25519Verifier;
}

/** Verify a whole Epistula v2 request: `checkHeaders` then `verifySignature`. Returns the verified hotkey. */
export function verifyRequest(options: VerifyRequestOptions): { hotkey: string } {
  const now = options.now ?? Date.now();
  const parsed = checkHeaders({ ...options, now, maxBodyMs: 0 });
  return verifySignature(parsed, bodyHash(options.body), options.replayCache, { now, verifier: options.verifier });
}
