/** Base class of every error thrown by @proctor/auth. */
export class AuthError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
  }
}

// ---------------------------------------------------------------------------------------------
// SS58 addresses

/** Why an SS58 address was rejected. */
export type AddressProblem = "base58" | "checksum" | "length" | "prefix";

/** Thrown by `decodeAddress`/`encodeAddress` when an SS58 address or its parts are invalid. */
export class InvalidAddressError extends AuthError {
  readonly address: string;
  readonly problem: AddressProblem;
  constructor(problem: AddressProblem, address: string, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.problem = problem;
    this.address = address;
  }
}

/** The address contains characters outside the base58 alphabet (or is empty). */
export class AddressBase58Error extends InvalidAddressError {
  constructor(address: string, options?: { cause?: unknown }) {
    super("base58", address, `SS58 address ${quote(address)} is not valid base58; check it was copied whole`, options);
  }
}

/** The address decodes but its 2-byte blake2b "SS58PRE" checksum does not match (a typo). */
export class AddressChecksumError extends InvalidAddressError {
  constructor(address: string) {
    super("checksum", address, `SS58 address ${quote(address)} has a bad checksum; it has a typo or was altered`);
  }
}

/** The address does not hold exactly a 32-byte account id (or the public key to encode is not 32 bytes). */
export class AddressLengthError extends InvalidAddressError {
  readonly byteLength: number;
  constructor(address: string, byteLength: number, detail: string) {
    super("length", address, `SS58 address ${quote(address)}: ${detail}; expected a 32-byte sr25519 account id`);
    this.byteLength = byteLength;
  }
}

/** The network prefix is invalid, reserved, or not the expected one (e.g. a Polkadot address where 42 is wanted). */
export class AddressPrefixError extends InvalidAddressError {
  readonly prefix: number | null;
  readonly expectedPrefix: number | null;
  constructor(address: string, prefix: number | null, expectedPrefix: number | null, detail: string) {
    super("prefix", address, `SS58 address ${quote(address)}: ${detail}`);
    this.prefix = prefix;
    this.expectedPrefix = expectedPrefix;
  }
}

// ---------------------------------------------------------------------------------------------
// Request authentication (what an HTTP server maps to a status code)

/** Stable machine-readable codes for request authentication failures (use as the JSON `error`). */
export type RequestAuthCode =
  | "missing_header"
  | "duplicate_header"
  | "unsupported_version"
  | "malformed_header"
  | "timestamp_out_of_window"
  | "wrong_recipient"
  | "replayed_request"
  | "bad_signature"
  | "invalid_token"
  | "not_allowed"
  | "replay_cache_full"
  | "replay_cache_unavailable"
  | "bad_content_digest";

/**
 * A request could not be authenticated. `statusCode` is what an HTTP server should answer
 * (400 a malformed `Content-Digest`, 401 bad or missing credentials, 403 valid but not allowed,
 * 503 try again later) and `header` names the request header at fault (null when no single header is).
 */
export class RequestAuthError extends AuthError {
  readonly statusCode: 400 | 401 | 403 | 503;
  readonly code: RequestAuthCode;
  readonly header: string | null;
  constructor(
    code: RequestAuthCode,
    statusCode: 400 | 401 | 403 | 503,
    header: string | null,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
    this.code = code;
    this.statusCode = statusCode;
    this.header = header;
  }
}

/** A required header is absent (401). */
export class MissingHeaderError extends RequestAuthError {
  constructor(header: string, hint = "") {
    super("missing_header", 401, header, `missing request header ${header}${hint ? `; ${hint}` : ""}`);
  }
}

/** A header that must appear once appears several times, or with comma-joined values (401). */
export class DuplicateHeaderError extends RequestAuthError {
  constructor(header: string) {
    super("duplicate_header", 401, header, `request header ${header} must be sent exactly once (got several values)`);
  }
}

/** `Epistula-Version` is not "2" (401). */
export class UnsupportedVersionError extends RequestAuthError {
  readonly version: string;
  constructor(header: string, version: string) {
    super("unsupported_version", 401, header, `request header ${header} is ${quote(version)}; only Epistula version "2" is supported`);
    this.version = version;
  }
}

/** A header is present but its value has the wrong shape (not an SS58 address, not a UUID, ...) (401). */
export class MalformedHeaderError extends RequestAuthError {
  constructor(header: string, expected: string, options?: { cause?: unknown }) {
    super("malformed_header", 401, header, `request header ${header} is malformed: expected ${expected}`, options);
  }
}

