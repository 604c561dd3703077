import type { Agent } from "@proctor/agents";
import type { ContainerSettings, Sandbox, SandboxRuntime } from "@proctor/sandbox";
import type { Clock } from "../clock";
import type { CheckResult, CompetitionGrading, EventBody, Integrity, Logger, Phase, PhaseTiming, TaskSpec, TrialError, TrialResult } from "@proctor/schema";
import type { RepoCache } from "../workspace";

/** Resource limits for one trial's sandbox. */
export interface TrialLimits {
  memoryMb?: number;
  cpus?: number;
  pidsLimit?: number;
  /** Bytes the sandbox may write on top of its image, enforced while the agent runs. */
  storageMb?: number;
}

/** Limits a run applies: defaults for tasks that name none, maxima no task may exceed. */
export interface RunLimits {
  defaults?: TrialLimits;
  max?: TrialLimits;
  /** Bytes of sandbox log files (/logs) collected per trial; the rest is cut. Default 100 MiB. */
  logBytes?: number;
}

export const DEFAULT_LOG_BYTES = 100 * 1024 * 1024;

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
  limits: RunLimits;
  /** Overrides every task's `isolateProcesses` when not null (`--isolate-verifier` / `--no-isolate-verifier`). */
  isolateVerifier: boolean | null;
  /** Overrides every task's grading mode when not null (`--grading fresh|shared`). */
  grading?: "fresh" | "shared" | null;
  /** `--container-config` settings for every sandbox of the run (a task's gpus apply when it has none). */
  container?: ContainerSettings;
  /** The run's trials not yet started (a hint for the runtime's warm pool). */
  upcomingTrials?: () => number;
  /** Most bytes of compressed agent outputs kept per trial (0: none kept). Default KEEP_OUTPUTS_BYTES. */
  keepOutputsBytes?: number;
  /**
   * `proctor regrade`: instead of an agent, each trial puts back the outputs a trial of an earlier
   * run kept (this returns the archive and how it was laid out), then grades them.
   */
  restore?: (trialId: string) => { archive: string; outputs: NonNullable<TrialResult["outputs"]> } | null;
  /** `--trial-max-cost`: a model-driven agent stops once its trial's model cost passes this many USD. */
  maxCostUsd?: number;
  /** `--compute-price`: USD per CPU-hour of the trial's sandboxes (result.json `compute.costUsd`). */
  computeUsdPerCpuHour?: number;
}

/** Compressed agent outputs kept per trial by default (64 MiB). */
export const KEEP_OUTPUTS_BYTES = 64 * 1024 * 1024;

/** What one attempt found out; becomes the trial's result. */
export interface AttemptState {
  phases: PhaseTiming[];
  errors: TrialError[];
  reward: number | null;
  agent: TrialResult["agent"];
  checks: CheckResult[] | null;
  integrity: Integrity | null;
  /** Competition tasks: score, validity and medal. */
  competition?: CompetitionGrading;
  /** SWE-bench-style tasks: the per-test grading. */
  grading?: NonNullable<TrialResult["grading"]>;
  /** The image the sandboxes ran on, with its content id. */
  environment?: NonNullable<TrialResult["environment"]>;
  /** Fresh grading: the agent's outputs kept in the trial directory, or why not. */
  outputs?: NonNullable<TrialResult["outputs"]>;
  /** CPU-seconds the attempt's sandboxes used, where the runtime measures them. */
  cpuSeconds?: number | null;
}

/** Per-phase budgets in ms, already scaled by the timeout multiplier. */
export interface Budgets {
  buildMs: number;
  installMs: number;
  agentMs: number;
  verifierMs: number;
  checksMs: number;
}

export type PhaseRunner = <T>(name: Phase, fn: () => Promise<T>, detail?: string, bound?: AbortSignal) => Promise<T>;

/** One attempt of one trial: the phases read and write this object, nothing else. */
export interface Attempt {
  task: TaskSpec;
  trialId: string;
  /** trials/<trial-id>/ on the host. */
  trialDir: string;
  env: TrialEnvironment;
  /** The run's abort or the whole-trial deadline. */
  signal: AbortSignal;
  budgets: Budgets;
  state: AttemptState;
  phase: PhaseRunner;
  /** The image the agent's sandbox was created from (set by the environment phase); fresh grading uses it again. */
  image: string | null;
}

/** An attempt once its sandbox runs. */
export interface SandboxAttempt extends Attempt {
  sandbox: Sandbox;
}

/** Budgets for the steps that have no task-given timeout. */
export const SANDBOX_START_MS = 120_000;
export const CHECKOUT_MS = 600_000;
export const HOUSEKEEPING_MS = 60_000;
/** Cap on each check's kept output, and on the verifier's captured stdout/stderr files. */
export const CHECK_OUTPUT_BYTES = 64 * 1024;
export const VERIFIER_LOG_BYTES = 10 * 1024 * 1024;

export function message(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

export function tail(text: string, lines = 5): string {
  return text.trim().split("\n").slice(-lines).join("\n");
}

export function throwIfAborted(signal: AbortSignal): void {
  if (signal.aborted) throw signal.reason;
}

/** Whether the verifier must start with no agent process alive. */
export function isolates(task: TaskSpec, env: TrialEnvironment): boolean {
  return env.isolateVerifier ?? task.verifier.isolateProcesses;
}

/** A task's limits after the run's defaults. */
export function effectiveLimits(task: TaskSpec, limits: RunLimits): TrialLimits {
  const d = limits.defaults ?? {};
  const e = task.environment;
  const pick = <T>(own: T | null, fallback: T | undefined): T | undefined => own ?? fallback;
  const out: TrialLimits = {};
  const memoryMb = pick(e.memoryMb, d.memoryMb);
  const cpus = pick(e.cpus, d.cpus);
  const storageMb = pick(e.storageMb, d.storageMb);
  if (memoryMb !== undefined) out.memoryMb = memoryMb;
  if (cpus !== undefined) out.cpus = cpus;
  if (storageMb !== undefined) out.storageMb = storageMb;
  if (d.pidsLimit !== undefined) out.pidsLimit = d.pidsLimit;
  return out;
}
