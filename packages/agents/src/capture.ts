import { createWriteStream, type WriteStream } from "node:fs";
import { mkdir } from "node:fs/promises";
import { dirname } from "node:path";
import type { ExecCommand, ExecResult } from "@proctor/sandbox";
import type { AgentContext, AgentRunResult } from "./types";

/** Default cap for each of stdout.txt and stderr.txt. */
export const DEFAULT_LOG_CAP_BYTES = 10 * 1024 * 1024;

/** A file that accepts at most `capBytes` and then notes that it was cut. */
export class CappedFile {
  private written = 0;
  private truncatedFlag = false;
  private readonly stream: WriteStream;
  private readonly closed: Promise<void>;

  private constructor(readonly path: string, private readonly capBytes: number) {
    this.stream = createWriteStream(path);
    this.closed = new Promise((resolve, reject) => {
      this.stream.once("close", () => resolve());
      this.stream.once("error", reject);
    });
  }

  static async open(path: string, capBytes: number): Promise<CappedFile> {
    await mkdir(dirname(path), { recursive: true });
    return new CappedFile(path, capBytes);
  }

  get truncated(): boolean {
    return this.truncatedFlag;
  }

  write(chunk: Buffer): void {
    if (this.truncatedFlag) return;
    const room = this.capBytes - this.written;
    if (chunk.length <= room) {
      this.written += chunk.length;
      this.stream.write(chunk);
      return;
    }
    if (room > 0) this.stream.write(chunk.subarray(0, room));
    this.written = this.capBytes;
    this.truncatedFlag = true;
    this.stream.write(`\n[proctor: output cut at ${this.capBytes} bytes]\n`);
  }

  async close(): Promise<void> {
    this.stream.end();
    await this.closed;
  }
}

/** Milliseconds left before the context's deadline (never below 1, so exec still times out). */
export function remainingMs(ctx: AgentContext, now = Date.now()): number {
  return Math.max(1, Math.min(ctx.timeoutMs, ctx.deadlineMs - now));
}

/**
 * Run one command for the agent, streaming its output to `<logDir>/<prefix>stdout.txt` and
 * `<prefix>stderr.txt` (each capped), bounded by the context's deadline and signal.
 */
export async function execLogged(
  ctx: AgentContext,
  command: ExecCommand,
  options: { env?: Record<string, string>; prefix?: string; capBytes?: number; cwd?: string } = {},
): Promise<ExecResult & { outputTruncated: boolean }> {
  const cap = options.capBytes ?? DEFAULT_LOG_CAP_BYTES;
  const prefix = options.prefix ?? "";
  const out = await CappedFile.open(`${ctx.logDir}/${prefix}stdout.txt`, cap);
  const err = await CappedFile.open(`${ctx.logDir}/${prefix}stderr.txt`, cap);
  try {
    const result = await ctx.sandbox.exec(command, {
      cwd: options.cwd ?? ctx.sandbox.workdir,
      env: options.env,
      timeoutMs: remainingMs(ctx),
      signal: ctx.signal,
      onStdout: (c) => out.write(c),
      onStderr: (c) => err.write(c),
      // The files hold the full (capped) output; the result only needs a tail for messages.
      maxOutputBytes: 64 * 1024,
    });
    return { ...result, outputTruncated: out.truncated || err.truncated };
  } finally {
    await Promise.all([out.close(), err.close()]);
  }
}

export function toRunResult(result: ExecResult & { outputTruncated: boolean }): AgentRunResult {
  return {
    exitCode: result.timedOut || result.aborted ? null : result.exitCode,
    timedOut: result.timedOut,
    aborted: result.aborted,
    durationMs: result.durationMs,
    outputTruncated: result.outputTruncated,
  };
}
