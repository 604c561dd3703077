import { closeSync, existsSync, openSync, readSync, statSync } from "node:fs";
import { mkdir, readFile, writeFile } from "node:fs/promises";
import { dirname, join, resolve } from "node:path";
import { createAgent, PRICE_LIBRARY, RunFatalAgentError, type Agent } from "@proctor/agents";
import { EventBus, JsonlSink, readJsonl } from "@proctor/events";
import { spending, summarize } from "@proctor/reward";
import type { ContainerSettings, SandboxRuntime } from "@proctor/sandbox";
import { checkCompetitionRun, writeCompetitionOutputs } from "./competition-run";
import { systemClock, type Clock } from "./clock";
import { RunSummary, TrialResult, silentLogger, type AgentSpec, type EventBody, type KeptOutputs, type Pins, type RunConfig, type Logger, type TaskSpec } from "@proctor/schema";
import { ENGINE_VERSION, startPins, withTrialPins } from "./pins";
import { buildRunConfig, describeConfigChanges } from "./config";
import { ConfigMismatchError, EngineError, RunDirectoryError, RunStorageError } from "./errors";
import { lockRunDir, readRunConfig, SerialQueue, writeJsonAtomic, type RunDirLock } from "./store";
import { trialIdOf } from "./ids";
import { effectiveLimits, isolates, type RunLimits, type TrialEnvironment } from "./trial/context";
import { runTrial } from "./trial/trial";
import { startRunModelProxy } from "./trial/model-proxy";
import { RepoCache } from "./workspace";

/** Least time between two rewrites of summary.json while a run goes on. */
const SUMMARY_EVERY_MS = 1000;

