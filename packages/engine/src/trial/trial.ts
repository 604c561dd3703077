import { mkdir, rm } from "node:fs/promises";
import { join } from "node:path";
import { AgentError, RunFatalAgentError } from "@proctor/agents";
import { isPass } from "@proctor/reward";
import { ImageError, raceSignal, RuntimeUnavailableError, SandboxLostError, SandboxStartError, SandboxStoppedError, type Sandbox } from "@proctor/sandbox";
import { retry } from "../clock";
import type { Phase, TaskSpec, TrialError, TrialResult } from "@proctor/schema";
import { WorkspaceError } from "../errors";
import { trialIdOf } from "../ids";
import { runAgent } from "./agent";
import { collectLogs, type Collected } from "./collect";
import { checkRewardUnchanged, GraderError, OutputsTooLargeError, OutputsUnusableError, restoreOutputs, startGrading, type Grading } from "../grading";
import {
  CHECKOUT_MS, DEFAULT_LOG_BYTES, HOUSEKEEPING_MS, SANDBOX_START_MS, message,
  type Attempt, type AttemptState, type Budgets, type SandboxAttempt, type TrialEnvironment,
} from "./context";
import { startSandbox } from "./environment";
import { setUpWorkspace } from "./workspace";
import { gradeCompetition, prepareCompetition } from "./grade-competition";

/** Infra errors that justify starting the trial again in a new sandbox. */
export function isRetryableInfra(error: unknown): boolean {
  return error instanceof ImageError || error instanceof SandboxStartError || error instanceof RuntimeUnavailableError || error instanceof SandboxLostError;
}

/** How long a retry waits for a runtime that stopped answering (a daemon restart) to come back. */
const RUNTIME_RETURN_MS = 120_000;
/**
 * Runs of a trial cut short by the runtime itself (it stopped answering, or stopped the sandbox)
 * that do not count toward maxInfraRetries: one daemon restart can break several runs in a row
 * (while it shuts down, and while it starts), and none of that is the trial's doing.
 */
const RUNTIME_OUTAGE_RETRIES = 5;

/** After the runtime dropped out, wait (bounded) until it answers again, so the retry is not wasted; true once it answers. */
async function waitForRuntime(env: TrialEnvironment, signal: AbortSignal): Promise<boolean> {
  const available = env.runtime.available?.bind(env.runtime);
  if (!available) return false;
  const until = Date.now() + RUNTIME_RETURN_MS;
  for (;;) {
    if (await available()) return true;
    if (signal.aborted || Date.now() >= until) return false;
    await env.clock.sleep(1000, signal).catch(() => undefined);
  }
}

/** The whole-trial deadline passed; the trial ends as an infra error. */
class TrialDeadlineError extends Error {
  override name = "TrialDeadlineError";
}

function budgetsOf(task: TaskSpec, multiplier: number): Budgets {
  return {
    buildMs: task.environment.buildTimeoutSec * 1000 * multiplier,
    installMs: task.workspace ? task.workspace.installTimeoutSec * 1000 * multiplier : 0,
    agentMs: task.agent.timeoutSec * 1000 * multiplier,
    verifierMs: task.verifier.timeoutSec * 1000 * multiplier,
    checksMs: task.verifier.mode === "checks" ? task.verifier.checks.reduce((s, c) => s + c.timeoutSec * 1000 * multiplier, 0) : 0,
  };
}

/** The most a trial may take from start to end (every phase's budget plus housekeeping). */
function trialBudgetMs(task: TaskSpec, b: Budgets): number {
  return b.buildMs + SANDBOX_START_MS + (task.workspace ? CHECKOUT_MS + b.installMs : 0) + b.agentMs + b.verifierMs + b.checksMs + 4 * HOUSEKEEPING_MS;
}

/**
 * Run one trial (task x attempt) to its result: fresh sandbox, workspace, agent, verifier, log
 * collection, sandbox removal. Infra errors from image resolution and sandbox start are retried up
 * to `maxInfraRetries` times. Returns null when `signal` (the run's) aborted the trial: such a
 * trial is not a result and a resume runs it again. Throws RunFatalAgentError (the run must stop).
 */
