import { closeSync, constants, fdatasync, fdatasyncSync, fsyncSync, mkdirSync, openSync, readFileSync, renameSync, writeSync } from "node:fs";
import { dirname } from "node:path";
import { ReplayCacheUnavailableError } from "./errors";
import { ReplayCache } from "./replay-cache";
import type { ReplayCacheOptions, ReplayStore } from "./replay-cache";

/**
 * When the replay file is forced to disk:
 * - `"interval"` (default): every entry is written (write(2)) before the request is accepted, so it
 *   survives a crash or kill -9 of the process; the file is fdatasync'ed at most every
 *   `syncIntervalMs` (default 1 s) while it has new entries, so a power loss or kernel crash
 *   forgets at most that last second of entries.
 * - `"always"`: fdatasync before accepting each request (a disk flush per signed request).
 * - `"never"`: leave flushing to the OS (survives a process crash, not a machine crash).
 */
export type ReplayFsyncPolicy = "interval" | "always" | "never";

export interface FileReplayCacheOptions extends ReplayCacheOptions {
  /** The append-only file, e.g. `<data-dir>/auth/replay-cache.log`; created with its directory. */
  path: string;
  fsync?: ReplayFsyncPolicy;
  /** fdatasync period for `"interval"` (default 1,000 ms). */
  syncIntervalMs?: number;
  /**
   * Rewrite the file with only the live entries once it holds more than
   * max(`compactMinLines`, 2 x live entries) lines (default 10,000): the file stays within about
   * twice the in-memory cache, which `maxEntries` bounds.
   */
  compactMinLines?: number;
  /** Clock for loading (default `Date.now`). */
  now?: () => number;
}

const LINE_RE = /^(\d{1,16}) (\S{1,256})$/;

/**
 * A `ReplayStore` that survives restarts: the in-memory `ReplayCache` plus an append-only file of
 * `<expiresAtMs> <key>` lines under the server's data directory. `open` loads the file, drops
 * expired entries and torn lines (a crash during an append), and rewrites it compacted; every
 * accepted key is appended before `checkAndRecord` returns true. If the append fails the request
 * is refused (503) rather than accepted unrecorded. One process per file.
 */
export class FileReplayCache implements ReplayStore {
  readonly path: string;
  readonly #memory: ReplayCache;
  readonly #fsync: ReplayFsyncPolicy;
  readonly #compactMinLines: number;
  #fd: number;
  #lines = 0;
  #dirty = false;
  #syncing = false;
  #closed = false;
  /** Descriptors replaced by a compaction while an asynchronous fdatasync still used them. */
  #retired: number[] = [];
  readonly #timer: NodeJS.Timeout | null = null;
  /** What `open` found: entries kept, expired entries dropped, unreadable lines skipped. */
  readonly loaded: { live: number; expired: number; skipped: number };

  private constructor(options: FileReplayCacheOptions) {
    this.path = options.path;
    this.#memory = new ReplayCache(options);
    this.#fsync = options.fsync ?? "interval";
    this.#compactMinLines = options.compactMinLines ?? 10_000;
    const now = (options.now ?? Date.now)();
    mkdirSync(dirname(this.path), { recursive: true, mode: 0o700 });
    this.loaded = this.#load(now);
    this.#fd = this.#rewrite(now);
    if (this.#fsync === "interval") {
      this.#timer = setInterval(() => this.#syncSoon(), options.syncIntervalMs ?? 1_000);
      this.#timer.unref();
    }
  }

  /** Load (or create) the file at `options.path`. Synchronous: call it once at start-up. */
  static open(options: FileReplayCacheOptions): FileReplayCache {
    return new FileReplayCache(options);
  }

  /** Live entries held in memory. */
  get size(): number {
    return this.#memory.size;
  }

  /** Lines in the file now (live + expired since the last compaction). */
  get fileLines(): number {
    return this.#lines;
  }

