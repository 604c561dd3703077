import type { Logger } from "@proctor/schema";
import { Allowlist, loadAllowlist } from "./allowlist";
import { checkHeaders, verifySignature } from "./epistula";
import type { CheckedHeaders } from "./epistula";
import { AuthConfigError } from "./errors";
import type { HeadersInput } from "./headers";
import { createInsecureLegacyHotkeyAuth } from "./legacy";
import { ReplayCache } from "./replay-cache";
import type { ReplayStore } from "./replay-cache";
import { FileReplayCache } from "./replay-file";
import type { Sr25519Verifier } from "./sr25519";
import { decodeAddress } from "./ss58";
import { TokenVerifier, loadTokens } from "./tokens";

/** How a server authenticates requests (DESIGN.md "Server API"). */
export type AuthMode = "none" | "token" | "epistula" | "hotkey-header-insecure";
export const AUTH_MODES = ["none", "token", "epistula", "hotkey-header-insecure"] as const;

/** Environment variable with the admin identities (comma- or space-separated) when `adminHotkeys` is not given. */
export const ADMIN_HOTKEYS_ENV = "PROCTOR_ADMIN_HOTKEYS";
const TOKEN_ID_RE = /^token:[0-9a-f]{12}$/;

export interface RequestAuthConfig {
  mode: AuthMode;
  /** Allowed hotkeys (SS58) for epistula / hotkey-header-insecure; default: $PROCTOR_HOTKEYS or $PROCTOR_HOTKEYS_FILE. */
  hotkeys?: readonly string[] | undefined;
  /** A file with one hotkey per line; wins over `hotkeys` and the environment. */
  hotkeysFile?: string | undefined;
  /** Bearer tokens (plain, or `sha256:<hex>`) for token mode; default: $PROCTOR_TOKENS or $PROCTOR_TOKENS_FILE. */
  tokens?: readonly string[] | undefined;
  /** Accepted Epistula clock skew (default 30 s). */
  maxSkewMs?: number | undefined;
  /** sr25519 verification engine (the server passes schnorrkel's WebAssembly build). */
  verifier?: Sr25519Verifier | undefined;
  /** When set, Epistula-Signed-For must name this server's SS58 address. */
  signedFor?: string | undefined;
  /**
   * Identities that may read and cancel every batch: SS58 hotkeys (also allowed to sign in), or
   * `token:<id>` for a bearer token (the id is the first 12 hex digits of the token's sha256, as
   * logged). Default: $PROCTOR_ADMIN_HOTKEYS.
   */
  adminHotkeys?: readonly string[] | undefined;
  /**
   * Where the Epistula replay cache is persisted (append-only file, see FileReplayCache); without
   * it the cache lives in memory only and a restart forgets it.
   */
  replayCachePath?: string | undefined;
  logger: Logger;
  env?: Readonly<Record<string, string | undefined>>;
}

/** What the header check learned; `verifyBody` completes it once the body's hash is known. */
export interface PendingAuth {
  /** The claimed (epistula, before verifyBody) or verified identity; null in mode none. */
  identity: string | null;
  epistula: CheckedHeaders | null;
}

/**
 * A server's request authenticator, framework-neutral (headers in, identity out), split in two
 * so a request can be refused from its headers alone (before its body is read) and its
 * signature checked over the exact body bytes. Both halves throw a RequestAuthError
 * (statusCode 401, 403 or 503); the constructor throws AuthConfigError for a bad configuration.
 */
export class RequestAuthenticator {
  private readonly replayCache: ReplayStore & { close?(): void };
  private readonly allowlist: Allowlist | null = null;
  /** Principal keys (see principalKey) of the admins. */
  private readonly admins: ReadonlySet<string>;
  private readonly tokens: TokenVerifier | null = null;
  private readonly legacy: ((headers: HeadersInput) => { hotkey: string }) | null = null;

  constructor(private readonly config: RequestAuthConfig) {
    const env = config.env ?? process.env;
    const admins = parseAdmins(config.adminHotkeys, env);
    this.admins = new Set(admins.map((a) => principalKey(a)).filter((k): k is string => k !== null));
    if (config.mode === "epistula" || config.mode === "hotkey-header-insecure") {
      const allowlist =
        config.hotkeysFile !== undefined || config.hotkeys === undefined
          ? loadAllowlist({ file: config.hotkeysFile, env })
          : Allowlist.from(config.hotkeys, { source: "hotkeys option" });
      // An admin hotkey may sign in even when the allowlist does not name it.
      const adminHotkeys = admins.filter((a) => !TOKEN_ID_RE.test(a));
      this.allowlist = adminHotkeys.length === 0 ? allowlist : Allowlist.from([...allowlist.addresses, ...adminHotkeys], { source: "allowlist + admin hotkeys" });
    }
    this.replayCache =
      config.mode === "epistula" && config.replayCachePath !== undefined ? FileReplayCache.open({ path: config.replayCachePath }) : new ReplayCache();
    if (this.replayCache instanceof FileReplayCache) {
      const { live, expired, skipped } = this.replayCache.loaded;
      config.logger.info("replay cache loaded", { path: config.replayCachePath, live, expired, skipped });
    }
    if (config.mode === "token") {
      this.tokens = config.tokens === undefined ? loadTokens({ env }) : TokenVerifier.from(config.tokens, { source: "tokens option" });
    }
    if (config.mode === "hotkey-header-insecure") {
      this.legacy = createInsecureLegacyHotkeyAuth({ allowlist: this.requireAllowlist(), logger: config.logger, acknowledgeInsecure: true });
    }
  }

