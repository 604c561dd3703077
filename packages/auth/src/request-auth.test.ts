import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { silentLogger } from "@proctor/schema";
import { afterAll, describe, expect, test } from "vitest";
import { catchError, recordingLogger } from "../test/helpers";
import { sha256Hex, signRequest } from "./epistula";
import { AuthConfigError, BadSignatureError, InvalidTokenError, MissingHeaderError, NotAllowedError, ReplayedRequestError } from "./errors";
import { Keypair } from "./keys";
import { RequestAuthenticator, principalKey } from "./request-auth";

const alice = Keypair.fromUri("//Alice");
const aliceOnPolkadot = Keypair.fromUri("//Alice", { ss58Prefix: 0 });
const bob = Keypair.fromUri("//Bob");
const eve = Keypair.fromUri("//Eve");
const body = '{"tasks":["hello"]}';
const dirs: string[] = [];
afterAll(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));

function epistula(extra: Partial<ConstructorParameters<typeof RequestAuthenticator>[0]> = {}) {
  return new RequestAuthenticator({ mode: "epistula", hotkeys: [alice.address], logger: silentLogger, env: {}, ...extra });
}

/** Both halves, as a server runs them: headers first, then the body's hash. */
function authenticate(auth: RequestAuthenticator, headers: Record<string, string>, sent = body): string | null {
  return auth.verifyBody(auth.checkHeaders(headers), sha256Hex(sent)).identity;
}

describe("epistula", () => {
  test("a signed request yields its hotkey; a replay, another body or an unlisted signer is refused", () => {
    const auth = epistula();
    const headers = signRequest({ keypair: alice, body });
    expect(auth.checkHeaders(headers).identity).toBe(alice.address);
    expect(authenticate(auth, headers)).toBe(alice.address);
    expect(catchError(() => authenticate(auth, headers))).toBeInstanceOf(ReplayedRequestError);
    expect(catchError(() => authenticate(auth, signRequest({ keypair: alice, body }), "other body"))).toBeInstanceOf(BadSignatureError);
    // Refused from the headers alone, before any body would be read.
    const unlisted = catchError(() => auth.checkHeaders(signRequest({ keypair: eve, body }))) as NotAllowedError;
    expect(unlisted).toBeInstanceOf(NotAllowedError);
    expect(unlisted.statusCode).toBe(403);
    expect(catchError(() => auth.checkHeaders({}))).toBeInstanceOf(MissingHeaderError);
  });

  test("an admin hotkey signs in without being allowlisted and may access every owner's batch", () => {
    const auth = epistula({ adminHotkeys: [bob.address] });
    expect(authenticate(auth, signRequest({ keypair: bob, body }))).toBe(bob.address);
    expect(auth.isAdmin(bob.address)).toBe(true);
    expect(auth.isAdmin(alice.address)).toBe(false);
    expect(auth.canAccess(bob.address, alice.address)).toBe(true);
    expect(auth.canAccess(alice.address, bob.address)).toBe(false);
    expect(auth.canAccess(alice.address, null)).toBe(false);
  });

  test("ownership follows the public key, whatever the address's network prefix", () => {
    const auth = epistula();
    expect(aliceOnPolkadot.address).not.toBe(alice.address);
    expect(principalKey(aliceOnPolkadot.address)).toBe(principalKey(alice.address));
    expect(auth.canAccess(aliceOnPolkadot.address, alice.address)).toBe(true);
  });

  test("with replayCachePath a restarted authenticator still refuses a replay", () => {
    const dir = mkdtempSync(join(tmpdir(), "proctor-request-auth-"));
    dirs.push(dir);
    const replayCachePath = join(dir, "replay.log");
    const { logger, lines } = recordingLogger();
    const headers = signRequest({ keypair: alice, body });
    const first = epistula({ replayCachePath, logger });
    expect(authenticate(first, headers)).toBe(alice.address);
    first.close();
    const second = epistula({ replayCachePath, logger });
    expect(catchError(() => authenticate(second, headers))).toBeInstanceOf(ReplayedRequestError);
    second.close();
    expect(lines.filter((l) => l.message === "replay cache loaded").at(-1)?.fields).toMatchObject({ live: 1 });
  });
});

describe("token and none", () => {
  const tokenA = "a".repeat(32);
  const tokenB = "b".repeat(32);

  test("a bearer token yields token:<id>; each token sees only its own; an admin token id sees all", () => {
    const adminId = new RequestAuthenticator({ mode: "token", tokens: [tokenB], logger: silentLogger, env: {} }).checkHeaders({ authorization: `Bearer ${tokenB}` }).identity ?? "";
    const auth = new RequestAuthenticator({ mode: "token", tokens: [tokenA, tokenB], adminHotkeys: [adminId], logger: silentLogger, env: {} });
    const a = auth.checkHeaders({ authorization: `Bearer ${tokenA}` });
    expect(a.identity).toMatch(/^token:[0-9a-f]{12}$/);
    expect(a.identity).not.toContain(tokenA);
    expect(auth.verifyBody(a, sha256Hex(body)).identity).toBe(a.identity);
    expect(auth.canAccess(a.identity, adminId)).toBe(false);
    expect(auth.canAccess(adminId, a.identity)).toBe(true);
    const wrong = catchError(() => auth.checkHeaders({ authorization: `Bearer ${"c".repeat(32)}` })) as InvalidTokenError;
    expect(wrong).toBeInstanceOf(InvalidTokenError);
    expect(wrong.statusCode).toBe(401);
  });

  test("mode none has no identities and lets everyone access everything", () => {
    const auth = new RequestAuthenticator({ mode: "none", logger: silentLogger, env: {} });
    expect(auth.verifyBody(auth.checkHeaders({}), sha256Hex(body))).toEqual({ identity: null });
    expect(auth.canAccess(null, alice.address)).toBe(true);
    expect(auth.allowlistSize).toBeNull();
  });

  test("a bad admin entry is a config error that names where it came from, not the (possibly secret) entry", () => {
    const secret = "s3cret-token-pasted-by-mistake";
    const error = catchError(() => new RequestAuthenticator({ mode: "token", tokens: [tokenA], logger: silentLogger, env: { PROCTOR_ADMIN_HOTKEYS: `${alice.address}, ${secret}` } })) as Error;
    expect(error).toBeInstanceOf(AuthConfigError);
    expect(error.message).toContain("$PROCTOR_ADMIN_HOTKEYS");
    expect(error.message).toContain("entry 2");
    expect(error.message).not.toContain(secret);
  });
});