export async function runTrial(task: TaskSpec, attempt: number, env: TrialEnvironment, signal: AbortSignal): Promise<TrialResult | null> {
  const trialId = trialIdOf(task.id, attempt);
  const startedAt = new Date();
  let retries = 0;
  let outages = 0;
  let outcome: AttemptState;
  try {
    outcome = await retry(
      async (n) => {
        for (;;) {
          retries = n - 1 + outages;
          env.emit({ type: "trial_started", trialId, taskId: task.id, data: { attempt, retry: retries } });
          try {
            return await runAttempt(task, trialId, env, signal);
          } catch (error) {
            if (!(error instanceof RuntimeUnavailableError || error instanceof SandboxLostError)) throw error;
            const back = await waitForRuntime(env, signal);
            if (!back || signal.aborted || outages >= RUNTIME_OUTAGE_RETRIES) throw error;
            outages++;
            env.logger.warn("the runtime dropped out; running the trial again once it is back", { trialId, outage: outages, error: message(error) });
            env.emit({ type: "trial_retry", trialId, taskId: task.id, data: { retry: retries + 1, delayMs: 0, message: message(error) } });
          }
        }
      },
      {
        retries: env.maxInfraRetries,
        baseDelayMs: env.retryBaseDelayMs,
        clock: env.clock,
        signal,
        shouldRetry: isRetryableInfra,
        onRetry: (error, n, delayMs) => {
          env.logger.warn("infra error; retrying the trial", { trialId, retry: n, delayMs, error: message(error) });
          env.emit({ type: "trial_retry", trialId, taskId: task.id, data: { retry: n, delayMs, message: message(error) } });
        },
      },
    );
  } catch (error) {
    if (error instanceof RunFatalAgentError) throw error;
    if (signal.aborted) return null;
    outcome = { phases: [], errors: [{ kind: "infra", message: message(error) }], reward: null, agent: null, checks: null, integrity: null };
  }
  if (signal.aborted) return null;

  const finishedAt = new Date();
  // A passing reward passes (the work may be done despite an agent timeout or a failed install);
  // tampering sets the reward to 0 along with its error.
  // A competition trial passes when it earns a medal; its reward is the raw score.
  const passed = outcome.competition ? outcome.competition.medal !== null : outcome.reward !== null && isPass(outcome.reward);
  const firstError = outcome.errors[0] ?? null;
  let status: TrialResult["status"];
  let error: TrialError | null = null;
  if (passed) status = "passed";
  else if (firstError) {
    status = "error";
    error = firstError;
  } else if (outcome.reward !== null || outcome.competition) status = "failed";
  else {
    status = "error";
    error = { kind: "verifier", message: "the verifier produced no reward" };
  }
  if (outcome.integrity) outcome.integrity.flagged = status === "passed" && (outcome.integrity.flags?.length ?? 0) > 0;
  return {
    trialId,
    taskId: task.id,
    attempt,
    category: task.category,
    difficulty: task.difficulty,
    status,
    reward: outcome.reward,
    error,
    durationMs: finishedAt.getTime() - startedAt.getTime(),
    startedAt: startedAt.toISOString(),
    finishedAt: finishedAt.toISOString(),
    retries,
    phases: outcome.phases,
    agent: outcome.agent,
    checks: outcome.checks,
    integrity: outcome.integrity,
    ...(outcome.grading ? { grading: outcome.grading } : {}),
    ...(outcome.competition ? { competition: outcome.competition } : {}),
    ...(outcome.environment ? { environment: outcome.environment } : {}),
    ...(outcome.outputs ? { outputs: outcome.outputs } : {}),
    ...computeOf(outcome.cpuSeconds ?? null, env.computeUsdPerCpuHour),
  };
}

/** CPU-seconds one sandbox has used so far, or null when its runtime cannot say. */
async function cpuOf(box: Sandbox): Promise<number | null> {
  return box.cpuSeconds ? box.cpuSeconds().catch(() => null) : null;
}

/**
 * CPU-seconds of a trial's sandboxes: the agent's (now, or as measured when the agent finished if
 * it is halted since) plus a fresh grader's; null when a runtime cannot say.
 */
