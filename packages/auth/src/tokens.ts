import { createHash, timingSafeEqual } from "node:crypto";
import { readFileSync } from "node:fs";
import { InvalidTokenError, MalformedHeaderError, MissingHeaderError, TokenConfigError } from "./errors";
import { HeaderReader, type HeadersInput } from "./headers";

/** Default environment variables read by `loadTokens`. */
export const TOKENS_ENV = "PROCTOR_TOKENS";
export const TOKENS_FILE_ENV = "PROCTOR_TOKENS_FILE";

/** Plain tokens shorter than this are refused: they can be guessed. */
export const MIN_TOKEN_LENGTH = 16;

const HASHED_RE = /^sha256:([0-9a-f]{64})$/i;
const AUTHORIZATION = "Authorization";

function digest(token: string): Buffer {
  return createHash("sha256").update(token, "utf8").digest();
}

/** The storable form of a token: `sha256:<hex>`. Put this in the token file instead of the token. */
export function hashToken(token: string): string {
  return `sha256:${digest(token).toString("hex")}`;
}

/** What a verified bearer token tells the server: a label safe to log (the first hex digits of its hash). */
export interface TokenIdentity {
  tokenId: string;
}

/**
 * Bearer-token check. Tokens are held only as sha256 digests; a presented token is hashed and
 * compared with every digest by `crypto.timingSafeEqual` (all of them, whatever matches), so
 * timing reveals neither the token nor which entry matched.
 */
export class TokenVerifier {
  readonly #digests: Buffer[];

  private constructor(digests: Buffer[]) {
    this.#digests = digests;
  }

  /**
   * Build from entries that are either plain tokens (at least 16 characters) or `sha256:<hex>`
   * digests. Throws `TokenConfigError` naming the entry number (never its value).
   */
  static from(entries: Iterable<string>, options: { source?: string } = {}): TokenVerifier {
    const source = options.source ?? "tokens";
    const digests: Buffer[] = [];
    let n = 0;
    for (const raw of entries) {
      n++;
      const entry = raw.trim();
      const hashed = HASHED_RE.exec(entry);
      if (hashed?.[1]) {
        digests.push(Buffer.from(hashed[1], "hex"));
      } else if (/^sha256:/i.test(entry)) {
        throw new TokenConfigError(source, `entry ${n} starts with sha256: but is not 64 hex digits`);
      } else if (entry.length < MIN_TOKEN_LENGTH) {
        throw new TokenConfigError(source, `entry ${n} is shorter than ${MIN_TOKEN_LENGTH} characters; use a long random token (e.g. openssl rand -hex 32)`);
      } else if (/[\s,]/.test(entry)) {
        throw new TokenConfigError(source, `entry ${n} contains whitespace or a comma`);
      } else {
        digests.push(digest(entry));
      }
    }
    if (digests.length === 0) throw new TokenConfigError(source, "no tokens configured");
    return new TokenVerifier(digests);
  }

  get size(): number {
    return this.#digests.length;
  }

  /** Check one presented token. Throws `InvalidTokenError` (401). */
  verifyToken(token: string, header = AUTHORIZATION): TokenIdentity {
    const presented = digest(token);
    let match: Buffer | undefined;
    for (const candidate of this.#digests) {
      if (timingSafeEqual(presented, candidate) && match === undefined) match = candidate;
    }
    if (match === undefined) throw new InvalidTokenError(header);
    return { tokenId: match.toString("hex").slice(0, 12) };
  }

  /** Check `Authorization: Bearer <token>`. Throws `MissingHeaderError`, `MalformedHeaderError` or `InvalidTokenError` (all 401). */
  verifyHeaders(headers: HeadersInput): TokenIdentity {
    const value = new HeaderReader(headers).get(AUTHORIZATION);
    if (value === undefined) throw new MissingHeaderError(AUTHORIZATION, "send Authorization: Bearer <token>");
    const match = /^Bearer +(\S+) *$/i.exec(value);
    if (!match?.[1]) throw new MalformedHeaderError(AUTHORIZATION, '"Bearer <token>"');
    return this.verifyToken(match[1]);
  }
}

export interface LoadTokensOptions {
  /** A file with one token (or sha256:<hex>) per line, # comments; wins over the environment. */
  file?: string;
  env?: Readonly<Record<string, string | undefined>>;
  envVar?: string;
  fileEnvVar?: string;
}

function parseTokenFile(text: string): string[] {
  return text
    .split(/\r?\n/)
    .map((line) => line.replace(/^\s*#.*$/, "").trim())
    .filter((line) => line !== "");
}

/**
 * Load bearer tokens from `file`, else `$PROCTOR_TOKENS` (comma-separated), else the file named
 * by `$PROCTOR_TOKENS_FILE`. Throws `TokenConfigError` naming the source, never a token.
 */
export function loadTokens(options: LoadTokensOptions = {}): TokenVerifier {
  const env = options.env ?? process.env;
  const envVar = options.envVar ?? TOKENS_ENV;
  const fileEnvVar = options.fileEnvVar ?? TOKENS_FILE_ENV;
  const fromFile = (path: string, source: string): TokenVerifier => {
    let text: string;
    try {
      text = readFileSync(path, "utf8");
    } catch (cause) {
      throw new TokenConfigError(source, `cannot read the token file (${(cause as NodeJS.ErrnoException).code ?? "error"})`, { cause });
    }
    return TokenVerifier.from(parseTokenFile(text), { source });
  };
  if (options.file !== undefined) return fromFile(options.file, options.file);
  const list = env[envVar];
  const file = env[fileEnvVar];
  if (list !== undefined && file !== undefined) throw new TokenConfigError(`$${envVar}`, `both $${envVar} and $${fileEnvVar} are set; keep only one`);
  if (list !== undefined) return TokenVerifier.from(list.split(",").filter((s) => s.trim() !== ""), { source: `$${envVar}` });
  if (file !== undefined) return fromFile(file, `${file} (from $${fileEnvVar})`);
  throw new TokenConfigError(`$${envVar}`, `no bearer tokens configured: set $${envVar} (comma-separated) or $${fileEnvVar}`);
}
