import { z } from "zod";

/** Task ids become directory names and container labels: keep them boring. */
export const TASK_ID_PATTERN = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/;
export const TaskId = z.string().regex(TASK_ID_PATTERN, "a task id is 1-128 of [A-Za-z0-9._-], starting with a letter or digit");

export const TaskFormat = z.enum(["native", "tb1", "term-executor", "swebench", "competition"]);
export type TaskFormat = z.infer<typeof TaskFormat>;

export const EnvironmentSpec = z.object({
  /** Image to run; null means build `buildContext` (or use the runtime's default image). */
  dockerImage: z.string().nullable(),
  /** Host directory holding the Dockerfile and its build context. */
  buildContext: z.string().nullable(),
  /**
   * Top-level entries of buildContext left out of the build (of its image's hash and of what is
   * sent to the builder): task files there that the Dockerfile does not COPY or ADD.
   */
  buildContextExclude: z.array(z.string()).optional(),
  buildTimeoutSec: z.number().positive(),
  cpus: z.number().positive().nullable(),
  memoryMb: z.number().int().positive().nullable(),
  storageMb: z.number().int().positive().nullable(),
  gpus: z.number().int().nonnegative(),
  allowInternet: z.boolean(),
  /** Working directory inside the sandbox; null means the image's WORKDIR, else /app. */
  workdir: z.string().nullable(),
  env: z.record(z.string(), z.string()),
});
export type EnvironmentSpec = z.infer<typeof EnvironmentSpec>;

export const CheckSpec = z.object({
  name: z.string().min(1),
  /** One shell string run by bash (no login shell, no rc files, clean env) in the workdir. */
  command: z.string().min(1),
  timeoutSec: z.number().positive(),
});
export type CheckSpec = z.infer<typeof CheckSpec>;

/**
 * How a trial is scored.
 * - `reward-file`: upload testsDir to /tests, run `command`, read /logs/verifier/reward.json|txt.
 * - `checks`: copy testsDir into the workdir, run every check; reward 1 iff all exit 0.
 */
const verifierCommon = {
  testsDir: z.string().nullable(),
  timeoutSec: z.number().positive(),
  env: z.record(z.string(), z.string()),
  /**
   * Strict isolation: no process the agent started is alive when the verifier starts (task.toml
   * `[verifier] isolate_processes`; default false for Harbor tasks, whose tests may talk to
   * services the agent started, and true for term-executor check tasks).
   */
  isolateProcesses: z.boolean().default(false),
  /**
   * Globs of sandbox paths the agent may legitimately change although the verifier relies on
   * them (task.toml `[verifier] allow_changes`), e.g. "/etc/profile.d/myapp.sh".
   */
  allowChanges: z.array(z.string()).default([]),
  /**
   * Where the verifier runs (task.toml `[verifier] grading`): "fresh" (a new sandbox from the
   * original image holding only the agent's outputs), "shared" (the agent's own sandbox, audited),
   * or "auto" (absent): fresh for repositories, and for other tasks whose outputs are known
   * (declared, or the workdir when the tests name nothing outside it).
   */
  grading: z.enum(["auto", "fresh", "shared"]).optional(),
  /**
   * Sandbox paths (files or directories) that are the agent's work (task.toml `[verifier]
   * outputs`): what fresh grading brings from the agent's sandbox. Absent: the workdir.
   */
  outputs: z.array(z.string()).optional(),
};

export const VerifierSpec = z.discriminatedUnion("mode", [
  z.object({ mode: z.literal("reward-file"), command: z.string().min(1), ...verifierCommon }),
  z.object({ mode: z.literal("checks"), checks: z.array(CheckSpec), ...verifierCommon }),
]);
export type VerifierSpec = z.infer<typeof VerifierSpec>;

export const SolutionSpec = z.object({
  /** Host directory uploaded to /solution for the oracle agent only. */
  dir: z.string(),
  /** Shell string the oracle runs in the workdir, e.g. `bash /solution/solve.sh`. */
  command: z.string().min(1),
  /**
   * A file in `dir` holding a unified diff (a SWE-bench gold patch): the oracle applies it in the
   * workdir instead of running `command`, and a diff that applies nowhere is the task's fault.
   */
  patch: z.string().min(1).optional(),
});
export type SolutionSpec = z.infer<typeof SolutionSpec>;

/** A git repository checked out at base_commit into the workdir before the agent runs. */
/** A full commit id: 40 hex digits (SHA-1) or 64 (SHA-256). */
export const COMMIT_ID = /^(?:[0-9a-f]{40}|[0-9a-f]{64})$/i;

export const WorkspaceSpec = z.object({
  repo: z.string().min(1),
  baseCommit: z.string().regex(COMMIT_ID, "base_commit must be a full commit id (40 or 64 hex digits)"),
  version: z.string().nullable(),
  language: z.string().nullable(),
  install: z.array(z.string()),
  installTimeoutSec: z.number().positive(),
});
export type WorkspaceSpec = z.infer<typeof WorkspaceSpec>;

/** Medal thresholds of a competition, in the metric's own units. */
export const MedalThresholds = z.object({ gold: z.number(), silver: z.number(), bronze: z.number(), median: z.number() });
export type MedalThresholds = z.infer<typeof MedalThresholds>;

/**
 * An MLE-bench-style competition: the agent sees `publicDir` read-only at /home/data and writes
 * /home/submission; `privateDir` only ever reaches the separate grader sandbox (at /private),
 * where the verifier's testsDir (grade/) runs and writes reward.json {score, valid}.
 */
export const CompetitionSpec = z.object({
  publicDir: z.string(),
  privateDir: z.string().nullable(),
  metric: z.string().min(1),
  higherIsBetter: z.boolean(),
  thresholds: MedalThresholds,
  /** Image the grader runs in; null: the task's environment (else the run's default image). */
  graderImage: z.string().nullable(),
});
export type CompetitionSpec = z.infer<typeof CompetitionSpec>;

/** The one normalized task every loader produces and the engine consumes. */
export const TaskSpec = z.object({
  id: TaskId,
  format: TaskFormat,
  /** Host path the task was loaded from (a directory, or the dataset file). */
  sourcePath: z.string(),
  instruction: z.string(),
  category: z.string().nullable(),
  difficulty: z.string().nullable(),
  tags: z.array(z.string()),
  environment: EnvironmentSpec,
  agent: z.object({ timeoutSec: z.number().positive() }),
  verifier: VerifierSpec,
  solution: SolutionSpec.nullable(),
  workspace: WorkspaceSpec.nullable(),
  /** Competition tasks only (format "competition"). */
  competition: CompetitionSpec.optional(),
  /** Everything the task file said that Proctor does not interpret, kept verbatim. */
  extra: z.record(z.string(), z.unknown()),
});
export type TaskSpec = z.infer<typeof TaskSpec>;

export const DEFAULT_AGENT_TIMEOUT_SEC = 600;
export const DEFAULT_VERIFIER_TIMEOUT_SEC = 600;
export const DEFAULT_BUILD_TIMEOUT_SEC = 600;