export interface RunOptions {
  runId: string;
  /** The run directory (`<runs-root>/<run-id>`); created if absent. */
  runDir: string;
  tasks: TaskSpec[];
  /** A built-in agent by spec, or any object implementing Agent. */
  agent: AgentSpec | Agent;
  /** Any SandboxRuntime: DockerRuntime, LocalRuntime, or a library user's own. */
  runtime: SandboxRuntime;
  /** Trials running at once (>= 1). */
  concurrency: number;
  /** Attempts per task (>= 1): trial ids `<taskId>__1` .. `<taskId>__<attempts>`. */
  attempts: number;
  /** Scales every task timeout (build, install, agent, verifier, checks). Default 1. */
  timeoutMultiplier?: number;
  /** Image for tasks that name none and have no Dockerfile. Default null. */
  defaultImage?: string | null;
  /** Continue the run in runDir: skip trials already in results.jsonl; refuse a changed config. */
  resume?: boolean;
  /**
   * With `resume`: finished trials to run again (`--retry errors`, a task's trials). A trial run
   * again appends its new line to results.jsonl, which replaces the old one (last line wins).
   */
  retry?: (result: TrialResult) => boolean;
  /** The Proctor version recorded in the run's pins. Default: this engine's version. */
  proctorVersion?: string;
  /** Most bytes of compressed agent outputs kept per trial (0: none). Default 64 MiB. */
  keepOutputsBytes?: number;
  /**
   * Grade the outputs an earlier run kept again instead of running an agent (`proctor regrade`):
   * only the trials in `trials` run, each starting a fresh sandbox of its task, putting the kept
   * outputs back and grading them. run.json and summary.json name the run (`regradeOf`) and record
   * its agent; `agent` is ignored.
   */
  regrade?: RegradeSource;
  /**
   * The run directory's lock, taken already by the caller (lockRunDir) and let go by it; e.g.
   * `proctor run` takes it before extracting archives into the directory. Default: the run takes
   * it itself and lets it go when it ends. Either way a second run or resume of a directory
   * being written is refused (RunLockedError) before it writes anything.
   */
  lock?: RunDirLock;
  /** Where the tasks came from, recorded in run.json. */
  sources?: string[];
  /** The task selection the tasks were picked from the sources with, recorded in run.json for a resume (not part of the config hash: the tasks are). */
  selection?: RunConfig["selection"];
  /** SWE-bench loader flags (--repos-dir, --image, --env-setup), recorded in run.json for a resume. */
  dataset?: RunConfig["dataset"];
  /** Where tasks fetched from git came from (repository, commit, path, dataset), recorded in run.json (not part of the config hash). */
  origins?: RunConfig["origins"];
  /** Abort: no new trials start, running ones are killed, done resolves with status "interrupted". */
  signal?: AbortSignal;
  logger?: Logger;
  /** Times an infra error (image, daemon, sandbox start) may restart a trial. Default 2. */
  maxInfraRetries?: number;
  /** First wait before such a retry, doubling each time. Default 1000 ms. */
  retryBaseDelayMs?: number;
  /** Clock for retry waits and trial deadlines; inject a ManualClock in tests. */
  clock?: Clock;
  /** Bare-repo cache for workspace tasks. Default `<runs-root>/../.cache/repos`. */
  cacheDir?: string;
  /**
   * true: every task's verifier starts with no agent process alive (strict isolation); false:
   * agent processes stay alive through verification for every task. Default: each task decides
   * (`[verifier] isolate_processes`; term-executor check tasks isolate).
   */
  isolateVerifier?: boolean;
  /**
   * Where every trial's verifier runs: "fresh" (a new sandbox from the task's image with only the
   * agent's outputs) or "shared" (the agent's own sandbox). Default: each task's mode
   * (`[verifier] grading`, else what its kind implies; see the grading docs).
   */
  grading?: "fresh" | "shared";
  /** Resource limits: defaults for tasks that set none, maxima no task may exceed, log bytes per trial. */
  limits?: RunLimits;
  /** Container settings for every sandbox (`--container-config`); checked against the runtime before any trial starts. */
  container?: ContainerSettings;
  /**
   * Runs each trial elsewhere (e.g. @proctor/queue's workers) instead of in this process. Every
   * planned trial is handed over at once (the workers bound concurrency); run dir, events and
   * summary stay the same. The dispatcher must have written `trials/<trial-id>/` before resolving.
   */
  dispatch?: TrialDispatch;
  /**
   * Run budgets, checked before each trial starts: once the finished trials (earlier sessions'
   * included) have spent `maxCostUsd` or `maxTokens`, no trial starts; running ones finish
   * (`onBudget` "finish", the default) or are stopped ("stop", they count as not run), and the run
   * ends with status "budget_exhausted". `trialMaxCostUsd` stops a model-driven agent whose trial's
   * model cost passes it. Recorded in run.json, outside its hash: a resume may raise them.
   */
  budget?: RunBudget;
  /** Where prices come from, recorded in run.json and summary.json. Default: the price library and its version. */
  priceSource?: { name: string; version: string };
  /** USD per CPU-hour of the trials' sandboxes (`--compute-price`): a trial's cost is then its tokens + its compute. */
  computeUsdPerCpuHour?: number;
}

export interface RunBudget {
  maxCostUsd?: number;
  maxTokens?: number;
  trialMaxCostUsd?: number;
  onBudget?: "finish" | "stop";
}

/** The run a regrade grades again, and the outputs its trials kept. */
export interface RegradeSource {
  /** The earlier run's id. */
  runId: string;
  /** Its agent, as its run.json recorded it (recorded again in the regrade's). */
  agent: AgentSpec;
  agentHash: string | null;
  /** Its pins' agent and model, when it recorded pins. */
  pins?: Pick<Pins, "agent" | "model">;
  /** Trial id -> the kept archive and how it is laid out. */
  trials: ReadonlyMap<string, { archive: string; outputs: KeptOutputs }>;
}

