import { randomUUID } from "node:crypto";
import { Keyring } from "@polkadot/keyring";
import { u8aToHex, u8aWrapBytes } from "@polkadot/util";
import { cryptoWaitReady, encodeAddress as pjsEncode } from "@polkadot/util-crypto";
import { beforeAll, describe, expect, it } from "vitest";
import { catchError } from "../test/helpers";
import { Allowlist } from "./allowlist";
import {
  BadSignatureError,
  DuplicateHeaderError,
  MalformedHeaderError,
  MissingHeaderError,
  NotAllowedError,
  ReplayedRequestError,
  RequestAuthError,
  TimestampOutOfWindowError,
  UnsupportedVersionError,
  WrongRecipientError,
} from "./errors";
import { checkHeaders, epistulaMessage, sha256Hex, signRequest, verifyRequest, verifySignature } from "./epistula";
import { Keypair } from "./keys";
import { ReplayCache } from "./replay-cache";
import { loadSchnorrkelWasm } from "./sr25519";

const NOW = 1_750_000_000_000;
const SKEW = 10_000;
const client = Keypair.fromUri("//Alice");
const server = Keypair.fromUri("//Ferdie");
const stranger = Keypair.fromUri("//Eve");
const allowlist = Allowlist.from([client.address]);
const body = new TextEncoder().encode('{"tasks":["hello-world"]}');

beforeAll(() => cryptoWaitReady());

function verify(headers: Record<string, string | string[]> | Headers, overrides: Partial<Parameters<typeof verifyRequest>[0]> = {}) {
  return verifyRequest({ headers, body, now: NOW, allowlist, maxSkewMs: SKEW, replayCache: new ReplayCache(), ...overrides });
}

function expectAuthError(fn: () => unknown, type: abstract new (...args: never[]) => RequestAuthError, header: string | null, status = 401) {
  const error = catchError(fn) as RequestAuthError;
  expect(error).toBeInstanceOf(type);
  expect(error.statusCode).toBe(status);
  expect(error.header).toBe(header);
  if (header) expect(error.message).toContain(header);
  return error;
}

describe("Epistula v2 round trip", () => {
  it("produces the documented headers and verifies them", () => {
    const headers = signRequest({ keypair: client, body, now: NOW });
    expect(Object.keys(headers).sort()).toEqual(["Epistula-Request-Signature", "Epistula-Signed-By", "Epistula-Timestamp", "Epistula-Uuid", "Epistula-Version"]);
    expect(headers["Epistula-Version"]).toBe("2");
    expect(headers["Epistula-Timestamp"]).toBe(String(NOW));
    expect(headers["Epistula-Signed-By"]).toBe(client.address);
    expect(headers["Epistula-Request-Signature"]).toMatch(/^0x[0-9a-f]{128}$/);
    expect(verify(headers)).toEqual({ hotkey: client.address });
  });

  it("reads headers case-insensitively from node-style objects (string or string[]) and fetch Headers", () => {
    const signed = signRequest({ keypair: client, body, now: NOW, signedFor: server.address });
    const lower = Object.fromEntries(Object.entries(signed).map(([k, v]) => [k.toLowerCase(), v]));
    const upperArrays = Object.fromEntries(Object.entries(signed).map(([k, v]) => [k.toUpperCase(), [v]]));
    expect(verify(lower, { expectedSignedFor: server.address }).hotkey).toBe(client.address);
    expect(verify(upperArrays, { expectedSignedFor: server.address }).hotkey).toBe(client.address);
    expect(verify(new Headers(signed), { expectedSignedFor: server.address }).hotkey).toBe(client.address);
  });

  it("accepts a request signed by polkadot.js (raw and <Bytes>-wrapped, as a browser wallet signs)", () => {
    const alice = new Keyring({ type: "sr25519" }).addFromUri("//Alice");
    for (const wrap of [false, true]) {
      const uuid = randomUUID();
      const message = new TextEncoder().encode(epistulaMessage(sha256Hex(body), uuid, String(NOW), undefined));
      const signature = alice.sign(wrap ? u8aWrapBytes(message) : message);
      const headers = {
        "epistula-version": "2",
        "epistula-timestamp": String(NOW),
        "epistula-uuid": uuid,
        "epistula-signed-by": alice.address,
        "epistula-request-signature": u8aToHex(signature),
      };
      expect(verify(headers).hotkey).toBe(alice.address);
    }
  });

  it("signatures we make verify with polkadot.js over the documented message", () => {
    const headers = signRequest({ keypair: client, body, now: NOW, signedFor: server.address });
    const message = epistulaMessage(sha256Hex(body), String(headers["Epistula-Uuid"]), String(NOW), server.address);
    const alice = new Keyring({ type: "sr25519" }).addFromUri("//Alice");
    expect(alice.verify(message, Buffer.from(String(headers["Epistula-Request-Signature"]).slice(2), "hex"), alice.publicKey)).toBe(true);
  });

  it("verifies the same way with the opt-in schnorrkel wasm engine", async () => {
    const verifier = await loadSchnorrkelWasm();
    const headers = signRequest({ keypair: client, body, now: NOW });
    expect(verify(headers, { verifier }).hotkey).toBe(client.address);
    expectAuthError(() => verify(headers, { verifier, body: new Uint8Array(0) }), BadSignatureError, "Epistula-Request-Signature");
  });

  it("takes the body as bytes, a string or a precomputed sha256", () => {
    const text = "plain text body";
    const headers = signRequest({ keypair: client, body: text, now: NOW });
    expect(verify(headers, { body: { sha256Hex: sha256Hex(text).toUpperCase() } }).hotkey).toBe(client.address);
    const again = signRequest({ keypair: client, body: { sha256Hex: sha256Hex(body) }, now: NOW });
    expect(verify(again).hotkey).toBe(client.address);
  });
});

