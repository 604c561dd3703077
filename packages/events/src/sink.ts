import { mkdir, open, type FileHandle } from "node:fs/promises";
import { dirname } from "node:path";
import type { Logger } from "@proctor/schema";
import { silentLogger } from "@proctor/schema";
import { JsonlClosedError, JsonlWriteError } from "./errors";

export interface JsonlSinkOptions {
  logger?: Logger;
  /** Create the parent directory if missing. Default true. */
  mkdir?: boolean;
}

const TAIL_CHUNK = 64 * 1024;

function describe(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/**
 * Finds where an unterminated last line starts (the byte after the last "\n"), or null when the
 * file is empty or ends with "\n".
 */
async function unterminatedTailStart(handle: FileHandle, size: number): Promise<number | null> {
  if (size === 0) return null;
  const last = Buffer.alloc(1);
  await handle.read(last, 0, 1, size - 1);
  if (last[0] === 0x0a) return null;
  let end = size;
  const chunk = Buffer.alloc(TAIL_CHUNK);
  while (end > 0) {
    const start = Math.max(0, end - TAIL_CHUNK);
    const { bytesRead } = await handle.read(chunk, 0, end - start, start);
    const newline = chunk.subarray(0, bytesRead).lastIndexOf(0x0a);
    if (newline >= 0) return start + newline + 1;
    end = start;
  }
  return 0;
}

/**
 * Appends values as JSON lines to one file (events.jsonl, results.jsonl). write() queues a line
 * and returns at once; lines reach the file in write() order, batched while a write is in
 * flight. flush() resolves when every queued line is written (fsync with `{ fsync: true }`),
 * close() additionally fsyncs and closes the file. A failed write is reported to the logger
 * and makes flush(), close() and later write() calls fail with a JsonlWriteError.
 */
export class JsonlSink<T = unknown> {
  private pending: string[] = [];
  private draining: Promise<void> | null = null;
  private error: JsonlWriteError | null = null;
  private closing: Promise<void> | null = null;
  private lines = 0;

  private constructor(
    readonly path: string,
    private readonly handle: FileHandle,
    private readonly logger: Logger,
    /** The unterminated last line (a crash mid-write) removed on open, or null. */
    readonly repairedTail: string | null,
    /** Bytes in the file that end with a complete line; a failed write is cut back to this. */
    private size: number,
  ) {}

  /**
   * Opens `path` for appending, creating it (and its directory) if needed. If the file ends in
   * an unterminated line — a crash mid-write, which readJsonl also ignores — that partial line
   * is cut off (and logged) so new lines do not glue onto it. Throws JsonlWriteError.
   */
  static async open<T = unknown>(path: string, options: JsonlSinkOptions = {}): Promise<JsonlSink<T>> {
    const logger = options.logger ?? silentLogger;
    let handle: FileHandle;
    try {
      if (options.mkdir ?? true) await mkdir(dirname(path), { recursive: true });
      handle = await open(path, "a+");
    } catch (error) {
      throw new JsonlWriteError(`${path}: cannot open for appending: ${describe(error)}`, path, { cause: error });
    }
    try {
      const { size } = await handle.stat();
      const tailStart = await unterminatedTailStart(handle, size);
      let repaired: string | null = null;
      if (tailStart !== null) {
        const tail = Buffer.alloc(Math.min(size - tailStart, 200));
        await handle.read(tail, 0, tail.length, tailStart);
        repaired = tail.toString("utf8");
        await handle.truncate(tailStart);
        logger.warn("removed an unterminated last line (a crash mid-write) before appending", {
          path,
          bytes: size - tailStart,
          content: repaired,
        });
      }
      return new JsonlSink<T>(path, handle, logger, repaired, tailStart ?? size);
    } catch (error) {
      await handle.close().catch(() => undefined);
      throw new JsonlWriteError(`${path}: cannot prepare for appending: ${describe(error)}`, path, { cause: error });
    }
  }

  /** Lines handed to write() so far. */
  get written(): number {
    return this.lines;
  }

  /** The write error that stopped this sink, if any. */
  get failure(): JsonlWriteError | null {
    return this.error;
  }

  /**
   * Queues one value as a JSON line. Throws JsonlClosedError after close(), the sink's
   * JsonlWriteError after a failed write, and a TypeError for a value JSON cannot represent.
   */
  write(value: T): void {
    if (this.closing) throw new JsonlClosedError(this.path);
    if (this.error) throw this.error;
    const json = JSON.stringify(value);
    if (typeof json !== "string") throw new TypeError(`${this.path}: cannot write ${String(value)} as a JSON line`);
    this.pending.push(`${json}\n`);
    this.lines++;
    this.draining ??= this.drain();
  }

  /** Resolves when every line queued so far is written; with `fsync`, also on disk. Rejects with the write error. */
  async flush(options: { fsync?: boolean } = {}): Promise<void> {
    while (this.draining) await this.draining;
    if (this.error) throw this.error;
    if (options.fsync) await this.sync();
  }

  /** Writes what is queued, fsyncs and closes. Rejects if any write, the fsync or the close failed. Safe to call twice. */
  close(): Promise<void> {
    this.closing ??= (async () => {
      try {
        while (this.draining) await this.draining;
        if (!this.error) await this.sync();
      } finally {
        try {
          await this.handle.close();
        } catch (error) {
          this.fail("closing failed", error);
        }
      }
      if (this.error) throw this.error;
    })();
    return this.closing;
  }

  private async sync(): Promise<void> {
    try {
      await this.handle.sync();
    } catch (error) {
      this.fail("fsync failed", error);
      throw this.error;
    }
  }

  private async drain(): Promise<void> {
    while (this.pending.length > 0 && !this.error) {
      const chunk = Buffer.from(this.pending.join(""), "utf8");
      const count = this.pending.length;
      this.pending = [];
      let offset = 0;
      try {
        while (offset < chunk.length) {
          const { bytesWritten } = await this.handle.write(chunk, offset, chunk.length - offset, null);
          offset += bytesWritten;
        }
        this.size += chunk.length;
      } catch (error) {
        // Never leave half a line behind (a full disk): cut back to the last complete line.
        if (offset > 0) await this.handle.truncate(this.size).catch((cut: unknown) => this.logger.error("cutting a partial line failed", { path: this.path, error: describe(cut) }));
        this.fail(`writing ${count} line(s) failed`, error, count + this.pending.length);
        this.pending = [];
      }
    }
    // Cleared in the same tick as the loop's final check, so a write() after this starts a new drain.
    this.draining = null;
  }

  private fail(what: string, error: unknown, lostLines?: number): void {
    const failure = new JsonlWriteError(`${this.path}: ${what}: ${describe(error)}`, this.path, { cause: error });
    this.logger.error("JSONL sink failed", { path: this.path, error: failure.message, lostLines });
    this.error ??= failure;
  }
}
