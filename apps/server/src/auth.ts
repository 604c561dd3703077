import type { IncomingHttpHeaders } from "node:http";
import type { Sr25519Verifier } from "@proctor/auth";
import {
  Allowlist,
  ReplayCache,
  TokenVerifier,
  checkHeaders,
  createInsecureLegacyHotkeyAuth,
  loadAllowlist,
  loadTokens,
  verifySignature,
} from "@proctor/auth";
import type { CheckedHeaders } from "@proctor/auth";
import type { Logger } from "@proctor/schema";

/** How the server authenticates requests (DESIGN.md "Server API"). */
export type AuthMode = "none" | "token" | "epistula" | "hotkey-header-insecure";
export const AUTH_MODES = ["none", "token", "epistula", "hotkey-header-insecure"] as const;

export interface AuthConfig {
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
 * The server's request authenticator, split in two so a request can be refused from its
 * headers alone (before its body is read) and its signature checked over the exact body bytes.
 * Both halves throw @proctor/auth's RequestAuthError (statusCode 401, 403 or 503).
 */
export class RequestAuthenticator {
  private readonly replayCache = new ReplayCache();
  private readonly allowlist: Allowlist | null = null;
  private readonly tokens: TokenVerifier | null = null;
  private readonly legacy: ((headers: IncomingHttpHeaders) => { hotkey: string }) | null = null;

  constructor(private readonly config: AuthConfig) {
    const env = config.env ?? process.env;
    if (config.mode === "epistula" || config.mode === "hotkey-header-insecure") {
      this.allowlist =
        config.hotkeysFile !== undefined || config.hotkeys === undefined
          ? loadAllowlist({ file: config.hotkeysFile, env })
          : Allowlist.from(config.hotkeys, { source: "hotkeys option" });
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

  /** Number of allowlisted hotkeys (null when the mode has no allowlist). */
  get allowlistSize(): number | null {
    return this.allowlist?.size ?? null;
  }

  /** Everything checkable without the body: presence, version, timestamp window, allowlisted signer, token. */
  checkHeaders(headers: IncomingHttpHeaders): PendingAuth {
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
