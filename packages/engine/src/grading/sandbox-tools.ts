import { RuntimeUnavailableError, SandboxLostError, SandboxStoppedError, type ExecOptions, type Sandbox } from "@proctor/sandbox";

/** argv running `script` with the sandbox's trusted shell (the read-only busybox in a container). */
export function trusted(sandbox: Sandbox, script: string, args: string[] = []): string[] {
  return [...sandbox.trustedTools, "sh", "-c", script, "proctor", ...args];
}

/**
 * `args` in groups small enough for one exec's argument list (the kernel's limit is about 2 MB
 * in all, and the agent chooses how many paths and how long): at most 64 KB each.
 */
export function argumentChunks(args: readonly string[], maxBytes = 64 * 1024): string[][] {
  const chunks: string[][] = [];
  let chunk: string[] = [];
  let bytes = 0;
  for (const arg of args) {
    const size = Buffer.byteLength(arg) + 1;
    if (chunk.length > 0 && bytes + size > maxBytes) {
      chunks.push(chunk);
      chunk = [];
      bytes = 0;
    }
    chunk.push(arg);
    bytes += size;
  }
  if (chunk.length > 0) chunks.push(chunk);
  return chunks;
}

export function adminOptions(sandbox: Sandbox): Pick<ExecOptions, "user"> {
  return sandbox.adminUser !== undefined ? { user: sandbox.adminUser } : {};
}

const stoppedError = () =>
  new SandboxStoppedError("the sandbox stopped during the agent's run (every process in it was killed, or it ran out of memory), so nothing could be verified");
const oomStoppedError = () => new SandboxStoppedError("out of memory: the sandbox was stopped at its memory limit during the agent's run, so nothing could be verified");

/** Why the sandbox stopped, as precisely as the runtime can tell. */
export async function stopped(sandbox: Sandbox): Promise<SandboxStoppedError | SandboxLostError> {
  if (await sandbox.stoppedExternally?.().catch(() => false)) {
    return new SandboxLostError("the sandbox was stopped from outside (a daemon restart or docker stop) during the trial");
  }
  const oom = await sandbox.outOfMemoryKills?.().catch(() => 0);
  return oom ? oomStoppedError() : stoppedError();
}

export async function assertRunning(sandbox: Sandbox): Promise<void> {
  if (sandbox.isRunning && !(await sandbox.isRunning())) throw await stopped(sandbox);
}

/**
 * Whether the sandbox has stopped, allowing a moment for a stop in progress to show: a container
 * whose processes were all killed may still be reported running for a few ms.
 */
export async function stoppedForGood(sandbox: Sandbox, settleMs = 3000): Promise<boolean> {
  if (!sandbox.isRunning) return false;
  const until = Date.now() + settleMs;
  for (;;) {
    const running = await sandbox.isRunning().catch(() => true);
    if (!running) return true;
    if (Date.now() >= until) return false;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

/** Any failure while verifying becomes "the sandbox stopped" when it has: the agent's doing, not infra's. */
export async function asStopped<T>(sandbox: Sandbox, signal: AbortSignal, run: () => Promise<T>): Promise<T> {
  try {
    return await run();
  } catch (error) {
    if (signal.aborted || error instanceof RuntimeUnavailableError) throw error;
    if (error instanceof SandboxStoppedError || (await stoppedForGood(sandbox))) throw await stopped(sandbox);
    throw error;
  }
}
