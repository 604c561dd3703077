import { join } from "node:path";
import { CappedFile } from "@proctor/sandbox";
import { repoUrl } from "../workspace";
import { CHECK_OUTPUT_BYTES, CHECKOUT_MS, VERIFIER_LOG_BYTES, tail, throwIfAborted, type SandboxAttempt } from "./context";

/**
 * Phase 3: the repository at base_commit in the workdir, then the install commands. A failed
 * install is recorded as a `setup` error; the agent still runs (the verifier decides).
 */
export async function setUpWorkspace(attempt: SandboxAttempt): Promise<void> {
  const { task, sandbox, env, signal, phase, state } = attempt;
  const ws = task.workspace;
  if (!ws) return;
  const setupError = await phase(
    "workspace",
    async () => {
      const url = repoUrl(ws.repo, task.sourcePath);
      await env.repoCache.withCheckout(url, ws.baseCommit, (dir) => sandbox.upload(dir, sandbox.workdir), { timeoutMs: CHECKOUT_MS, signal });
      return installWorkspace(attempt, "install.log");
    },
    ws.repo,
  );
  if (setupError) state.errors.push({ kind: "setup", message: setupError });
}

/**
 * The task's install commands in `attempt.sandbox`'s workdir, in order, sharing the install
 * budget; their output goes to trials/<id>/setup/<logName>. Returns why one failed, or null.
 */
export async function installWorkspace(attempt: SandboxAttempt, logName: string): Promise<string | null> {
  const { task, sandbox, signal, trialDir, budgets } = attempt;
  const install = task.workspace?.install ?? [];
  if (install.length === 0) return null;
  const log = await CappedFile.open(join(trialDir, "setup", logName), VERIFIER_LOG_BYTES);
  try {
    const deadline = Date.now() + budgets.installMs;
    for (const command of install) {
      log.write(Buffer.from(`$ ${command}\n`));
      const result = await sandbox.exec({ shell: command }, {
        timeoutMs: Math.max(1, deadline - Date.now()),
        signal,
        onStdout: (c) => log.write(c),
        onStderr: (c) => log.write(c),
        maxOutputBytes: CHECK_OUTPUT_BYTES,
      });
      throwIfAborted(signal);
      if (result.timedOut) return `install command ${JSON.stringify(command)} timed out (install budget ${Math.round(budgets.installMs / 1000)} s)`;
      if (result.exitCode !== 0) return `install command ${JSON.stringify(command)} exited with ${result.exitCode}: ${tail(result.stderr || result.stdout)}`;
    }
    return null;
  } finally {
    await log.close();
  }
}