  checkAndRecord(key: string, expiresAtMs: number, nowMs: number): boolean {
    if (this.#closed) throw new ReplayCacheUnavailableError("the replay cache is closed");
    if (!/^\S{1,256}$/.test(key) || !Number.isSafeInteger(expiresAtMs) || expiresAtMs < 0) {
      throw new TypeError("replay keys are 1-256 non-space characters and expiries non-negative integer ms");
    }
    if (!this.#memory.checkAndRecord(key, expiresAtMs, nowMs)) return false;
    try {
      writeAll(this.#fd, `${expiresAtMs} ${key}\n`);
      if (this.#fsync === "always") fdatasyncSync(this.#fd);
      else this.#dirty = true;
    } catch (error) {
      // The key stays in memory (this process still refuses it); the client retries with a new uuid.
      throw new ReplayCacheUnavailableError(`writing ${this.path} failed: ${(error as NodeJS.ErrnoException).code ?? String(error)}`, { cause: error });
    }
    this.#lines += 1;
    if (this.#lines > Math.max(this.#compactMinLines, 2 * this.#memory.size)) {
      try {
        this.compact(nowMs);
      } catch {
        // The appended line is on disk; compaction is retried on the next append.
      }
    }
    return true;
  }

  /** Rewrite the file with only the entries live at `nowMs` (atomic: temp file, fsync, rename, fsync dir). */
  compact(nowMs: number): void {
    const old = this.#fd;
    this.#fd = this.#rewrite(nowMs);
    if (this.#syncing) this.#retired.push(old);
    else closeSync(old);
  }

  /** fdatasync now (also done by `close`). */
  flush(): void {
    if (this.#closed) return;
    fdatasyncSync(this.#fd);
    this.#dirty = false;
  }

  /** Flush and close the file; later `checkAndRecord` calls are refused with 503. */
  close(): void {
    if (this.#closed) return;
    if (this.#timer) clearInterval(this.#timer);
    try {
      this.flush();
    } finally {
      this.#closed = true;
      if (this.#syncing) this.#retired.push(this.#fd);
      else closeSync(this.#fd);
    }
  }

  #load(nowMs: number): { live: number; expired: number; skipped: number } {
    let text: string;
    try {
      text = readFileSync(this.path, "utf8");
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === "ENOENT") return { live: 0, expired: 0, skipped: 0 };
      throw error;
    }
    let expired = 0;
    let skipped = 0;
    for (const line of text.split("\n")) {
      if (line === "") continue;
      const match = LINE_RE.exec(line);
      if (!match) {
        skipped += 1;
        continue;
      }
      const expiresAtMs = Number(match[1]);
      if (expiresAtMs < nowMs) expired += 1;
      else this.#memory.restore(match[2] ?? "", expiresAtMs);
    }
    return { live: this.#memory.size, expired, skipped };
  }

  /**
   * Write the live entries to a fresh file that then replaces the old one; returns its
   * descriptor (opened for appending, so it keeps pointing at the file now at `path`).
   */
  #rewrite(nowMs: number): number {
    const entries = this.#memory.liveEntries(nowMs);
    const temp = `${this.path}.tmp`;
    const fd = openSync(temp, constants.O_WRONLY | constants.O_CREAT | constants.O_TRUNC | constants.O_APPEND, 0o600);
    try {
      const chunk: string[] = [];
      for (const [key, expiresAtMs] of entries) {
        chunk.push(`${expiresAtMs} ${key}\n`);
        if (chunk.length >= 4096) writeAll(fd, chunk.splice(0).join(""));
      }
      if (chunk.length > 0) writeAll(fd, chunk.join(""));
      fsyncSync(fd);
      renameSync(temp, this.path);
      const dir = openSync(dirname(this.path), "r");
      try {
        fsyncSync(dir);
      } finally {
        closeSync(dir);
      }
    } catch (error) {
      closeSync(fd);
      throw error;
    }
    this.#lines = entries.length;
    this.#dirty = false;
    return fd;
  }

  #syncSoon(): void {
    if (!this.#dirty || this.#syncing || this.#closed) return;
    this.#dirty = false;
    this.#syncing = true;
    fdatasync(this.#fd, (error) => {
      this.#syncing = false;
      if (error) this.#dirty = true;
      for (const fd of this.#retired.splice(0)) closeSync(fd);
    });
  }
}

function writeAll(fd: number, text: string): void {
  const bytes = Buffer.from(text);
  let offset = 0;
  while (offset < bytes.length) offset += writeSync(fd, bytes, offset, bytes.length - offset);
}
