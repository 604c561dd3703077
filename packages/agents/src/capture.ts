import { CappedFile, type ExecCommand, type ExecResult } from "@proctor/sandbox";
import type { AgentContext, AgentRunResult } from "./types";

/** Default cap for each of stdout.txt and stderr.txt. */
export const DEFAULT_LOG_CAP_BYTES = 10 * 1024 * 1024;

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
  options: { env?: Record<string, string>; prefix?: string; capBytes?: number; cwd?: string; stdin?: string } = {},
): Promise<ExecResult & { outputTruncated: boolean }> {
  const cap = options.capBytes ?? DEFAULT_LOG_CAP_BYTES;
  const prefix = options.prefix ?? "";
  const out = await CappedFile.open(`${ctx.logDir}/${prefix}stdout.txt`, cap);
  const err = await CappedFile.open(`${ctx.logDir}/${prefix}stderr.txt`, cap);
  try {
    const result = await ctx.sandbox.exec(command, {
      cwd: options.cwd ?? ctx.sandbox.workdir,
      env: options.env,
      ...(options.stdin !== undefined ? { stdin: options.stdin } : {}),
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