describe("Epistula v2 rejections", () => {
  const signed = () => signRequest({ keypair: client, body, now: NOW, signedFor: server.address });

  it("fails on a tampered body, uuid, timestamp or signed-for", () => {
    const h = signed();
    expectAuthError(() => verify(h, { body: new TextEncoder().encode('{"tasks":["other"]}') }), BadSignatureError, "Epistula-Request-Signature");
    expectAuthError(() => verify({ ...h, "Epistula-Uuid": randomUUID() }), BadSignatureError, "Epistula-Request-Signature");
    expectAuthError(() => verify({ ...h, "Epistula-Timestamp": String(NOW + 1) }), BadSignatureError, "Epistula-Request-Signature");
    expectAuthError(() => verify({ ...h, "Epistula-Signed-For": stranger.address }), BadSignatureError, "Epistula-Request-Signature");
    const { "Epistula-Signed-For": _dropped, ...withoutFor } = h;
    expectAuthError(() => verify(withoutFor), BadSignatureError, "Epistula-Request-Signature");
    expect(verify(h).hotkey).toBe(client.address);
  });

  it("fails when another key signed it but claims to be the allowlisted hotkey", () => {
    const forged = { ...signRequest({ keypair: stranger, body, now: NOW }), "Epistula-Signed-By": client.address };
    expectAuthError(() => verify(forged), BadSignatureError, "Epistula-Request-Signature");
  });

  it("refuses the same uuid twice, even re-encoded under another network prefix", () => {
    const replayCache = new ReplayCache();
    const h = signed();
    expect(verify(h, { replayCache }).hotkey).toBe(client.address);
    expectAuthError(() => verify(h, { replayCache, now: NOW + 5 }), ReplayedRequestError, "Epistula-Uuid");
    const reencoded = { ...h, "Epistula-Signed-By": pjsEncode(client.publicKey, 0) };
    expectAuthError(() => verify(reencoded, { replayCache }), ReplayedRequestError, "Epistula-Uuid");
  });

  it("accepts the window edges and refuses timestamps outside it, both ways", () => {
    const h = signed();
    expect(verify(h, { now: NOW + SKEW }).hotkey).toBe(client.address);
    expect(verify(h, { now: NOW - SKEW }).hotkey).toBe(client.address);
    const stale = expectAuthError(() => verify(h, { now: NOW + SKEW + 1 }), TimestampOutOfWindowError, "Epistula-Timestamp") as TimestampOutOfWindowError;
    expect(stale.direction).toBe("stale");
    const future = expectAuthError(() => verify(h, { now: NOW - SKEW - 1 }), TimestampOutOfWindowError, "Epistula-Timestamp") as TimestampOutOfWindowError;
    expect(future.direction).toBe("future");
  });

  it("answers 403 for a valid signature by a key not on the allowlist", () => {
    const h = signRequest({ keypair: stranger, body, now: NOW });
    const error = expectAuthError(() => verify(h), NotAllowedError, "Epistula-Signed-By", 403) as NotAllowedError;
    expect(error.hotkey).toBe(stranger.address);
    expect(verify(h, { allowlist: Allowlist.from([client.address, stranger.address]) }).hotkey).toBe(stranger.address);
  });

  it("names missing, duplicated, wrong-version and malformed headers", () => {
    const h = signed();
    for (const name of ["Epistula-Version", "Epistula-Timestamp", "Epistula-Uuid", "Epistula-Signed-By", "Epistula-Request-Signature"]) {
      const { [name]: _gone, ...rest } = h;
      expectAuthError(() => verify(rest), MissingHeaderError, name);
    }
    expectAuthError(() => verify({ ...h, "Epistula-Uuid": [String(h["Epistula-Uuid"]), randomUUID()] }), DuplicateHeaderError, "Epistula-Uuid");
    expectAuthError(() => verify({ ...h, "epistula-uuid": randomUUID() }), DuplicateHeaderError, "Epistula-Uuid");
    const joined = new Headers(h);
    joined.append("Epistula-Signed-By", stranger.address);
    expectAuthError(() => verify(joined), DuplicateHeaderError, "Epistula-Signed-By");
    expectAuthError(() => verify({ ...h, "Epistula-Version": "1" }), UnsupportedVersionError, "Epistula-Version");
    expectAuthError(() => verify({ ...h, "Epistula-Timestamp": "12.5" }), MalformedHeaderError, "Epistula-Timestamp");
    expectAuthError(() => verify({ ...h, "Epistula-Uuid": "not-a-uuid" }), MalformedHeaderError, "Epistula-Uuid");
    expectAuthError(() => verify({ ...h, "Epistula-Signed-By": "5NotAnAddress" }), MalformedHeaderError, "Epistula-Signed-By");
    expectAuthError(() => verify({ ...h, "Epistula-Request-Signature": String(h["Epistula-Request-Signature"]).slice(2) }), MalformedHeaderError, "Epistula-Request-Signature");
    expectAuthError(() => verify({ ...h, "Epistula-Signed-For": "nobody" }), MalformedHeaderError, "Epistula-Signed-For");
  });

  it("requires Signed-For to name this server when the server has an identity", () => {
    expectAuthError(() => verify(signRequest({ keypair: client, body, now: NOW }), { expectedSignedFor: server.address }), WrongRecipientError, "Epistula-Signed-For");
    const forOther = signRequest({ keypair: client, body, now: NOW, signedFor: stranger.address });
    expectAuthError(() => verify(forOther, { expectedSignedFor: server.address }), WrongRecipientError, "Epistula-Signed-For");
    expect(verify(signed(), { expectedSignedFor: server.address }).hotkey).toBe(client.address);
  });
});

