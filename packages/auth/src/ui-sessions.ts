import { createHash, randomBytes } from "node:crypto";

/** Name of the browser session cookie of Proctor's web UI (the server's /ui). */
export const UI_COOKIE = "proctor_ui";
/** How long a one-time login token from POST /ui/login-token can be used (10 min). */
export const LOGIN_TOKEN_TTL_MS = 10 * 60 * 1000;
/** How long a browser session lasts after sign-in (12 h). */
export const SESSION_TTL_MS = 12 * 60 * 60 * 1000;
/** Sessions (and unused login tokens) kept at most; the oldest go first. */
const MAX_ENTRIES = 10_000;

interface Entry {
  identity: string | null;
  expiresAtMs: number;
}

const digest = (secret: string): string => createHash("sha256").update(secret, "utf8").digest("hex");
const secret = (prefix: string): string => `${prefix}${randomBytes(32).toString("base64url")}`;

/** A Map in insertion order that drops expired entries and, past the cap, the oldest. */
class ExpiringMap {
  private readonly entries = new Map<string, Entry>();

  set(key: string, entry: Entry, nowMs: number): void {
    for (const [k, e] of this.entries) {
      if (e.expiresAtMs > nowMs && this.entries.size < MAX_ENTRIES) break;
      this.entries.delete(k);
    }
    this.entries.set(key, entry);
  }

  get(key: string, nowMs: number): Entry | null {
    const entry = this.entries.get(key);
    if (!entry) return null;
    if (entry.expiresAtMs <= nowMs) {
      this.entries.delete(key);
      return null;
    }
    return entry;
  }

  delete(key: string): boolean {
    return this.entries.delete(key);
  }
}

/**
 * Browser sessions of the server's /ui, in memory (a restart signs everyone out). Only sha256
 * digests of the secrets are stored, so a heap dump does not hand out sessions.
 *
 * - `mint(identity)`: a one-time login token for an identity that authenticated the usual way
 *   (an Epistula signature, a bearer token), for auth modes whose credential a browser cannot
 *   present itself (an sr25519 hotkey);
 * - `redeem(token)`: consumes such a token;
 * - `open(identity)` / `lookup(sessionId)` / `close(sessionId)`: the session behind the cookie.
 */
export class UiSessions {
  private readonly loginTokens = new ExpiringMap();
  private readonly sessions = new ExpiringMap();

  constructor(private readonly now: () => number = Date.now) {}

  mint(identity: string | null): { token: string; expiresAtMs: number } {
    const token = secret("pui_");
    const expiresAtMs = this.now() + LOGIN_TOKEN_TTL_MS;
    this.loginTokens.set(digest(token), { identity, expiresAtMs }, this.now());
    return { token, expiresAtMs };
  }

  /** The identity a minted login token stands for (once: it is used up), or undefined when it is not one. */
  redeem(token: string): { identity: string | null } | undefined {
    const key = digest(token);
    const entry = this.loginTokens.get(key, this.now());
    if (!entry) return undefined;
    this.loginTokens.delete(key);
    return { identity: entry.identity };
  }

  open(identity: string | null): { sessionId: string; maxAgeSec: number } {
    const sessionId = secret("");
    this.sessions.set(digest(sessionId), { identity, expiresAtMs: this.now() + SESSION_TTL_MS }, this.now());
    return { sessionId, maxAgeSec: Math.floor(SESSION_TTL_MS / 1000) };
  }

  lookup(sessionId: string | null): { identity: string | null } | null {
    if (!sessionId) return null;
    const entry = this.sessions.get(digest(sessionId), this.now());
    return entry ? { identity: entry.identity } : null;
  }

  close(sessionId: string | null): void {
    if (sessionId) this.sessions.delete(digest(sessionId));
  }
}

/** The session id in a Cookie header, or null. */
export function sessionIdFrom(cookieHeader: string | undefined): string | null {
  for (const part of (cookieHeader ?? "").split(";")) {
    const eq = part.indexOf("=");
    if (eq < 0) continue;
    if (part.slice(0, eq).trim() === UI_COOKIE) return part.slice(eq + 1).trim() || null;
  }
  return null;
}

/**
 * The Set-Cookie value of a session: HttpOnly (no script reads it, so an injected script cannot
 * steal it), SameSite=Strict (no other site's page or form sends it), Path=/ui (no other route
 * sees it), Secure when the request came over TLS. `maxAgeSec` 0 deletes it.
 */
export function sessionCookie(sessionId: string, maxAgeSec: number, secure: boolean): string {
  return `${UI_COOKIE}=${sessionId}; Path=/ui; HttpOnly; SameSite=Strict; Max-Age=${maxAgeSec}${secure ? "; Secure" : ""}`;
}