/** What a dispatcher needs to run a trial like this process would. */
export interface DispatchContext {
  runId: string;
  runDir: string;
  agent: AgentSpec;
  runtime: string;
  timeoutMultiplier: number;
  defaultImage: string | null;
  isolateVerifier: boolean | null;
  grading: "fresh" | "shared" | null;
  limits: RunLimits;
  /** `--trial-max-cost`: a model-driven agent stops once its trial's model cost passes this (USD). */
  maxCostUsd?: number;
  /** `--compute-price`: USD per CPU-hour of the trial's sandboxes. */
  computeUsdPerCpuHour?: number;
  emit: (body: EventBody) => void;
  signal: AbortSignal;
  logger: Logger;
}

/** Runs one trial somewhere else; null when the run was aborted before it finished. */
export type TrialDispatch = (trial: { task: TaskSpec; attempt: number; trialId: string }, context: DispatchContext) => Promise<TrialResult | null>;

export interface RunHandle {
  runId: string;
  runDir: string;
  /** Every event of the run, with replay (`subscribe(fn, { since })`, `history()`). */
  bus: EventBus;
  /**
   * The final summary, also when the run was aborted (status "interrupted"). Rejects before
   * any trial starts with ConfigMismatchError / RunDirectoryError / AgentConfigError, and
   * with the underlying error if the run directory cannot be written.
   */
  done: Promise<RunSummary>;
}

/** Start a run in the background; progress is on `bus`, the outcome in `done`. */
export function startRun(options: RunOptions): RunHandle {
  for (const [name, value] of [["concurrency", options.concurrency], ["attempts", options.attempts]] as const) {
    if (!Number.isInteger(value) || value < 1) throw new EngineError(`startRun: ${name} must be a whole number >= 1, got ${value}`);
  }
  const multiplier = options.timeoutMultiplier ?? 1;
  if (!(multiplier > 0)) throw new EngineError(`startRun: timeoutMultiplier must be a positive number, got ${multiplier}`);
  const runDir = resolve(options.runDir);
  const startSeq = options.resume ? lastEventSeq(join(runDir, "events.jsonl")) : 0;
  const bus = new EventBus({ runId: options.runId, startSeq, ...(options.logger ? { logger: options.logger } : {}) });
  const done = execute({ ...options, runDir, timeoutMultiplier: multiplier }, bus);
  return { runId: options.runId, runDir, bus, done };
}

/** Finished trials of an earlier session; a truncated last line (crash mid-append) is skipped, so that trial runs again. */
async function readFinished(path: string, logger: Logger): Promise<TrialResult[]> {
  return (await readJsonl(path, { schema: TrialResult, missingOk: true, logger })).records;
}

/** The seq of the last complete event in events.jsonl, so a resumed run's events continue it (0 when none). */
function lastEventSeq(path: string): number {
  if (!existsSync(path)) return 0;
  const size = statSync(path).size;
  const length = Math.min(size, 256 * 1024);
  const buffer = Buffer.alloc(length);
  const fd = openSync(path, "r");
  try {
    readSync(fd, buffer, 0, length, size - length);
  } finally {
    closeSync(fd);
  }
  const lines = buffer.toString("utf8").split("\n");
  lines.pop(); // "" after the final newline, or an unterminated line the sink will cut off
  for (const line of lines.reverse()) {
    try {
      const seq = (JSON.parse(line) as { seq?: unknown }).seq;
      if (typeof seq === "number" && Number.isInteger(seq) && seq >= 0) return seq;
    } catch {
      // the first line of the window may be cut in the middle; keep looking further back
    }
  }
  return 0;
}

async function previousStart(runDir: string): Promise<string | null> {
  try {
    const parsed = RunSummary.safeParse(JSON.parse(await readFile(join(runDir, "summary.json"), "utf8")));
    return parsed.success ? parsed.data.startedAt : null;
  } catch {
    return null; // no summary yet: this session's start is the run's start
  }
}

