import { join } from "node:path";
import { AgentSetupError, RunFatalAgentError, type AgentContext, type AgentRunResult } from "@proctor/agents";
import { RuntimeUnavailableError, SandboxError } from "@proctor/sandbox";
import { effectiveLimits, message, throwIfAborted, type SandboxAttempt } from "./context";

const DISK_POLL_MS = 5_000;

/**
 * Phase 4: agent setup, then the agent's run, sharing the agent timeout. A RunFatalAgentError
 * (a rejected model key, say) is rethrown: it ends the whole run. Everything else is recorded.
 */
export async function runAgent(attempt: SandboxAttempt): Promise<void> {
  const { sandbox, task, env, signal, phase, state, trialDir, budgets } = attempt;
  const started = Date.now();
  // The agent's own signal also fires when the sandbox writes past its disk limit.
  const stop = new AbortController();
  const agentSignal = AbortSignal.any([signal, stop.signal]);
  const ctx: AgentContext = {
    sandbox,
    task,
    timeoutMs: budgets.agentMs,
    deadlineMs: started + budgets.agentMs,
    signal: agentSignal,
    logDir: join(trialDir, "agent"),
    logger: env.logger,
    ...(env.maxCostUsd !== undefined ? { maxCostUsd: env.maxCostUsd } : {}),
  };
  const disk = watchDisk(attempt, stop);
  let timedOut = false;
  let exitCode: number | null = null;
  let result: AgentRunResult | null = null;
  const failed = (what: string) => (error: unknown) => {
    throwIfAborted(signal);
    // A fatal agent error stops the run; a daemon that stopped answering retries the trial.
    if (error instanceof RunFatalAgentError || error instanceof RuntimeUnavailableError) throw error;
    state.errors.push({ kind: error instanceof SandboxError && !disk.exceeded ? "infra" : "agent", message: `${what}: ${message(error)}` });
    return null;
  };
  try {
    let setupOk = true;
    if (env.agent.setup) {
      const setup = env.agent.setup.bind(env.agent);
      await phase("agent_setup", () => setup(ctx)).catch((error: unknown) => {
        setupOk = false;
        if (error instanceof AgentSetupError && error.timedOut) timedOut = true;
        return failed("agent setup failed")(error);
      });
    }
    if (setupOk && !disk.exceeded) {
      result = await phase("agent", () => env.agent.run({ ...ctx, timeoutMs: Math.max(1, ctx.deadlineMs - Date.now()) }), env.agent.name).catch(failed("agent failed"));
      if (result) {
        timedOut = result.timedOut;
        exitCode = result.exitCode;
        if (result.error) state.errors.push({ kind: result.errorKind ?? "agent", message: result.error });
      }
    }
  } finally {
    disk.stop();
  }
  if (disk.exceeded) state.errors.push({ kind: "agent", message: disk.exceeded });
  const version = env.agent.version?.() ?? null;
  state.agent = {
    exitCode,
    timedOut,
    name: env.agent.name,
    ...(version !== null ? { version } : {}),
    ...(result?.model !== undefined ? { model: result.model } : {}),
    ...(result?.usage !== undefined ? { usage: result.usage } : {}),
  };
  throwIfAborted(signal);
}

/** Polls the sandbox's disk use while the agent runs when the trial has a storage limit. */
function watchDisk(attempt: SandboxAttempt, stop: AbortController): { exceeded: string | null; stop: () => void } {
  const { sandbox, task, env, trialId } = attempt;
  const limitMb = effectiveLimits(task, env.limits).storageMb;
  const state = { exceeded: null as string | null, stop: () => undefined as void };
  if (limitMb === undefined || !sandbox.diskUsageBytes) return state;
  const measure = sandbox.diskUsageBytes.bind(sandbox);
  let busy = false;
  const timer = setInterval(() => {
    if (busy || state.exceeded) return;
    busy = true;
    measure()
      .then((bytes) => {
        if (bytes > limitMb * 1024 * 1024 && !state.exceeded) {
          state.exceeded = `disk limit exceeded: the sandbox wrote ${Math.round(bytes / 1024 / 1024)} MB, above its ${limitMb} MB limit (storage_mb); the agent was stopped`;
          stop.abort(new Error(state.exceeded));
        }
      })
      .catch((error: unknown) => env.logger.debug("measuring disk use failed", { trialId, error: message(error) }))
      .finally(() => (busy = false));
  }, DISK_POLL_MS);
  timer.unref();
  state.stop = () => clearInterval(timer);
  return state;
}
