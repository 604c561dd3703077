import { readFileSync } from "node:fs";
import { bytesToHex } from "@noble/hashes/utils.js";
import { AllowlistError, InvalidAddressError } from "./errors";
import { decodeAddress } from "./ss58";

/** Default environment variables read by `loadAllowlist`. */
export const HOTKEYS_ENV = "PROCTOR_HOTKEYS";
export const HOTKEYS_FILE_ENV = "PROCTOR_HOTKEYS_FILE";

export interface AllowlistOptions {
  /** Reject addresses of any other network prefix (e.g. 42 for Bittensor/generic Substrate). */
  ss58Prefix?: number;
  /** Names where the entries came from, for error messages (an env var or a file path). */
  source?: string;
}

/**
 * The hotkeys allowed to use a server. Membership is by public key, so the same key written
 * for two networks is one entry. Build it with `Allowlist.from`, `parseAllowlist` or
 * `loadAllowlist`; every entry is validated and a bad one is an `AllowlistError` naming it.
 */
export class Allowlist {
  readonly #keys: Map<string, string>;

  private constructor(keys: Map<string, string>) {
    this.#keys = keys;
  }

  /** Build from SS58 addresses; entry numbers in errors are 1-based positions. */
  static from(addresses: Iterable<string>, options: AllowlistOptions = {}): Allowlist {
    return Allowlist.#build([...addresses].map((address, i) => ({ address: address.trim(), entry: i + 1 })), options, "entry");
  }

  static #build(entries: { address: string; entry: number }[], options: AllowlistOptions, unit: "entry" | "line"): Allowlist {
    const source = options.source ?? "allowlist";
    const keys = new Map<string, string>();
    for (const { address, entry } of entries) {
      try {
        const { publicKey } = decodeAddress(address, { expectedPrefix: options.ss58Prefix });
        keys.set(bytesToHex(publicKey), address);
      } catch (cause) {
        if (!(cause instanceof InvalidAddressError)) throw cause;
        throw new AllowlistError(source, entry, `${unit} ${entry} is not a valid hotkey: ${cause.message}`, { cause });
      }
    }
    return new Allowlist(keys);
  }

  /** Number of distinct keys. */
  get size(): number {
    return this.#keys.size;
  }

  /** The addresses as configured. */
  get addresses(): string[] {
    return [...this.#keys.values()];
  }

  /** True when the 32-byte public key is allowed. */
  hasPublicKey(publicKey: Uint8Array): boolean {
    return this.#keys.has(bytesToHex(publicKey));
  }

  /** True when the SS58 address is valid and its key allowed (never throws). */
  has(address: string): boolean {
    try {
      return this.hasPublicKey(decodeAddress(address).publicKey);
    } catch (error) {
      if (error instanceof InvalidAddressError) return false;
      throw error;
    }
  }

  /** @internal Used by `parseAllowlist`. */
  static fromEntries(entries: { address: string; entry: number }[], options: AllowlistOptions, unit: "entry" | "line"): Allowlist {
    return Allowlist.#build(entries, options, unit);
  }
}

/**
 * Parse allowlist text. "list" (default for env vars): comma- or whitespace-separated SS58
 * addresses, entries numbered by position. "file": one address per line, `#` starts a comment,
 * blank lines ignored, entries numbered by line. An empty result is an error: a server with
 * nobody allowed is a misconfiguration, not a lock.
 */
export function parseAllowlist(text: string, options: AllowlistOptions & { format?: "list" | "file" } = {}): Allowlist {
  const source = options.source ?? "allowlist";
  let entries: { address: string; entry: number }[];
  if (options.format === "file") {
    entries = text.split(/\r?\n/).flatMap((line, i) => {
      const address = line.replace(/#.*$/, "").trim();
      return address === "" ? [] : [{ address, entry: i + 1 }];
    });
    const bad = entries.find((e) => /[\s,]/.test(e.address));
    if (bad) throw new AllowlistError(source, bad.entry, `line ${bad.entry} holds more than one value; put one hotkey per line`);
  } else {
    entries = text
      .split(/[\s,]+/)
      .filter((s) => s !== "")
      .map((address, i) => ({ address, entry: i + 1 }));
  }
  if (entries.length === 0) throw new AllowlistError(source, null, "no hotkeys listed; add at least one SS58 address");
  return Allowlist.fromEntries(entries, { ...options, source }, options.format === "file" ? "line" : "entry");
}

export interface LoadAllowlistOptions extends AllowlistOptions {
  /** A file with one hotkey per line; wins over the environment. */
  file?: string;
  env?: Readonly<Record<string, string | undefined>>;
  envVar?: string;
  fileEnvVar?: string;
}

/**
 * Load the allowlist from `file`, else `$PROCTOR_HOTKEYS` (comma-separated), else the file named
 * by `$PROCTOR_HOTKEYS_FILE`. Throws `AllowlistError` when none is set, both env vars are set,
 * the file cannot be read, or an entry is invalid.
 */
export function loadAllowlist(options: LoadAllowlistOptions = {}): Allowlist {
  const env = options.env ?? process.env;
  const envVar = options.envVar ?? HOTKEYS_ENV;
  const fileEnvVar = options.fileEnvVar ?? HOTKEYS_FILE_ENV;
  const readList = (path: string, source: string): Allowlist => {
    let text: string;
    try {
      text = readFileSync(path, "utf8");
    } catch (cause) {
      throw new AllowlistError(source, null, `cannot read the hotkey allowlist file (${(cause as NodeJS.ErrnoException).code ?? "error"})`, { cause });
    }
    return parseAllowlist(text, { ...options, source, format: "file" });
  };
  if (options.file !== undefined) return readList(options.file, options.file);
  const list = env[envVar];
  const file = env[fileEnvVar];
  if (list !== undefined && file !== undefined) throw new AllowlistError(`$${envVar}`, null, `both $${envVar} and $${fileEnvVar} are set; keep only one`);
  if (list !== undefined) return parseAllowlist(list, { ...options, source: `$${envVar}`, format: "list" });
  if (file !== undefined) return readList(file, `${file} (from $${fileEnvVar})`);
  throw new AllowlistError(`$${envVar}`, null, `no hotkey allowlist configured: set $${envVar} to comma-separated SS58 addresses or $${fileEnvVar} to a file with one per line`);
}