/** The run, with its directory locked for the whole of it (refused while another process writes it). */
async function execute(options: RunOptions & { runDir: string; timeoutMultiplier: number }, bus: EventBus): Promise<RunSummary> {
  if (options.lock && resolve(options.lock.runDir) !== options.runDir) {
    throw new EngineError(`startRun: the lock given is for ${options.lock.runDir}, not the run directory ${options.runDir}`);
  }
  const own = options.lock ?? (await lockRunDir(options.runDir));
  try {
    return await executeLocked(options, bus);
  } finally {
    // A run refused before it wrote run.json leaves no directory it made behind.
    if (!options.lock) await own.release({ discardUnstarted: true });
  }
}

async function executeLocked(options: RunOptions & { runDir: string; timeoutMultiplier: number }, bus: EventBus): Promise<RunSummary> {
  const { runDir, runId } = options;
  const logger = options.logger ?? silentLogger;
  const runJsonPath = join(runDir, "run.json");
  const resultsPath = join(runDir, "results.jsonl");
  const summaryPath = join(runDir, "summary.json");

  const regrade = options.regrade;
  // A regrade runs no agent: the kept outputs take its place (see TrialEnvironment.restore).
  const agent: Agent = regrade ? { name: "regrade", run: () => Promise.reject(new EngineError("a regrade runs no agent")) } : isAgentObject(options.agent) ? options.agent : createAgent(options.agent);
  const agentSpec: AgentSpec = regrade ? regrade.agent : isAgentObject(options.agent) ? { kind: "custom", name: options.agent.name } : options.agent;
  const limits = options.limits ?? {};
  checkRunnable(options.tasks, options.runtime, options.isolateVerifier ?? null, limits);
  // An image agent's agent.toml `privileged = true` asks for what --container-config's "privileged" does, under the same consent.
  const container = agent.image?.privileged ? { ...options.container, privileged: true } : options.container;
  await checkCompetitionRun(options.tasks, options.runtime, agent, container);
  await mkdir(join(runDir, "trials"), { recursive: true });
  const config = await buildRunConfig({
    runId,
    tasks: options.tasks,
    sources: options.sources ?? [],
    agent: agentSpec,
    runtime: options.runtime.name,
    attempts: options.attempts,
    concurrency: options.concurrency,
    timeoutMultiplier: options.timeoutMultiplier,
    defaultImage: options.defaultImage ?? null,
    isolateVerifier: options.isolateVerifier ?? null,
    grading: options.grading ?? null,
    limits: options.limits ? { ...options.limits } : null,
    dataset: options.dataset ?? null,
    container: options.container ?? null,
    selection: options.selection ?? null,
    origins: options.origins ?? null,
    ...(regrade ? { agentHash: regrade.agentHash } : {}),
  });
  // Pins and regradeOf are recorded, not hashed: a resume by a newer Proctor is still the same run.
  let pins = startPins(config, options.proctorVersion ?? ENGINE_VERSION);
  if (regrade?.pins) pins = { ...pins, agent: regrade.pins.agent, model: regrade.pins.model };
  const priceSource = options.priceSource ?? { ...PRICE_LIBRARY };
  const budget = options.budget ?? {};
  const budgeted = budget.maxCostUsd !== undefined || budget.maxTokens !== undefined || budget.trialMaxCostUsd !== undefined;
  // Outside the hash (configHash leaves them out): what prices the run, and its budgets as last started.
  const pricing = { source: priceSource, ...(options.computeUsdPerCpuHour !== undefined ? { computeUsdPerCpuHour: options.computeUsdPerCpuHour } : {}) };
  const stored = { ...config, pins, ...(regrade ? { regradeOf: regrade.runId } : {}), pricing, ...(budgeted ? { budget: { ...budget } } : {}) };

  let finished: TrialResult[] = [];
  let startedAt = new Date().toISOString();
  if (options.resume) {
    const storedConfig = await readRunConfig(runDir);
    if (storedConfig.configHash !== config.configHash) {
      const changes = describeConfigChanges(storedConfig, config);
      throw new ConfigMismatchError(runDir, changes.length > 0 ? changes : ["run.json's configHash differs (edited by hand?)"]);
    }
    finished = await readFinished(resultsPath, logger);
    startedAt = (await previousStart(runDir)) ?? startedAt;
    // Pins recorded when the run started stay (a run made before pins gets them now).
    if (storedConfig.pins) pins = storedConfig.pins;
    // A resume may change the budgets (e.g. raise --max-cost to finish the run): record the new ones.
    await writeJsonAtomic(runJsonPath, { ...storedConfig, pins, pricing: { ...(storedConfig.pricing ?? pricing), ...(options.computeUsdPerCpuHour !== undefined ? { computeUsdPerCpuHour: options.computeUsdPerCpuHour } : {}) }, ...(budgeted ? { budget: { ...budget } } : {}) });
  } else {
    if (existsSync(runJsonPath)) {
      throw new RunDirectoryError(`${runDir} already holds a run (run.json exists); resume it or use another run directory`, runDir);
    }
    await writeJsonAtomic(runJsonPath, stored);
  }

  const sink = await JsonlSink.open(join(runDir, "events.jsonl"), { logger });
  const unsubscribeSink = bus.subscribe((event) => sink.write(event));
  const resultsSink = await JsonlSink.open<TrialResult>(resultsPath, { logger });

  // results.jsonl is last-line-wins per trial (a trial run again appends its new line); trials
  // chosen to run again leave the count until their new result comes.
  const latest = new Map<string, TrialResult>();
  for (const r of finished) {
    latest.delete(r.trialId);
    latest.set(r.trialId, r);
  }
  const retried = options.retry ? [...latest.values()].filter(options.retry) : [];
  for (const r of retried) latest.delete(r.trialId);
  const done = new Set(latest.keys());
  const plan: { task: TaskSpec; attempt: number }[] = [];
  for (let attempt = 1; attempt <= options.attempts; attempt++) {
    for (const task of options.tasks) {
      const id = trialIdOf(task.id, attempt);
      if (!done.has(id) && (!regrade || regrade.trials.has(id))) plan.push({ task, attempt });
    }
  }
  // A regrade plans the trials that kept outputs (also those a resume of it finished already).
  const regraded = regrade ? options.tasks.flatMap((t) => Array.from({ length: options.attempts }, (_, i) => trialIdOf(t.id, i + 1))).filter((id) => regrade.trials.has(id)).length : 0;
  const plannedTrials = regrade ? regraded : options.tasks.length * options.attempts;
  const results = [...latest.values()];
  const writes = new SerialQueue();
  // Which run budget stopped new trials from starting (null while none has).
  let exhausted: string | null = null;
  const onBudget = budget.onBudget ?? "finish";
  const runBudgeted = budget.maxCostUsd !== undefined || budget.maxTokens !== undefined;
  // Summed again only when a trial has finished since (a trial start between finishes costs nothing).
  let spentAt = -1;
  const budgetNow = () => {
    if (exhausted || !runBudgeted || spentAt === results.length) return exhausted;
    spentAt = results.length;
    const spent = spending(results);
    if (budget.maxCostUsd !== undefined && spent.usd >= budget.maxCostUsd) exhausted = `--max-cost $${budget.maxCostUsd}: the finished trials cost $${spent.usd.toFixed(4)}`;
    else if (budget.maxTokens !== undefined && spent.tokens >= budget.maxTokens) exhausted = `--max-tokens ${budget.maxTokens}: the finished trials used ${spent.tokens} tokens`;
    return exhausted;
  };
  const summaryNow = (status: RunSummary["status"]): RunSummary => ({
    ...summarize({
      runId,
      results,
      plannedTrials,
      attempts: options.attempts,
      startedAt,
      now: new Date(),
      status,
      priceSource,
      ...(budgeted ? { budget: { ...budget, onBudget, exhausted: status === "budget_exhausted" ? exhausted : null } } : {}),
    }),
    pins: withTrialPins(pins, results),
    ...(regrade ? { regradeOf: regrade.runId } : {}),
  });

  // Our own controller: the caller's abort, or a fatal error here, stops every trial.
  const controller = new AbortController();
  const onAbort = () => controller.abort(options.signal?.reason);
  options.signal?.addEventListener("abort", onAbort, { once: true });
  if (options.signal?.aborted) controller.abort(options.signal.reason);
  const signal = controller.signal;
  // --on-budget stop aborts the running trials through this, and only them: the run itself ends budget_exhausted.
  const budgetStop = new AbortController();
  const trialSignal = AbortSignal.any([signal, budgetStop.signal]);
  let running = 0;

  const trialEnv: TrialEnvironment = {
    runId,
    runDir,
    runtime: options.runtime,
    agent,
    timeoutMultiplier: options.timeoutMultiplier,
    defaultImage: options.defaultImage ?? null,
    repoCache: new RepoCache(options.cacheDir ?? join(dirname(runDir), "..", ".cache", "repos"), { logger }),
    emit: (body) => bus.emit(body),
    logger,
    clock: options.clock ?? systemClock,
    maxInfraRetries: options.maxInfraRetries ?? 2,
    retryBaseDelayMs: options.retryBaseDelayMs ?? 1000,
    limits,
    isolateVerifier: options.isolateVerifier ?? null,
    grading: options.grading ?? null,
    ...(container ? { container } : {}),
    upcomingTrials: () => plan.length,
    ...(options.keepOutputsBytes !== undefined ? { keepOutputsBytes: options.keepOutputsBytes } : {}),
    ...(regrade ? { restore: (trialId: string) => regrade.trials.get(trialId) ?? null } : {}),
    ...(budget.trialMaxCostUsd !== undefined ? { maxCostUsd: budget.trialMaxCostUsd } : {}),
    ...(options.computeUsdPerCpuHour !== undefined ? { computeUsdPerCpuHour: options.computeUsdPerCpuHour } : {}),
  };

  // summary.json is rewritten as trials finish, at most once per SUMMARY_EVERY_MS: summarizing reads
  // every result, so a rewrite per trial made a 10,000-trial run quadratic (~18 ms per trial at the
  // end). The final one is written when the run ends; a rewrite still due then is dropped.
  let summaryWrittenAt = 0;
  let summaryTimer: NodeJS.Timeout | null = null;
  let summaryFinal = false;
  let summaryError: unknown = null;
  const writeRunningSummary = async () => {
    if (summaryFinal) return;
    summaryWrittenAt = Date.now();
    await writeJsonAtomic(summaryPath, summaryNow("running"));
  };
  const finalizeSummary = () => {
    summaryFinal = true;
    if (summaryTimer) clearTimeout(summaryTimer);
    summaryTimer = null;
  };
  const rewriteSummary = async () => {
    const wait = SUMMARY_EVERY_MS - (Date.now() - summaryWrittenAt);
    if (wait <= 0) return writeRunningSummary();
    summaryTimer ??= setTimeout(() => {
      summaryTimer = null;
      // A failed write fails the next trial's record (a RunStorageError), as a direct one would.
      writes.run(writeRunningSummary).catch((error: unknown) => (summaryError ??= error));
    }, wait);
  };

  const record = (result: TrialResult) =>
    writes.run(async () => {
      if (summaryError) throw summaryError;
      await writeFile(join(runDir, "trials", result.trialId, "result.json"), `${JSON.stringify(result, null, 2)}\n`);
      resultsSink.write(result);
      await resultsSink.flush({ fsync: true });
      results.push(result);
      await writeCompetitionOutputs(runDir, { runId, agent: agent.name, createdAt: startedAt }, results);
      await rewriteSummary();
      bus.emit({ type: "trial_finished", trialId: result.trialId, taskId: result.taskId, data: result });
      // --on-budget stop: the trials still running when a run budget is spent are stopped (not run).
      if (onBudget === "stop" && running > 0 && budgetNow() && !signal.aborted) {
        logger.info("run budget spent: stopping the running trials", { runId, budget: exhausted });
        budgetStop.abort(new Error(`run budget spent: ${exhausted}`));
      }
    });

  let modelProxy: Awaited<ReturnType<typeof startRunModelProxy>> = null;
  try {
    modelProxy = regrade ? null : await startRunModelProxy(options.agent, agent, logger);
    if (modelProxy) trialEnv.agent = modelProxy.agent;
    await writeJsonAtomic(summaryPath, summaryNow("running"));
    bus.emit({
      type: "run_started",
      data: {
        runId,
        totalTrials: plannedTrials,
        tasks: options.tasks.length,
        attempts: options.attempts,
        concurrency: options.concurrency,
        runtime: options.runtime.name,
        skipped: plannedTrials - plan.length,
      },
    });
    logger.info("run started", { runId, trials: plan.length, skipped: plannedTrials - plan.length, concurrency: options.concurrency, ...(retried.length > 0 ? { retried: retried.length } : {}), ...(regrade ? { regradeOf: regrade.runId } : {}) });

    const dispatchContext: DispatchContext = {
      runId,
      runDir,
      agent: agentSpec,
      runtime: options.runtime.name,
      timeoutMultiplier: options.timeoutMultiplier,
      defaultImage: options.defaultImage ?? null,
      isolateVerifier: options.isolateVerifier ?? null,
      grading: options.grading ?? null,
      limits,
      ...(budget.trialMaxCostUsd !== undefined ? { maxCostUsd: budget.trialMaxCostUsd } : {}),
      ...(options.computeUsdPerCpuHour !== undefined ? { computeUsdPerCpuHour: options.computeUsdPerCpuHour } : {}),
      emit: trialEnv.emit,
      signal,
      logger,
    };
    const dispatch = options.dispatch;
    let fatal: unknown = null;
    const worker = async () => {
      for (;;) {
        if (signal.aborted || budgetStop.signal.aborted) return;
        if (plan.length === 0) return;
        // Run budgets are checked before each trial starts: at the limit, no new trial starts.
        if (budgetNow()) return;
        const next = plan.shift();
        if (!next) return;
        running++;
        try {
          const result = dispatch
            ? await dispatch({ task: next.task, attempt: next.attempt, trialId: trialIdOf(next.task.id, next.attempt) }, { ...dispatchContext, signal: trialSignal })
            : await runTrial(next.task, next.attempt, trialEnv, trialSignal);
          running--;
          if (result) await record(result).catch((error: unknown) => {
            throw new RunStorageError(runDir, error);
          });
        } catch (error) {
          // Not a trial failure (those are results): the run directory or the engine broke.
          fatal ??= error;
          controller.abort(error);
          return;
        }
      }
    };
    // Handed to a dispatcher all at once, trials would all start before any budget is spent: with a budget, dispatch -n at a time.
    const lanes = dispatch && !runBudgeted ? plan.length : options.concurrency;
    await Promise.all(Array.from({ length: Math.min(lanes, Math.max(plan.length, 1)) }, worker));
    if (fatal) throw fatal;

    const interrupted = options.signal?.aborted === true && results.length < plannedTrials;
    const stoppedAtBudget = !interrupted && exhausted !== null && latestCount(results) < plannedTrials;
    finalizeSummary();
    if (summaryError) throw new RunStorageError(runDir, summaryError);
    const summary = summaryNow(interrupted ? "interrupted" : stoppedAtBudget ? "budget_exhausted" : "completed");
    await writes.run(() => writeJsonAtomic(summaryPath, summary));
    bus.emit({ type: "run_finished", data: summary });
    logger.info("run finished", { runId, status: summary.status, passed: summary.trials.passed, total: summary.trials.total });
    return summary;
  } catch (error) {
    finalizeSummary();
    const summary: RunSummary = { ...summaryNow("failed"), ...(error instanceof RunFatalAgentError ? { error: error.message } : {}) };
    await writes.run(() => writeJsonAtomic(summaryPath, summary)).catch((writeError: unknown) =>
      logger.error("writing summary.json failed", { runId, error: writeError instanceof Error ? writeError.message : String(writeError) }),
    );
    bus.emit({ type: "run_finished", data: summary });
    // The caller gets the error and reports it; an error line here would say it twice.
    logger.info("run failed", { runId, error: error instanceof Error ? error.message : String(error) });
    throw error;
  } finally {
    finalizeSummary();
    options.signal?.removeEventListener("abort", onAbort);
    await modelProxy?.close();
    // An agent the engine made that holds something for the run (an installed CLI's model proxy) lets it go.
    if (!regrade && !isAgentObject(options.agent)) await agent.close?.().catch((error: unknown) => logger.error("closing the agent failed", { runId, error: error instanceof Error ? error.message : String(error) }));
    // Removals the runtime finishes in the background (and its warm sandboxes): none may outlive the run.
    await options.runtime.drain?.().catch((error: unknown) =>
      logger.error("removing the run's sandboxes failed", { runId, error: error instanceof Error ? error.message : String(error) }),
    );
    bus.close();
    unsubscribeSink();
    // A sink that failed already said so (the run's error); closing it must not replace that error.
    await Promise.all([sink.close(), resultsSink.close()].map((closing) =>
      closing.catch((error: unknown) => logger.error("closing a run file failed", { runId, error: error instanceof Error ? error.message : String(error) })),
    ));
  }
}

