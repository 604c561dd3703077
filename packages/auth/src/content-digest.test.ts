import { createHash } from "node:crypto";
import { describe, expect, it } from "vitest";
import { catchError } from "../test/helpers";
import { CONTENT_DIGEST_HEADER, contentDigestHeader, parseContentDigest } from "./content-digest";
import { Keypair } from "./keys";
import { checkHeaders, signRequest, verifySignature } from "./epistula";
import { Allowlist } from "./allowlist";
import { ReplayCache } from "./replay-cache";
import { ContentDigestError } from "./errors";

const hex = createHash("sha256").update("hello").digest("hex");
const b64 = Buffer.from(hex, "hex").toString("base64");

describe("Content-Digest (RFC 9530)", () => {
  it("round-trips the sha-256 member; absent header is null", () => {
    expect(contentDigestHeader(hex)).toBe(`sha-256=:${b64}:`);
    expect(parseContentDigest({ "content-digest": contentDigestHeader(hex) })).toBe(hex);
    expect(parseContentDigest(new Headers({ "Content-Digest": contentDigestHeader(hex) }))).toBe(hex);
    expect(parseContentDigest({})).toBeNull();
  });

  it("accepts dictionaries with other algorithms and parameters, picks sha-256", () => {
    const sha512 = createHash("sha512").update("hello").digest("base64");
    expect(parseContentDigest({ "Content-Digest": `sha-512=:${sha512}:, sha-256=:${b64}:;x=1` })).toBe(hex);
    expect(parseContentDigest({ "content-digest": [`sha-512=:${sha512}:`, `sha-256=:${b64}:`] })).toBe(hex);
  });

  it.each([
    ["no sha-256", `sha-512=:${createHash("sha512").digest("base64")}:`, /no sha-256 member/],
    ["not a byte sequence", `sha-256=${b64}`, /byte sequence/],
    ["not base64", "sha-256=:!!!:", /not base64/],
    ["wrong length", `sha-256=:${Buffer.alloc(20).toString("base64")}:`, /20 bytes, not 32/],
    ["garbage", "hello", /malformed/],
    ["two values", `sha-256=:${b64}:, sha-256=:${Buffer.alloc(32).toString("base64")}:`, /two different/],
  ])("refuses %s with a 400 naming the header", (_name, value, message) => {
    const error = catchError(() => parseContentDigest({ "content-digest": value })) as ContentDigestError;
    expect(error).toBeInstanceOf(ContentDigestError);
    expect(error).toMatchObject({ statusCode: 400, code: "bad_content_digest", header: CONTENT_DIGEST_HEADER });
    expect(error.message).toMatch(message);
    expect(error.message).toContain("Content-Digest");
  });

  it("signRequest({ contentDigest: true }) adds the header; a server verifies the signature from it alone", () => {
    const keypair = Keypair.fromUri("//Alice");
    const headers = signRequest({ keypair, body: "hello", contentDigest: true });
    expect(headers["Content-Digest"]).toBe(contentDigestHeader(hex));
    expect(signRequest({ keypair, body: "hello" })["Content-Digest"]).toBeUndefined();
    const parsed = checkHeaders({ headers, allowlist: Allowlist.from([keypair.address]) });
    expect(verifySignature(parsed, parseContentDigest(headers)!, new ReplayCache())).toEqual({ hotkey: keypair.address });
  });
});
