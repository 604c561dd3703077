import { AgentSpec, TaskSpec } from "@proctor/schema";
import { z } from "zod";

const Sha256 = z.string().regex(/^[0-9a-f]{64}$/);
const BundleRefSchema = z.object({
  sha256: Sha256,
  source: z.discriminatedUnion("kind", [z.object({ kind: z.literal("dir"), dir: z.string().min(1) }), z.object({ kind: z.literal("http"), baseUrl: z.string().url(), token: z.string().min(16).optional() })]),
});

const Limits = z.object({ memoryMb: z.number().optional(), cpus: z.number().optional(), pidsLimit: z.number().optional(), storageMb: z.number().optional() });

/**
 * One BullMQ job: one trial. It names its task and its run's settings by the sha256 of records
 * published once in Redis (`keys.spec`), so 10,000 trials of 100 tasks carry 100 task specs, not
 * 10,000 copies.
 */
export const TrialJob = z.object({
  v: z.literal(2),
  runId: z.string().min(1),
  trialId: z.string().min(1),
  attempt: z.number().int().positive(),
  /** sha256 of the job's TaskRecord. */
  task: Sha256,
  /** sha256 of the run's RunContext. */
  context: Sha256,
});
export type TrialJob = z.infer<typeof TrialJob>;

/** A task as workers run it, published once per task and run (`keys.spec`). */
export const TaskRecord = z.object({
  /** The task with bundle-relative paths. */
  task: TaskSpec,
  bundle: BundleRefSchema,
});
export type TaskRecord = z.infer<typeof TaskRecord>;

/** What every trial of a run shares, published once per run (`keys.spec`); nothing secret. */
export const RunContext = z.object({
  agent: AgentSpec,
  /** A code/image agent's directory, bundled like a task. */
  agentBundle: BundleRefSchema.nullable(),
  /** The runtime the run was configured for; a worker with another refuses the job. */
  runtime: z.string(),
  timeoutMultiplier: z.number().positive(),
  defaultImage: z.string().nullable(),
  isolateVerifier: z.boolean().nullable(),
  grading: z.enum(["fresh", "shared"]).nullable().default(null),
  limits: z.object({ defaults: Limits.optional(), max: Limits.optional(), logBytes: z.number().optional() }),
  /** `--trial-max-cost` (USD): a model-driven agent stops once its trial's model cost passes it. */
  maxCostUsd: z.number().positive().optional(),
  /** `--compute-price`: USD per CPU-hour of a trial's sandboxes. */
  computeUsdPerCpuHour: z.number().nonnegative().optional(),
});
export type RunContext = z.infer<typeof RunContext>;

/** How long published task and run records stay in Redis (a resumed run publishes them again). */
export const SPEC_TTL_SECONDS = 7 * 86_400;

/** Redis keys, all under the queue prefix. */
export const keys = {
  /** A published TaskRecord or RunContext, by the sha256 of its JSON text. */
  spec: (prefix: string, sha256: string) => `${prefix}:spec:${sha256}`,
  /** Stream of a run's trial events, a JSON array of them per entry (trimmed; progress only). */
  events: (prefix: string, runId: string) => `${prefix}:run:${runId}:events`,
  /** Stream of a run's trial results (entries deleted once recorded). */
  results: (prefix: string, runId: string) => `${prefix}:run:${runId}:results`,
  /** Set when a run was cancelled: workers skip its jobs. */
  cancelled: (prefix: string, runId: string) => `${prefix}:run:${runId}:cancelled`,
  /** Sorted set of worker ids by last heartbeat (ms). */
  workers: (prefix: string) => `${prefix}:workers`,
  /** A worker's heartbeat hash; expires when the worker stops beating. */
  worker: (prefix: string, id: string) => `${prefix}:worker:${id}`,
  /** This queue's random id, made by its first worker: the reaper's label for the queue's containers. */
  queueId: (prefix: string) => `${prefix}:queue-id`,
};

/** BullMQ job ids may not contain ":"; run ids and trial ids never hold "|". */
export function jobIdOf(runId: string, trialId: string): string {
  return `${runId}|${trialId}`;
}