  get mode(): AuthMode {
    return this.config.mode;
  }

  /** Number of admin identities. */
  get adminCount(): number {
    return this.admins.size;
  }

  /** True when `identity` (as returned by checkHeaders / verifyBody) is an admin. */
  isAdmin(identity: string | null): boolean {
    const key = principalKey(identity);
    return key !== null && this.admins.has(key);
  }

  /**
   * Whether `identity` may see a batch submitted by `owner`: the same principal (an SS58 hotkey
   * matches by public key, whatever its network prefix), an admin, or auth mode none (no
   * identities at all). A batch without an owner (submitted under auth none) is admin-only once
   * the server runs with credentials.
   */
  canAccess(identity: string | null, owner: string | null): boolean {
    if (this.config.mode === "none") return true;
    if (this.isAdmin(identity)) return true;
    const mine = principalKey(identity);
    return mine !== null && mine === principalKey(owner);
  }

  /** Flush and close the persistent replay cache. */
  close(): void {
    this.replayCache.close?.();
  }

  /** Number of allowlisted hotkeys (null when the mode has no allowlist). */
  get allowlistSize(): number | null {
    return this.allowlist?.size ?? null;
  }

  /** Everything checkable without the body: presence, version, timestamp window, allowlisted signer, token. */
  checkHeaders(headers: HeadersInput): PendingAuth {
    switch (this.config.mode) {
      case "none":
        return { identity: null, epistula: null };
      case "token":
        if (this.tokens === null) throw new Error("token auth without tokens");
        return { identity: `token:${this.tokens.verifyHeaders(headers).tokenId}`, epistula: null };
      case "hotkey-header-insecure":
        if (this.legacy === null) throw new Error("hotkey-header-insecure auth without an allowlist");
        return { identity: this.legacy(headers).hotkey, epistula: null };
      case "epistula": {
        const checked = checkHeaders({
          headers,
          allowlist: this.requireAllowlist(),
          maxSkewMs: this.config.maxSkewMs,
          expectedSignedFor: this.config.signedFor,
        });
        return { identity: checked.hotkey, epistula: checked };
      }
    }
  }

  private requireAllowlist(): Allowlist {
    if (this.allowlist === null) throw new Error(`auth mode ${this.config.mode} without an allowlist`);
    return this.allowlist;
  }

  /** The signature over sha256(body) (epistula only), then the replay check. */
  verifyBody(pending: PendingAuth, bodySha256Hex: string): { identity: string | null } {
    if (pending.epistula === null) return { identity: pending.identity };
    return { identity: verifySignature(pending.epistula, bodySha256Hex, this.replayCache, { verifier: this.config.verifier }).hotkey };
  }
}

/** A stable key for an identity: `hotkey:<public key hex>` for SS58 addresses, the identity itself otherwise. */
export function principalKey(identity: string | null): string | null {
  if (identity === null || identity === "") return null;
  if (identity.startsWith("token:")) return identity;
  try {
    return `hotkey:${Buffer.from(decodeAddress(identity).publicKey).toString("hex")}`;
  } catch {
    return identity;
  }
}

function parseAdmins(option: readonly string[] | undefined, env: Readonly<Record<string, string | undefined>>): string[] {
  const source = option !== undefined ? "adminHotkeys option" : `$${ADMIN_HOTKEYS_ENV}`;
  const entries = (option ?? (env[ADMIN_HOTKEYS_ENV] ?? "").split(/[\s,]+/)).map((e) => e.trim()).filter((e) => e !== "");
  entries.forEach((entry, i) => {
    if (TOKEN_ID_RE.test(entry)) return;
    try {
      decodeAddress(entry);
    } catch {
      // The entry is not quoted: a secret token pasted here by mistake must not reach a log.
      throw new AuthConfigError(source, `entry ${i + 1} is neither a valid SS58 hotkey nor token:<first 12 hex digits of the token's sha256>`);
    }
  });
  return entries;
}
