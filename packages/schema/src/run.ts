import { z } from "zod";
import { AgentSpec } from "./agent";
import { Pins, TaskOrigin } from "./pins";

/** The resolved configuration of one run, stored as run.json with its hash. */
export const RunConfig = z.object({
  runId: z.string(),
  /** Sorted task ids with a content hash of each task's files, so a resume sees edits. */
  tasks: z.array(z.object({ id: z.string(), hash: z.string() })),
  sources: z.array(z.string()),
  agent: AgentSpec,
  agentHash: z.string().nullable(),
  /** The runtime's name (docker, local, or a library user's own). */
  runtime: z.string(),
  attempts: z.number().int().positive(),
  concurrency: z.number().int().positive(),
  timeoutMultiplier: z.number().positive(),
  defaultImage: z.string().nullable(),
  /** `--isolate-verifier` (true) / `--no-isolate-verifier` (false); absent: each task decides. */
  isolateVerifier: z.boolean().optional(),
  /** `--grading`: where every trial's verifier runs, overriding each task's mode. */
  grading: z.enum(["fresh", "shared"]).optional(),
  /**
   * The task selection the run started with (`--include` / `--exclude` globs, `--tasks-file` as an
   * absolute path): a resume picks the same tasks from the sources. Absent: every task. Not in
   * configHash (the tasks picked are), so runs made before it existed still resume.
   */
  selection: z.object({ include: z.array(z.string()).optional(), exclude: z.array(z.string()).optional(), tasksFile: z.string().optional() }).optional(),
  /** SWE-bench loader flags the run started with (--repos-dir, --image, --env-setup; absolute paths): a resume reuses them. */
  dataset: z.object({ reposDir: z.string().optional(), imageTemplate: z.string().optional(), envSetup: z.string().optional() }).optional(),
  /**
   * Per task fetched from git, where it came from (TaskOrigin), sorted by task id; absent when no
   * task was. A resume fetches these same pins (from the cache). Not in configHash: the task
   * hashes already are, so runs made before it existed still resume.
   */
  origins: z.array(TaskOrigin).optional(),
  /** Resource limits the run applied (defaults and maxima); absent: none beyond the tasks' own. */
  limits: z.record(z.string(), z.unknown()).optional(),
  /**
   * Where the run's prices come from (the price library and its version, or a `--price-table`
   * file) and the compute price (`--compute-price`, USD per CPU-hour). Not in configHash.
   */
  pricing: z.object({ source: z.object({ name: z.string(), version: z.string() }), computeUsdPerCpuHour: z.number().nonnegative().optional() }).optional(),
  /** The run's budgets as last started (`--max-cost`, `--max-tokens`, `--trial-max-cost`, `--on-budget`); a resume may raise them. Not in configHash. */
  budget: z
    .object({ maxCostUsd: z.number().positive().optional(), maxTokens: z.number().int().positive().optional(), trialMaxCostUsd: z.number().positive().optional(), onBudget: z.enum(["finish", "stop"]).optional() })
    .optional(),
  /** `--container-config` settings (shm, gpus, OCI runtime, privileged); absent: none. A resume reuses them. */
  container: z
    .object({
      shmSizeBytes: z.number().optional(),
      memoryReservationBytes: z.number().optional(),
      cpusetCpus: z.string().optional(),
      cpuShares: z.number().optional(),
      gpus: z.number().optional(),
      runtime: z.string().optional(),
      privileged: z.boolean().optional(),
    })
    .optional(),
  /** What the run was pinned to when it started (image ids come with the trials: see summary.json). Not in configHash. */
  pins: Pins.optional(),
  /** `proctor regrade`: the run whose kept agent outputs this run graded again. Not in configHash. */
  regradeOf: z.string().optional(),
});
export type RunConfig = z.infer<typeof RunConfig>;


/**
 * The limits a trial's sandbox gets when neither its task nor its run sets one: what the server
 * gives every upload and `proctor run` gives every task. A task's own `[environment]` values win.
 */
export const DEFAULT_TRIAL_LIMITS = Object.freeze({ memoryMb: 2048, cpus: 2, pidsLimit: 1024, storageMb: 5120 });
