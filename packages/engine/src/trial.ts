import { lstat, mkdir, readFile, readdir, rename, rm } from "node:fs/promises";
import { join } from "node:path";
import { AgentError, AgentSetupError, CappedFile, type Agent, type AgentContext } from "@proctor/agents";
import { isPass, parseReward } from "@proctor/reward";
import {
  ImageError, RuntimeUnavailableError, SANDBOX_PATHS, SandboxError, SandboxStartError, SandboxStoppedError, TransferError, retry,
  type Clock, type ExecResult, type Sandbox, type SandboxRuntime,
} from "@proctor/sandbox";
import type { CheckResult, EventBody, Logger, Phase, PhaseTiming, TaskSpec, TrialError, TrialResult } from "@proctor/schema";
import { WorkspaceError } from "./errors";
import { RepoCache, repoUrl } from "./workspace";

/** Everything a trial needs from its run. */
export interface TrialEnvironment {
  runId: string;
  runDir: string;
  runtime: SandboxRuntime;
  agent: Agent;
  timeoutMultiplier: number;
  defaultImage: string | null;
  repoCache: RepoCache;
  emit: (body: EventBody) => void;
  logger: Logger;
  clock: Clock;
  maxInfraRetries: number;
  /** First wait before retrying an infra error; doubles each time. */
  retryBaseDelayMs: number;
}

/** Cap on each check's kept output, and on the verifier's captured stdout/stderr files. */
export const CHECK_OUTPUT_BYTES = 64 * 1024;
const VERIFIER_LOG_BYTES = 10 * 1024 * 1024;
/** Budgets for the steps that have no task-given timeout. */
const SANDBOX_START_MS = 120_000;
const CHECKOUT_MS = 600_000;
const HOUSEKEEPING_MS = 60_000;

export function trialIdOf(taskId: string, attempt: number): string {
  return `${taskId}__${attempt}`;
}

/** Infra errors that justify starting the trial again in a new sandbox. */
export function isRetryableInfra(error: unknown): boolean {
  return error instanceof ImageError || error instanceof SandboxStartError || error instanceof RuntimeUnavailableError;
}

function message(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/** The whole-trial deadline passed; the trial ends as an infra error. */
class TrialDeadlineError extends Error {
  override name = "TrialDeadlineError";
}

/** Stops waiting for `promise` when `signal` aborts (the sandbox kill then ends the work itself). */
function raceSignal<T>(promise: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) {
    promise.catch(() => undefined);
    return Promise.reject(signal.reason);
  }
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(signal.reason);
    signal.addEventListener("abort", onAbort, { once: true });
    promise.then(
      (value) => {
        signal.removeEventListener("abort", onAbort);
        resolve(value);
      },
      (error: unknown) => {
        signal.removeEventListener("abort", onAbort);
        reject(error);
      },
    );
  });
}

function outputOf(result: ExecResult, cap: number): string {
  const text = [result.stdout, result.stderr].filter((s) => s.length > 0).join("\n");
  return Buffer.byteLength(text) <= cap ? text : `${Buffer.from(text).subarray(0, cap).toString("utf8")}\n[proctor: output cut]`;
}

function tail(text: string, lines = 5): string {
  return text.trim().split("\n").slice(-lines).join("\n");
}

interface Attempt {
  phases: PhaseTiming[];
  errors: TrialError[];
  reward: number | null;
  agent: TrialResult["agent"];
  checks: CheckResult[] | null;
}

/**
 * Run one trial (task x attempt) to its result: fresh sandbox, workspace, agent, verifier,
 * log collection, sandbox removal. Infra errors from image resolution and sandbox start are
 * retried up to `maxInfraRetries` times. Returns null when `signal` (the run's) aborted the
 * trial: such a trial is not a result and a resume runs it again.
 */