/** `Epistula-Timestamp` is too old ("stale") or too far ahead ("future") of the server clock (401). */
export class TimestampOutOfWindowError extends RequestAuthError {
  readonly direction: "stale" | "future";
  readonly skewMs: number;
  readonly maxSkewMs: number;
  constructor(header: string, direction: "stale" | "future", skewMs: number, maxSkewMs: number, detail?: string) {
    super(
      "timestamp_out_of_window",
      401,
      header,
      detail ??
        `request header ${header} is ${Math.abs(skewMs)} ms in the ${direction === "stale" ? "past" : "future"}, ` +
          `outside the allowed +/-${maxSkewMs} ms; sign the request just before sending it and check the client clock (NTP)`,
    );
    this.direction = direction;
    this.skewMs = skewMs;
    this.maxSkewMs = maxSkewMs;
  }
}

/** `Epistula-Signed-For` is missing or names another receiver than this server (401). */
export class WrongRecipientError extends RequestAuthError {
  constructor(header: string, got: string | undefined, expected: string) {
    super(
      "wrong_recipient",
      401,
      header,
      got === undefined
        ? `request header ${header} is required by this server and must be ${expected}`
        : `request header ${header} is ${quote(got)} but this server is ${expected}; the request was signed for someone else`,
    );
  }
}

/** The request's `Epistula-Uuid` was already accepted from this hotkey within the time window (401). */
export class ReplayedRequestError extends RequestAuthError {
  constructor(header: string) {
    super("replayed_request", 401, header, `request header ${header} was already used; every request needs a fresh UUID`);
  }
}

/** The sr25519 signature does not verify over the body hash, uuid, timestamp and signed-for (401). */
export class BadSignatureError extends RequestAuthError {
  constructor(header: string, detail: string, options?: { cause?: unknown }) {
    super("bad_signature", 401, header, `request header ${header} ${detail}`, options);
  }
}

/** A bearer token does not match any configured token (401). */
export class InvalidTokenError extends RequestAuthError {
  constructor(header: string, detail = "does not carry a valid bearer token") {
    super("invalid_token", 401, header, `request header ${header} ${detail}`);
  }
}

/** The credentials are valid but the hotkey is not on the allowlist (403). */
export class NotAllowedError extends RequestAuthError {
  readonly hotkey: string;
  constructor(header: string, hotkey: string) {
    super("not_allowed", 403, header, `hotkey ${hotkey} (request header ${header}) is not on this server's allowlist`);
    this.hotkey = hotkey;
  }
}

/** The replay cache is full of unexpired entries, so replays could not be detected; retry later (503). */
export class ReplayCacheFullError extends RequestAuthError {
  readonly retryAfterMs: number;
  constructor(maxEntries: number, retryAfterMs: number) {
    super(
      "replay_cache_full",
      503,
      null,
      `replay cache is full (${maxEntries} unexpired entries); refusing the request rather than risk a replay, retry in ${Math.ceil(retryAfterMs / 1000)} s`,
    );
    this.retryAfterMs = retryAfterMs;
  }
}

/**
 * The persistent replay cache could not record the request (disk full, I/O error); the request
 * is refused rather than accepted unrecorded, which would let it be replayed after a restart (503).
 */
export class ReplayCacheUnavailableError extends RequestAuthError {
  readonly retryAfterMs: number;
  constructor(detail: string, options?: { cause?: unknown }) {
    super("replay_cache_unavailable", 503, null, `the server could not record this request in its replay cache (${detail}); retry later`, options);
    this.retryAfterMs = 5_000;
  }
}

/** `Content-Digest` is present but not an RFC 9530 dictionary with a 32-byte `sha-256` entry (400). */
export class ContentDigestError extends RequestAuthError {
  constructor(header: string, detail: string) {
    super("bad_content_digest", 400, header, `request header ${header} ${detail}; send ${header}: sha-256=:<base64 of the body's sha256>: (RFC 9530)`);
  }
}

// ---------------------------------------------------------------------------------------------
// Configuration (operator-facing: bad env vars and files, thrown at startup)

/** Thrown when auth configuration (allowlist, tokens, signing key) cannot be loaded; `source` names the env var or file. */
export class AuthConfigError extends AuthError {
  readonly source: string;
  constructor(source: string, message: string, options?: { cause?: unknown }) {
    super(`${source}: ${message}`, options);
    this.source = source;
  }
}

/** An allowlist entry is not a valid SS58 address; `entry` is its 1-based position (line number for files). */
export class AllowlistError extends AuthConfigError {
  readonly entry: number | null;
  constructor(source: string, entry: number | null, message: string, options?: { cause?: unknown }) {
    super(source, message, options);
    this.entry = entry;
  }
}

/** A signing key could not be loaded. The message never contains the secret itself. */
export class KeyLoadError extends AuthConfigError {}

/** Bearer tokens could not be loaded (empty, too short, malformed hash). The message never contains a token. */
export class TokenConfigError extends AuthConfigError {}

/** Quote a value for an error message, truncating long or binary-looking input. */
export function quote(value: string): string {
  const shown = value.length > 80 ? `${value.slice(0, 77)}...` : value;
  return JSON.stringify(shown);
}
