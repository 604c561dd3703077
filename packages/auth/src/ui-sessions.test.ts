import { describe, expect, test } from "vitest";
import { LOGIN_TOKEN_TTL_MS, SESSION_TTL_MS, UI_COOKIE, UiSessions, sessionCookie, sessionIdFrom } from "./ui-sessions";

function clock(start = 1_000_000) {
  let t = start;
  return { now: () => t, advance: (ms: number) => (t += ms) };
}

describe("UiSessions", () => {
  test("a login token is redeemed once, for the identity it was minted for, and not after it expired", () => {
    const c = clock();
    const sessions = new UiSessions(c.now);
    const { token, expiresAtMs } = sessions.mint("token:0123456789ab");
    expect(token).toMatch(/^pui_[A-Za-z0-9_-]{43}$/);
    expect(expiresAtMs).toBe(c.now() + LOGIN_TOKEN_TTL_MS);
    expect(sessions.redeem(token)).toEqual({ identity: "token:0123456789ab" });
    expect(sessions.redeem(token)).toBeUndefined();
    expect(sessions.redeem("pui_not-one")).toBeUndefined();

    const late = sessions.mint(null);
    c.advance(LOGIN_TOKEN_TTL_MS);
    expect(sessions.redeem(late.token)).toBeUndefined();
  });

  test("a session lasts SESSION_TTL_MS and ends at close; tokens and session ids are not interchangeable", () => {
    const c = clock();
    const sessions = new UiSessions(c.now);
    const { sessionId, maxAgeSec } = sessions.open("5Grw");
    expect(maxAgeSec).toBe(SESSION_TTL_MS / 1000);
    expect(sessions.lookup(sessionId)).toEqual({ identity: "5Grw" });
    expect(sessions.redeem(sessionId)).toBeUndefined();
    expect(sessions.lookup(sessions.mint("5Grw").token)).toBeNull();
    c.advance(SESSION_TTL_MS - 1);
    expect(sessions.lookup(sessionId)).not.toBeNull();
    sessions.close(sessionId);
    expect(sessions.lookup(sessionId)).toBeNull();

    const other = sessions.open(null);
    c.advance(SESSION_TTL_MS);
    expect(sessions.lookup(other.sessionId)).toBeNull();
    expect(sessions.lookup(null)).toBeNull();
  });
});

describe("session cookie", () => {
  test("is HttpOnly, SameSite=Strict, scoped to /ui, Secure only over TLS; parsed back from a Cookie header", () => {
    expect(sessionCookie("abc", 60, true)).toBe(`${UI_COOKIE}=abc; Path=/ui; HttpOnly; SameSite=Strict; Max-Age=60; Secure`);
    expect(sessionCookie("", 0, false)).toBe(`${UI_COOKIE}=; Path=/ui; HttpOnly; SameSite=Strict; Max-Age=0`);
    expect(sessionIdFrom(`other=1; ${UI_COOKIE}=abc ; x=${UI_COOKIE}`)).toBe("abc");
    expect(sessionIdFrom(`${UI_COOKIE}=`)).toBeNull();
    expect(sessionIdFrom(undefined)).toBeNull();
    expect(sessionIdFrom(`not_${UI_COOKIE}=abc`)).toBeNull();
  });
});