async function cpuSecondsOf(box: Sandbox, agentCpu: number | null, verifier: Sandbox | null): Promise<number | null> {
  const agent = (await cpuOf(box)) ?? agentCpu;
  const grader = verifier && verifier !== box ? await cpuOf(verifier) : 0;
  return agent === null || grader === null ? null : Math.round((agent + grader) * 1000) / 1000;
}

/** result.json's `compute`: the CPU-seconds measured, and their cost at `--compute-price` (absent when neither is known). */
function computeOf(cpuSeconds: number | null, usdPerCpuHour: number | undefined): Pick<TrialResult, "compute"> {
  if (cpuSeconds === null && usdPerCpuHour === undefined) return {};
  const costUsd = cpuSeconds !== null && usdPerCpuHour !== undefined ? Math.round((cpuSeconds / 3600) * usdPerCpuHour * 1e6) / 1e6 : undefined;
  return { compute: { cpuSeconds, ...(costUsd !== undefined ? { costUsd } : {}) } };
}

/** One try of the pipeline in one sandbox. Throws only errors that `isRetryableInfra` may retry, a fatal agent error, or an abort. */
async function runAttempt(task: TaskSpec, trialId: string, env: TrialEnvironment, runSignal: AbortSignal): Promise<AttemptState> {
  const budgets = budgetsOf(task, env.timeoutMultiplier);
  const budgetMs = trialBudgetMs(task, budgets);
  const trialDir = join(env.runDir, "trials", trialId);
  await rm(trialDir, { recursive: true, force: true });
  await mkdir(join(trialDir, "agent"), { recursive: true });
  await mkdir(join(trialDir, "verifier"), { recursive: true });

  // One signal for everything in this attempt: the run's abort or the whole-trial deadline.
  const controller = new AbortController();
  const onRunAbort = () => controller.abort(runSignal.reason);
  runSignal.addEventListener("abort", onRunAbort, { once: true });
  if (runSignal.aborted) controller.abort(runSignal.reason);
  const deadlineStop = new AbortController();
  env.clock.sleep(budgetMs, deadlineStop.signal).then(
    () => controller.abort(new TrialDeadlineError(`trial ${trialId} passed its whole-trial deadline of ${Math.round(budgetMs / 1000)} s`)),
    () => undefined,
  );
  const signal = controller.signal;

  const state: AttemptState = { phases: [], errors: [], reward: null, agent: null, checks: null, integrity: null };
  const phase = async <T>(name: Phase, fn: () => Promise<T>, detail?: string, bound: AbortSignal = signal): Promise<T> => {
    env.emit({ type: "trial_phase", trialId, taskId: task.id, data: { phase: name, status: "started", ...(detail ? { detail } : {}) } });
    const t0 = Date.now();
    try {
      return await raceSignal(fn(), bound);
    } finally {
      const durationMs = Date.now() - t0;
      state.phases.push({ phase: name, durationMs });
      env.emit({ type: "trial_phase", trialId, taskId: task.id, data: { phase: name, status: "finished", durationMs } });
    }
  };
  const attempt: Attempt = { task, trialId, trialDir, env, signal, budgets, state, phase, image: null };

  let sandbox: Sandbox | null = null;
  let pending: Promise<Sandbox> | null = null;
  let grading: Grading | null = null;
  let collected = false;
  // CPU-seconds of the agent's sandbox when the agent finished (it may be halted before the end).
  let agentCpu: number | null = null;
  // Collect has its own bound: logs are still worth having after the trial deadline passed.
  // `halt`: halt the sandboxes first where the runtime can (see Sandbox.halt): nothing runs while
  // the logs are read, and reading them then needs no process in the sandbox.
  const collect = (box: Sandbox, halt = false): Promise<Collected | null> => {
    collected = true;
    const verifierBox = grading?.verifierSandbox ?? box;
    const run = async () => {
      if (halt) {
        for (const b of verifierBox === box ? [box] : [verifierBox, box]) {
          if (!b.halt) continue;
          await b.halt().catch((error: unknown) => env.logger.warn("halting a sandbox before collecting its logs failed; collecting from it as it is", { trialId, sandbox: b.id, error: message(error) }));
        }
      }
      const report = await collectLogs({ verifier: verifierBox, agent: box }, trialDir, env.limits);
      if (report.truncated.length > 0) env.logger.warn("sandbox logs went past the log cap and were cut", { trialId, cut: report.truncated, logBytes: env.limits.logBytes ?? DEFAULT_LOG_BYTES });
      return report;
    };
    return phase("collect", run, undefined, AbortSignal.timeout(HOUSEKEEPING_MS)).catch((error: unknown) => {
      // Logs are evidence, not the score: the trial keeps its result, the log says what is missing.
      env.logger.warn("collecting sandbox logs failed", { trialId, error: message(error) });
      return null;
    });
  };
  try {
    sandbox = await startSandbox(attempt, budgetMs + HOUSEKEEPING_MS, (create) => (pending = create));
    const inSandbox: SandboxAttempt = { ...attempt, sandbox };
    await setUpWorkspace(inSandbox);
    if (task.competition) {
      await prepareCompetition(inSandbox);
      await runAgent(inSandbox);
      agentCpu = await cpuOf(sandbox);
      await collect(sandbox);
      await phase("verifier", () => gradeCompetition(inSandbox));
      return state;
    }
    if (env.restore) {
      // A regrade: the outputs an earlier trial kept take the agent's place; no agent runs.
      const kept = env.restore(trialId);
      if (!kept) throw new Error(`trial ${trialId} has no kept outputs to grade again`);
      await phase("restore", () => restoreOutputs(inSandbox, kept.archive, kept.outputs));
    } else await runAgent(inSandbox);
    agentCpu = await cpuOf(sandbox);
    // The verifier runs even after an agent timeout or failure: the work may be done.
    // environment -> workspace -> agent -> outputs -> grader -> verifier -> collect.
    const graded = await startGrading(inSandbox, attempt.image ?? "", env.grading ?? null);
    grading = graded;
    await phase("outputs", () => graded.outputs(), graded.plan.mode);
    if (await phase("grader", () => graded.prepare(), graded.plan.mode)) await phase("verifier", () => graded.verify());
    // Only a process that outlived the agent can rewrite the reward: check when one may exist,
    // after collect, so a process rewriting it in a loop has had time to show itself.
    if (graded.rewardRead && graded.survivorsMayRewrite) {
      await collect(sandbox);
      await checkRewardUnchanged(inSandbox, graded.rewardRead);
    }
    // Otherwise the logs are collected below, from the halted sandboxes.
    return state;
  } catch (error) {
    if (runSignal.aborted) throw runSignal.reason ?? error;
    if (isRetryableInfra(error) || error instanceof RunFatalAgentError) throw error;
    state.errors.push({ kind: classify(error), message: message(error) });
    return state;
  } finally {
    deadlineStop.abort();
    runSignal.removeEventListener("abort", onRunAbort);
    if (sandbox) {
      const box = sandbox;
      // Before collect halts them: a halted sandbox's CPU accounting is gone (fresh grading halts the agent's at outputs).
      if (!runSignal.aborted) state.cpuSeconds = await cpuSecondsOf(box, agentCpu, grading?.verifierSandbox ?? null);
      if (!runSignal.aborted && !collected) await collect(box, true);
      await grading?.dispose();
      await box.kill().catch((error: unknown) => env.logger.error("removing the sandbox failed", { trialId, sandbox: box.id, error: message(error) }));
    } else if (pending) {
      // The sandbox may still appear after we stopped waiting for it: remove it when it does.
      await (pending as Promise<Sandbox>)
        .then(
          (late) => late.kill(),
          () => undefined,
        )
        .catch((error: unknown) => env.logger.error("removing a late sandbox failed", { trialId, error: message(error) }));
    }
  }
}

function classify(error: unknown): TrialError["kind"] {
  if (error instanceof WorkspaceError) return "setup";
  if (error instanceof OutputsTooLargeError || error instanceof OutputsUnusableError) return "agent";
  if (error instanceof GraderError) return "verifier";
  if (error instanceof AgentError) return "agent";
  // Only processes inside the sandbox (the agent's, or its memory use) stop a started sandbox.
  if (error instanceof SandboxStoppedError) return "agent";
  return "infra";
}