describe("checkHeaders + verifySignature (body read after the headers)", () => {
  it("checks headers without consuming the uuid, then records it only after the signature verifies", () => {
    const replayCache = new ReplayCache();
    const h = signRequest({ keypair: client, body, now: NOW });
    const first = checkHeaders({ headers: h, now: NOW, allowlist, maxSkewMs: SKEW });
    const second = checkHeaders({ headers: h, now: NOW, allowlist, maxSkewMs: SKEW });
    expect(first.hotkey).toBe(client.address);
    expect(replayCache.size).toBe(0);
    expectAuthError(() => verifySignature(first, sha256Hex("a different body"), replayCache, { now: NOW }), BadSignatureError, "Epistula-Request-Signature");
    expect(replayCache.size).toBe(0);
    expect(verifySignature(first, sha256Hex(body), replayCache, { now: NOW }).hotkey).toBe(client.address);
    expectAuthError(() => verifySignature(second, sha256Hex(body), replayCache, { now: NOW }), ReplayedRequestError, "Epistula-Uuid");
  });

  it("rejects a non-allowlisted hotkey before any body is read", () => {
    const h = signRequest({ keypair: stranger, body, now: NOW });
    expectAuthError(() => checkHeaders({ headers: h, now: NOW, allowlist, maxSkewMs: SKEW }), NotAllowedError, "Epistula-Signed-By", 403);
  });

  it("allows a slow body up to maxBodyMs past the window, and keeps the uuid blocked that long", () => {
    const replayCache = new ReplayCache();
    const h = signRequest({ keypair: client, body, now: NOW });
    const parsed = checkHeaders({ headers: h, now: NOW, allowlist, maxSkewMs: SKEW, maxBodyMs: 60_000 });
    const replay = checkHeaders({ headers: h, now: NOW + SKEW, allowlist, maxSkewMs: SKEW, maxBodyMs: 60_000 });
    expect(verifySignature(parsed, sha256Hex(body), replayCache, { now: NOW + SKEW + 30_000 }).hotkey).toBe(client.address);
    expectAuthError(() => verifySignature(replay, sha256Hex(body), replayCache, { now: NOW + SKEW + 59_000 }), ReplayedRequestError, "Epistula-Uuid");
    const late = checkHeaders({ headers: signRequest({ keypair: client, body, now: NOW }), now: NOW, allowlist, maxSkewMs: SKEW, maxBodyMs: 60_000 });
    expectAuthError(() => verifySignature(late, sha256Hex(body), replayCache, { now: NOW + SKEW + 60_001 }), TimestampOutOfWindowError, "Epistula-Timestamp");
  });

  it("refuses parsed headers that did not come from checkHeaders", () => {
    const fake = { hotkey: client.address } as unknown as ReturnType<typeof checkHeaders>;
    expect(() => verifySignature(fake, sha256Hex(body), new ReplayCache())).toThrow(TypeError);
  });
});