export async function runTrial(task: TaskSpec, attempt: number, env: TrialEnvironment, signal: AbortSignal): Promise<TrialResult | null> {
  const trialId = trialIdOf(task.id, attempt);
  const startedAt = new Date();
  let retries = 0;
  let outcome: Attempt;
  try {
    outcome = await retry(
      async (n) => {
        retries = n - 1;
        env.emit({ type: "trial_started", trialId, taskId: task.id, data: { attempt, retry: retries } });
        return await runAttempt(task, trialId, env, signal);
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
    if (signal.aborted) return null;
    outcome = { phases: [], errors: [{ kind: "infra", message: message(error) }], reward: null, agent: null, checks: null };
  }
  if (signal.aborted) return null;

  const finishedAt = new Date();
  const passed = outcome.reward !== null && isPass(outcome.reward);
  const firstError = outcome.errors[0] ?? null;
  let status: TrialResult["status"];
  let error: TrialError | null = null;
  if (passed) status = "passed";
  else if (firstError) {
    status = "error";
    error = firstError;
  } else if (outcome.reward !== null) status = "failed";
  else {
    status = "error";
    error = { kind: "verifier", message: "the verifier produced no reward" };
  }
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
  };
}

/** One try of the pipeline in one sandbox. Throws only errors that `isRetryableInfra` may retry, or an abort. */
async function runAttempt(task: TaskSpec, trialId: string, env: TrialEnvironment, runSignal: AbortSignal): Promise<Attempt> {
  const m = env.timeoutMultiplier;
  const buildMs = task.environment.buildTimeoutSec * 1000 * m;
  const installMs = task.workspace ? task.workspace.installTimeoutSec * 1000 * m : 0;
  const agentMs = task.agent.timeoutSec * 1000 * m;
  const verifierMs = task.verifier.timeoutSec * 1000 * m;
  const checksMs = task.verifier.mode === "checks" ? task.verifier.checks.reduce((s, c) => s + c.timeoutSec * 1000 * m, 0) : 0;
  const trialBudgetMs =
    buildMs + SANDBOX_START_MS + (task.workspace ? CHECKOUT_MS + installMs : 0) + agentMs + verifierMs + checksMs + 3 * HOUSEKEEPING_MS;

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
  env.clock.sleep(trialBudgetMs, deadlineStop.signal).then(
    () => controller.abort(new TrialDeadlineError(`trial ${trialId} passed its whole-trial deadline of ${Math.round(trialBudgetMs / 1000)} s`)),
    () => undefined,
  );
  const signal = controller.signal;

  const state: Attempt = { phases: [], errors: [], reward: null, agent: null, checks: null };
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

  let sandbox: Sandbox | null = null;
  let pendingCreate: Promise<Sandbox> | null = null;
  let collected = false;
  // Collect has its own bound: logs are still worth having after the trial deadline passed.
  const collectPhase = (box: Sandbox): Promise<boolean> =>
    phase("collect", () => collect(box, trialDir), undefined, AbortSignal.timeout(HOUSEKEEPING_MS)).then(
      () => true,
      (error: unknown) => {
        // Logs are evidence, not the score: the trial keeps its result, the log says what is missing.
        env.logger.warn("collecting sandbox logs failed", { trialId, error: message(error) });
        return false;
      },
    );
  try {
    const env_ = task.environment;
    const wanted = env_.dockerImage ?? (env_.buildContext ? null : env.defaultImage);
    // The runtime bounds a build by buildTimeoutMs; this bound also covers a hung daemon call.
    const imageBound = AbortSignal.timeout(buildMs + HOUSEKEEPING_MS);
    const image = await phase(
      "environment",
      () => env.runtime.resolveImage({ image: wanted, buildContext: env_.buildContext, buildTimeoutMs: buildMs, signal: AbortSignal.any([signal, imageBound]), onProgress: (line) => env.logger.debug(line, { trialId }) }),
      wanted ?? env_.buildContext ?? undefined,
      AbortSignal.any([signal, imageBound]),
    ).catch((error: unknown) => {
      if (imageBound.aborted && !signal.aborted) {
        throw new ImageError(`resolving the image did not finish within ${Math.round((buildMs + HOUSEKEEPING_MS) / 1000)} s`, wanted, { cause: error });
      }
      throw error;
    });
    const startBound = AbortSignal.timeout(SANDBOX_START_MS);
    pendingCreate = env.runtime.create({
      image,
      ...(env_.cpus !== null ? { cpus: env_.cpus } : {}),
      ...(env_.memoryMb !== null ? { memoryMb: env_.memoryMb } : {}),
      network: env_.allowInternet,
      env: env_.env,
      ...(env_.workdir !== null ? { workdir: env_.workdir } : {}),
      labels: { "proctor.run": env.runId, "proctor.trial": trialId },
      signal: AbortSignal.any([signal, startBound]),
    });
    sandbox = await phase("sandbox", () => pendingCreate as Promise<Sandbox>, image, AbortSignal.any([signal, startBound])).catch((error: unknown) => {
      if (startBound.aborted && !signal.aborted) {
        throw new SandboxStartError(`the sandbox did not start within ${SANDBOX_START_MS / 1000} s`, { cause: error });
      }
      throw error;
    });
    const box = sandbox;
    await runInSandbox(task, trialId, trialDir, box, env, signal, phase, state, { installMs, agentMs, verifierMs }, () => {
      collected = true;
      return collectPhase(box);
    });
    return state;
  } catch (error) {
    if (runSignal.aborted) throw runSignal.reason ?? error;
    if (isRetryableInfra(error)) throw error;
    state.errors.push({ kind: classify(error), message: message(error) });
    return state;
  } finally {
    deadlineStop.abort();
    runSignal.removeEventListener("abort", onRunAbort);
    if (sandbox) {
      const box = sandbox;
      if (!runSignal.aborted && !collected) await collectPhase(box);
      await box.kill().catch((error: unknown) => env.logger.error("removing the sandbox failed", { trialId, sandbox: box.id, error: message(error) }));
    } else if (pendingCreate) {
      // The sandbox may still appear after we stopped waiting for it: remove it when it does.
      await pendingCreate.then(
        (late) => late.kill(),
        () => undefined,
      ).catch((error: unknown) => env.logger.error("removing a late sandbox failed", { trialId, error: message(error) }));
    }
  }
}

function classify(error: unknown): TrialError["kind"] {
  if (error instanceof WorkspaceError) return "setup";
  if (error instanceof AgentError) return "agent";
  // Only processes inside the sandbox (the agent's, or its memory use) stop a started sandbox.
  if (error instanceof SandboxStoppedError) return "agent";
  return "infra";
}

type PhaseRunner = <T>(name: Phase, fn: () => Promise<T>, detail?: string) => Promise<T>;

async function runInSandbox(
  task: TaskSpec,
  trialId: string,
  trialDir: string,
  sandbox: Sandbox,
  env: TrialEnvironment,
  signal: AbortSignal,
  phase: PhaseRunner,
  state: Attempt,
  budgets: { installMs: number; agentMs: number; verifierMs: number },
  /** Runs the collect phase; false when it failed. */
  collectLogs: () => Promise<boolean>,
): Promise<void> {
  const throwIfAborted = () => {
    if (signal.aborted) throw signal.reason;
  };

  // 3. workspace: repository at base_commit, then install commands.
  if (task.workspace) {
    const ws = task.workspace;
    const setupError = await phase("workspace", async () => {
      const url = repoUrl(ws.repo, task.sourcePath);
      await env.repoCache.withCheckout(url, ws.baseCommit, (dir) => sandbox.upload(dir, sandbox.workdir), { timeoutMs: CHECKOUT_MS, signal });
      if (ws.install.length === 0) return null;
      const log = await CappedFile.open(join(trialDir, "setup", "install.log"), VERIFIER_LOG_BYTES);
      try {
        const deadline = Date.now() + budgets.installMs;
        for (const command of ws.install) {
          log.write(Buffer.from(`$ ${command}\n`));
          const result = await sandbox.exec({ shell: command }, {
            timeoutMs: Math.max(1, deadline - Date.now()),
            signal,
            onStdout: (c) => log.write(c),
            onStderr: (c) => log.write(c),
            maxOutputBytes: CHECK_OUTPUT_BYTES,
          });
          throwIfAborted();
          if (result.timedOut) return `install command ${JSON.stringify(command)} timed out (install budget ${Math.round(budgets.installMs / 1000)} s)`;
          if (result.exitCode !== 0) return `install command ${JSON.stringify(command)} exited with ${result.exitCode}: ${tail(result.stderr || result.stdout)}`;
        }
        return null;
      } finally {
        await log.close();
      }
    }, ws.repo);
    // A failed install is recorded; the agent may still work (and the verifier decides).
    if (setupError) state.errors.push({ kind: "setup", message: setupError });
  }

  // 4. agent setup, then agent run, sharing the agent timeout.
  const agentStart = Date.now();
  const ctx: AgentContext = {
    sandbox,
    task,
    timeoutMs: budgets.agentMs,
    deadlineMs: agentStart + budgets.agentMs,
    signal,
    logDir: join(trialDir, "agent"),
    logger: env.logger,
  };
  let timedOut = false;
  let exitCode: number | null = null;
  {
    let setupOk = true;
    if (env.agent.setup) {
      const setup = env.agent.setup.bind(env.agent);
      await phase("agent_setup", () => setup(ctx)).catch((error: unknown) => {
        throwIfAborted();
        setupOk = false;
        if (error instanceof AgentSetupError && error.timedOut) timedOut = true;
        state.errors.push({ kind: error instanceof SandboxError ? "infra" : "agent", message: `agent setup failed: ${message(error)}` });
      });
    }
    if (setupOk) {
      const result = await phase("agent", () => env.agent.run({ ...ctx, timeoutMs: Math.max(1, ctx.deadlineMs - Date.now()) }), env.agent.name).catch(
        (error: unknown) => {
          throwIfAborted();
          state.errors.push({ kind: error instanceof SandboxError ? "infra" : "agent", message: `agent failed: ${message(error)}` });
          return null;
        },
      );
      if (result) {
        timedOut = result.timedOut;
        exitCode = result.exitCode;
      }
    }
  }
  state.agent = { exitCode, timedOut };
  throwIfAborted();

  // 5. verify, even after an agent timeout or failure: the work may be done. The verifier's first
  // exec also kills whatever the agent left running.
  const verified = await phase("verifier", () => verify(task, trialDir, sandbox, env, signal, budgets.verifierMs, state));
  if (verified === null) return;
  // 6. collect the logs now (one download), then read the reward from the copy just collected.
  const collectedOk = await collectLogs();
  await readReward(sandbox, trialDir, verified, collectedOk, state);
}

/**
 * Shell script that kills every process in a container except PID 1, the sandbox's keep-alive
 * (PID 1 itself, or PID 1's first child when Docker runs an init as PID 1), the keep-alive's
 * children and itself. Victims are stopped before they are killed so they cannot fork again.
 * Only shell builtins: it works in busybox images too.
 */
export const KILL_STRAYS_SCRIPT = `
self=$$; keep=""
read -r comm1 < /proc/1/comm
parent_of() { pp=""; while read -r k v rest; do if [ "$k" = "PPid:" ]; then pp=$v; return; fi; done < "$1/status"; }
case "$comm1" in sh|bash|dash|ash|busybox) ;; *)
  for dir in /proc/[0-9]*; do
    pid=\${dir#/proc/}; parent_of "$dir" 2>/dev/null
    if [ "$pp" = 1 ] && { [ -z "$keep" ] || [ "$pid" -lt "$keep" ]; }; then keep=$pid; fi
  done ;;
esac
round=0
while [ "$round" -lt 5 ]; do
  round=$((round + 1)); victims=""
  for dir in /proc/[0-9]*; do
    pid=\${dir#/proc/}
    case "$pid" in 1|"$self"|"$keep") continue ;; esac
    parent_of "$dir" 2>/dev/null || continue
    [ -n "$keep" ] && [ "$pp" = "$keep" ] && continue
    [ "$pp" = "$self" ] && continue
    victims="$victims $pid"
  done
  [ -z "$victims" ] && exit 0
  kill -STOP $victims 2>/dev/null; kill -KILL $victims 2>/dev/null
done
exit 0
`;

const VERIFIER_DIR = `\${PROCTOR_VERIFIER_LOGS_DIR:-${SANDBOX_PATHS.verifierLogs}}`;
const TESTS_DIR = `\${PROCTOR_TESTS_DIR:-${SANDBOX_PATHS.tests}}`;
const REWARD_MAX_BYTES = 1024 * 1024;

/**
 * The one housekeeping exec between the agent and the verifier. On Docker it first kills every
 * process the agent left behind (background jobs, daemons, anything that escaped its process
 * group) so nothing keeps working on the task after the agent's time is up; the local runtime
 * kills the exec's whole process group itself, and a sandbox-wide kill there would reach the
 * host's processes. For a reward-file verifier it then empties /logs/verifier (the agent may have
 * planted a reward) and replaces /tests with an empty directory for the upload.
 */
function cleanupScript(docker: boolean, prepare: { testsDir: boolean } | null): string | null {
  const parts: string[] = [];
  // A subshell: its `exit` ends only the kill part; its pid is a child of the script, so spared.
  // If something kills it (a leftover fighting back), nothing after it runs and the exit is not 0.
  if (docker) parts.push(`(${KILL_STRAYS_SCRIPT}) || { echo "killing the agent's leftover processes failed" >&2; exit 1; }`);
  if (prepare) {
    const dirs = prepare.testsDir ? '"$v" "$t"' : '"$v"';
    parts.push(
      `v="${VERIFIER_DIR}"; t="${TESTS_DIR}"; rm -rf "$v" "$t" && mkdir -p ${dirs} && chmod 777 "$v" && [ -d "$v" ] && [ ! -L "$v" ] && [ -z "$(ls -A "$v")" ]`,
    );
  }
  return parts.length === 0 ? null : parts.join("\n");
}

/** Reward files present in /logs/verifier, read through the runtime; anything there counts, readable or not. */
async function survivingRewardFiles(sandbox: Sandbox): Promise<string[]> {
  const names = ["reward.json", "reward.txt"];
  const found = await Promise.all(
    names.map((name) =>
      sandbox.readFile(`${SANDBOX_PATHS.verifierLogs}/${name}`, { maxBytes: REWARD_MAX_BYTES }).then(
        (data) => data !== null,
        () => true, // present but not a readable file (a directory, a huge file): still planted
      ),
    ),
  );
  return names.filter((_, i) => found[i]).map((name) => `${SANDBOX_PATHS.verifierLogs}/${name}`);
}

/** What the reward-file verifier left for readReward. */
interface Verified {
  result: ExecResult;
}

/** Runs the verifier; returns null when there is no reward file to read (checks mode, or an error was recorded). */
async function verify(
  task: TaskSpec,
  trialDir: string,
  sandbox: Sandbox,
  env: TrialEnvironment,
  signal: AbortSignal,
  verifierMs: number,
  state: Attempt,
): Promise<Verified | null> {
  const verifier = task.verifier;
  const docker = sandbox.runtime === "docker";
  const asRoot = docker ? { user: "root" } : {};
  const multiplier = env.timeoutMultiplier;

  if (verifier.mode === "checks" && verifier.checks.length === 0) {
    state.errors.push({ kind: "verifier", message: `task ${task.id} has no checks: nothing would be verified, so it cannot pass` });
    if (docker) await cleanup(sandbox, env, signal, cleanupScript(true, null), task.id);
    return null;
  }
  const rewardFile = verifier.mode !== "checks";
  const prepared = await cleanup(sandbox, env, signal, cleanupScript(docker, rewardFile ? { testsDir: verifier.testsDir !== null } : null), task.id);
  if (prepared !== null && prepared.exitCode !== 0) {
    const what = [docker ? "kill the agent's leftover processes" : null, rewardFile ? "empty /logs/verifier and /tests" : null].filter(Boolean).join(" and ");
    state.errors.push({ kind: "verifier", message: `could not ${what} before verifying (exit ${prepared.exitCode}): ${tail(prepared.stderr)}` });
    return null;
  }

  if (verifier.mode === "checks") {
    if (verifier.testsDir) await sandbox.upload(verifier.testsDir, `${sandbox.workdir.replace(/\/+$/, "")}/tests`);
    const checks: CheckResult[] = [];
    for (const check of verifier.checks) {
      const result = await sandbox.exec(["bash", "-lc", check.command], {
        ...asRoot,
        env: verifier.env,
        timeoutMs: check.timeoutSec * 1000 * multiplier,
        signal,
        maxOutputBytes: CHECK_OUTPUT_BYTES,
      });
      if (signal.aborted) throw signal.reason;
      checks.push({
        name: check.name,
        passed: !result.timedOut && result.exitCode === 0,
        exitCode: result.timedOut ? null : result.exitCode,
        timedOut: result.timedOut,
        output: outputOf(result, CHECK_OUTPUT_BYTES),
      });
    }
    state.checks = checks;
    state.reward = checks.every((c) => c.passed) ? 1 : 0;
    return null;
  }

  // reward-file: /logs/verifier is now empty and /tests fresh (see cleanupScript). The emptying
  // ran with the container's own rm and ls, which an agent running as root can replace; check
  // through the runtime itself (the daemon's archive API, not a process in the sandbox).
  const planted = await survivingRewardFiles(sandbox);
  if (planted.length > 0) {
    state.errors.push({
      kind: "verifier",
      message: `${planted.join(" and ")} still existed after /logs/verifier was emptied before verification: the agent tampered with the sandbox's tools, so this trial cannot be scored`,
    });
    return null;
  }
  if (verifier.testsDir) await sandbox.upload(verifier.testsDir, SANDBOX_PATHS.tests);

  const out = await CappedFile.open(join(trialDir, "verifier", "test-stdout.txt"), VERIFIER_LOG_BYTES);
  const err = await CappedFile.open(join(trialDir, "verifier", "test-stderr.txt"), VERIFIER_LOG_BYTES);
  let result: ExecResult;
  try {
    result = await sandbox.exec({ shell: verifier.command }, {
      ...asRoot,
      env: verifier.env,
      timeoutMs: verifierMs,
      signal,
      onStdout: (c) => out.write(c),
      onStderr: (c) => err.write(c),
      maxOutputBytes: CHECK_OUTPUT_BYTES,
    });
  } finally {
    await Promise.all([out.close(), err.close()]);
  }
  if (signal.aborted) throw signal.reason;
  if (result.timedOut) {
    state.errors.push({ kind: "verifier", message: `the verifier timed out after ${Math.round(verifierMs / 1000)} s` });
    return null;
  }
  return { result };
}

/** Runs the cleanup script (null: nothing to do); a failed kill of leftovers is logged, the caller judges the exit code. */
async function cleanup(sandbox: Sandbox, env: TrialEnvironment, signal: AbortSignal, script: string | null, taskId: string): Promise<ExecResult | null> {
  if (script === null) return null;
  // The first exec after the agent: if the agent stopped its own sandbox, say so (an agent error,
  // not retried) whichever way the daemon reports the dead container.
  const stopped = async (): Promise<boolean> => (sandbox.isRunning ? !(await sandbox.isRunning()) : false);
  const stoppedError = () =>
    new SandboxStoppedError("the sandbox stopped during the agent's run (every process in it was killed, or it ran out of memory), so nothing could be verified");
  let result: ExecResult;
  try {
    result = await sandbox.exec(["/bin/sh", "-c", script], { ...(sandbox.runtime === "docker" ? { user: "root" } : {}), timeoutMs: HOUSEKEEPING_MS, signal });
  } catch (error) {
    if (!signal.aborted && (await stopped())) throw stoppedError();
    throw error;
  }
  if (signal.aborted) throw signal.reason;
  if (result.exitCode !== 0 && (await stopped())) throw stoppedError();
  if (result.timedOut) env.logger.warn("killing the agent's leftover processes / emptying the verifier dir timed out", { taskId });
  return result;
}

/**
 * reward.json, else reward.txt, as the verifier wrote them into /logs/verifier. They are read from
 * the copy `collect` just downloaded when it succeeded and holds them as regular files; otherwise
 * (collect failed, no such file, a link) from the sandbox itself, which is still running.
 */
async function readReward(sandbox: Sandbox, trialDir: string, verified: Verified, collectedOk: boolean, state: Attempt): Promise<void> {
  const names = ["reward.json", "reward.txt"] as const;
  const fromSandbox = (name: string) => sandbox.readFile(`${SANDBOX_PATHS.verifierLogs}/${name}`, { maxBytes: REWARD_MAX_BYTES });
  // undefined: the copy cannot tell (not a regular file there); null: absent from a complete copy.
  const fromCopy = async (name: string): Promise<Buffer | null | undefined> => {
    const hostPath = join(trialDir, "verifier", name);
    const info = await lstat(hostPath).catch((error: unknown) => {
      if ((error as NodeJS.ErrnoException).code === "ENOENT") return null;
      throw error;
    });
    if (info === null) return null;
    if (!info.isFile()) return undefined;
    if (info.size > REWARD_MAX_BYTES) {
      throw new TransferError(`readFile: ${SANDBOX_PATHS.verifierLogs}/${name} is ${info.size} bytes, above the ${REWARD_MAX_BYTES} byte limit (maxBytes)`, name);
    }
    return readFile(hostPath);
  };
  let [json, txt]: (Buffer | null | undefined)[] = collectedOk ? await Promise.all(names.map(fromCopy)) : [undefined, undefined];
  // Ask the sandbox (still running) when the copy cannot tell, and before declaring both missing.
  if (json === undefined || (json === null && !txt)) json = await fromSandbox(names[0]);
  if (txt === undefined || (txt === null && !json)) txt = await fromSandbox(names[1]);
  const { result } = verified;
  try {
    state.reward = parseReward({
      json: json?.toString("utf8") ?? null,
      txt: txt?.toString("utf8") ?? null,
      jsonName: `${SANDBOX_PATHS.verifierLogs}/reward.json`,
      txtName: `${SANDBOX_PATHS.verifierLogs}/reward.txt`,
    }).reward;
  } catch (error) {
    const exit = result.exitCode !== 0 ? ` (the verifier exited with ${result.exitCode}${result.stderr.trim() ? `: ${tail(result.stderr, 3)}` : ""})` : "";
    state.errors.push({ kind: "verifier", message: `${message(error)}${exit}` });
  }
}

/** The log directories collected from /logs (one download); anything else there is left out. */
const LOG_DIRS = ["agent", "verifier"] as const;

/** Copy the sandbox's log directories into the trial directory with one download of /logs. */
async function collect(sandbox: Sandbox, trialDir: string): Promise<void> {
  const staging = join(trialDir, ".logs-download");
  await rm(staging, { recursive: true, force: true });
  try {
    await sandbox.download(SANDBOX_PATHS.logs, staging);
    for (const dir of LOG_DIRS) {
      const from = join(staging, dir);
      const kind = await lstat(from).then((s) => (s.isDirectory() ? "dir" : "other"), () => null);
      if (kind === "dir") await mergeInto(from, join(trialDir, dir));
    }
  } finally {
    await rm(staging, { recursive: true, force: true });
  }
}

/** Moves `src`'s entries into `dest`, replacing what is there (directories are merged). */
async function mergeInto(src: string, dest: string): Promise<void> {
  await mkdir(dest, { recursive: true });
  for (const entry of await readdir(src, { withFileTypes: true })) {
    const from = join(src, entry.name);
    const to = join(dest, entry.name);
    const existing = await lstat(to).catch(() => null);
    if (existing?.isDirectory() && entry.isDirectory()) {
      await mergeInto(from, to);
      continue;
    }
    if (existing) await rm(to, { recursive: true, force: true });
    await rename(from, to);
  }
}
