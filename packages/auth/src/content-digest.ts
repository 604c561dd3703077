import { ContentDigestError } from "./errors";
import type { HeadersInput } from "./headers";

/**
 * RFC 9530 `Content-Digest`: the digest of the request body as sent. An Epistula client sends it
 * so a server can check the signature (which covers the body's sha256) from the headers alone,
 * before reading the body, and then check the body against the digest while streaming it.
 */
export const CONTENT_DIGEST_HEADER = "Content-Digest";

const SHA256_RE = /^[0-9a-f]{64}$/i;
const BASE64_RE = /^[A-Za-z0-9+/]*={0,2}$/;
const MAX_HEADER_LENGTH = 4096;

/** The header value for a body whose sha256 is `sha256Hex`: `sha-256=:<base64>:`. */
export function contentDigestHeader(sha256Hex: string): string {
  if (typeof sha256Hex !== "string" || !SHA256_RE.test(sha256Hex)) throw new TypeError("sha256Hex must be 64 hex digits");
  return `sha-256=:${Buffer.from(sha256Hex, "hex").toString("base64")}:`;
}

function headerValues(headers: HeadersInput): string[] {
  if (typeof (headers as Headers).get === "function") {
    const value = (headers as Headers).get(CONTENT_DIGEST_HEADER);
    return value === null ? [] : [value];
  }
  const out: string[] = [];
  for (const [key, value] of Object.entries(headers as Record<string, unknown>)) {
    if (key.toLowerCase() !== "content-digest" || value === undefined) continue;
    for (const v of Array.isArray(value) ? value : [value]) {
      if (typeof v !== "string") throw new ContentDigestError(CONTENT_DIGEST_HEADER, "is not text");
      out.push(v);
    }
  }
  return out;
}

/**
 * The body's sha256 (lowercase hex) from `Content-Digest`, or null when the header is absent.
 * The value is an RFC 8941 dictionary (`sha-512=:...:, sha-256=:...:` is allowed; repeated header
 * lines are joined with commas as RFC 9110 says); only the `sha-256` member is used and it must
 * be there. Throws `ContentDigestError` (400) for anything malformed or for two different
 * `sha-256` values.
 */
export function parseContentDigest(headers: HeadersInput): string | null {
  const values = headerValues(headers);
  if (values.length === 0) return null;
  const joined = values.join(",");
  if (joined.length > MAX_HEADER_LENGTH) throw new ContentDigestError(CONTENT_DIGEST_HEADER, `is longer than ${MAX_HEADER_LENGTH} characters`);
  let found: string | null = null;
  for (const rawMember of joined.split(",")) {
    const member = rawMember.trim();
    if (member === "") continue;
    const eq = member.indexOf("=");
    if (eq <= 0) throw new ContentDigestError(CONTENT_DIGEST_HEADER, "is malformed: each member must be <algorithm>=:<base64>:");
    const algorithm = member.slice(0, eq).trim().toLowerCase();
    // Parameters (`;key=value`) after the byte sequence are allowed by RFC 8941 and ignored.
    const value = member.slice(eq + 1).trim().split(";")[0]?.trim() ?? "";
    if (!/^[a-z][a-z0-9_\-.*]*$/.test(algorithm)) throw new ContentDigestError(CONTENT_DIGEST_HEADER, "is malformed: bad algorithm name");
    if (value.length < 2 || !value.startsWith(":") || !value.endsWith(":")) {
      throw new ContentDigestError(CONTENT_DIGEST_HEADER, `is malformed: the ${algorithm} value must be a byte sequence :<base64>:`);
    }
    if (algorithm !== "sha-256") continue;
    const base64 = value.slice(1, -1);
    if (!BASE64_RE.test(base64)) throw new ContentDigestError(CONTENT_DIGEST_HEADER, "is malformed: the sha-256 value is not base64");
    const bytes = Buffer.from(base64, "base64");
    if (bytes.length !== 32) throw new ContentDigestError(CONTENT_DIGEST_HEADER, `is malformed: the sha-256 value is ${bytes.length} bytes, not 32`);
    const hex = bytes.toString("hex");
    if (found !== null && found !== hex) throw new ContentDigestError(CONTENT_DIGEST_HEADER, "holds two different sha-256 values");
    found = hex;
  }
  if (found === null) throw new ContentDigestError(CONTENT_DIGEST_HEADER, "has no sha-256 member (the only algorithm this server checks)");
  return found;
}