/** Trials with a result (a resume's repeated trial counted once). */
function latestCount(results: readonly TrialResult[]): number {
  return new Set(results.map((r) => r.trialId)).size;
}

function isAgentObject(agent: AgentSpec | Agent): agent is Agent {
  return typeof (agent as Agent).run === "function";
}

/**
 * Refuses, before any trial starts, a run its runtime cannot honour: strict verifier isolation
 * on a runtime without killAll, or a task asking for more than the run's maxima.
 */
function checkRunnable(tasks: readonly TaskSpec[], runtime: SandboxRuntime, isolateVerifier: boolean | null, limits: RunLimits): void {
  const problems: string[] = [];
  if (!runtime.capabilities.killAll) {
    const strict = tasks.filter((t) => isolates(t, { isolateVerifier } as TrialEnvironment));
    if (strict.length > 0) {
      problems.push(
        `${strict.length} task(s) need strict verifier isolation (no agent process alive when the verifier starts: ` +
          `${strict.slice(0, 3).map((t) => t.id).join(", ")}${strict.length > 3 ? ", ..." : ""}), which the ${runtime.name} runtime cannot guarantee. ` +
          "Use the docker runtime, or pass --no-isolate-verifier (isolateVerifier: false) to let agent processes live through verification (trusted agents only).",
      );
    }
  }
  const max = limits.max ?? {};
  for (const task of tasks) {
    const own = effectiveLimits(task, limits);
    for (const key of ["memoryMb", "cpus", "storageMb"] as const) {
      const limit = max[key];
      const asked = own[key];
      if (limit !== undefined && asked !== undefined && asked > limit) problems.push(`task ${task.id} asks for ${key} ${asked}, above this run's maximum of ${limit}`);
    }
  }
  if (problems.length > 0) throw new EngineError(`cannot start the run: ${problems.slice(0, 10).join("; ")}${problems.length > 10 ? ` (and ${problems.length - 10} more)` : ""}`);
}
