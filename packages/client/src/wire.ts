import { isCleanPass, type ProctorEvent, type RunSummary, type TrialResult } from "@proctor/schema";
import { z } from "zod";

/**
 * The server's wire protocol (DESIGN.md "Server API"): one zod schema per route's parameters,
 * body and answer, and the WebSocket envelope. The server validates its input with these and
 * the client parses every answer with them, so the two cannot drift.
 */

export const BatchStatus = z.enum(["queued", "running", "completed", "failed", "cancelled"]);
export type BatchStatus = z.infer<typeof BatchStatus>;

/** term-executor's event names on the WebSocket, plus `task_retry` (an infra retry). */
export const WireEventName = z.enum(["snapshot", "batch_started", "task_started", "task_phase", "task_retry", "task_complete", "batch_complete"]);
export type WireEventName = z.infer<typeof WireEventName>;

/** One WebSocket message: `{seq, event, batch_id, task_id?, ts, data}`. */
export const WireEnvelope = z.object({
  /** The engine event's sequence number; a snapshot carries the seq of the last event it reflects. */
  seq: z.number().int().nonnegative(),
  event: WireEventName,
  batch_id: z.string(),
  task_id: z.string().optional(),
  ts: z.string(),
  data: z.record(z.string(), z.unknown()),
});
export type WireEnvelope = z.infer<typeof WireEnvelope>;

/** Events a slow client may miss (it gets a fresh snapshot later); the rest are never dropped. */
export const DROPPABLE_EVENTS: ReadonlySet<WireEventName> = new Set(["task_phase", "task_retry"]);

/** Every error answer: `{error, message}` (`error` a stable code, `message` says what to do). */
export const ErrorBody = z.object({ error: z.string(), message: z.string() });
export type ErrorBody = z.infer<typeof ErrorBody>;

// ---- parameters -------------------------------------------------------------------------

export const BatchParams = z.object({ id: z.string().min(1).max(128) });
export const TaskParams = BatchParams.extend({ task_id: z.string().min(1).max(256) });

/** A batch's budgets (`max_cost`, `max_tokens`, `trial_max_cost` USD / tokens, `on_budget`), as query parameters or form fields of `POST /submit`. */
export const BudgetFields = z.object({
  max_cost: z.coerce.number().positive().optional(),
  max_tokens: z.coerce.number().int().positive().optional(),
  trial_max_cost: z.coerce.number().positive().optional(),
  on_budget: z.enum(["finish", "stop"]).optional(),
});
export type BudgetFields = z.infer<typeof BudgetFields>;

/** `POST /submit?concurrent_tasks=N&model=M&agent=A&max_cost=USD...`; N is at most the server's maxConcurrentTasks; A one of the server's installed agents. */
export function submitQuery(maxConcurrentTasks: number) {
  return z.object({
    concurrent_tasks: z.coerce.number().int().min(1).max(maxConcurrentTasks).optional(),
    model: z.string().min(1).max(256).optional(),
    agent: z.string().min(1).max(128).optional(),
    ...BudgetFields.shape,
  });
}

/** `WS /ws?batch_id=<id>[&since=<seq>]` */
export const WsQuery = z.object({
  batch_id: z.string().min(1).max(128),
  since: z.coerce.number().int().nonnegative().optional(),
});

// ---- answers ----------------------------------------------------------------------------

/** 202 of `POST /submit`. */
export const SubmitResponse = z.object({
  batch_id: z.string(),
  total_tasks: z.number().int().nonnegative(),
  concurrent_tasks: z.number().int().positive(),
  ws_url: z.string(),
});
export type SubmitResponse = z.infer<typeof SubmitResponse>;

/** `GET /batch/:id` (also the answer of `POST /batch/:id/cancel`). */
export const BatchStatusResponse = z.object({
  batch_id: z.string(),
  status: BatchStatus,
  total_tasks: z.number().int().nonnegative(),
  completed_tasks: z.number().int().nonnegative(),
  passed_tasks: z.number().int().nonnegative(),
  failed_tasks: z.number().int().nonnegative(),
  aggregate_reward: z.number(),
  /** USD the completed tasks cost (model tokens + compute), over those with a price (absent from older servers). */
  cost_usd: z.number().nonnegative().optional(),
  /** Completed tasks whose model usage has no price: their cost is not in cost_usd, never read as $0. */
  unpriced_tasks: z.number().int().nonnegative().optional(),
  error: z.string().nullable(),
  duration_ms: z.number().nullable(),
  created_at: z.string(),
  finished_at: z.string().nullable(),
  concurrent_tasks: z.number().int().positive(),
  submitted_by: z.string().nullable(),
  queue_position: z.number().int().positive().optional(),
}).loose();
export type BatchStatusResponse = z.infer<typeof BatchStatusResponse>;

const TaskOutcome = z.enum(["passed", "failed", "error"]);

/** A task as every status route and snapshot shows it (term-executor's field names). */
export const TaskJson = z.object({
  task_id: z.string(),
  status: z.enum(["pending", "running", "completed"]),
  phase: z.string().nullable(),
  outcome: TaskOutcome.nullable(),
  passed: z.boolean().nullable(),
  reward: z.number().nullable(),
  error: z.string().nullable(),
  duration_ms: z.number().nullable(),
});
export type TaskJson = z.infer<typeof TaskJson>;

/** `GET /batch/:id/tasks` */
export const BatchTasksResponse = z.object({ batch_id: z.string(), status: BatchStatus, tasks: z.array(TaskJson) });
export type BatchTasksResponse = z.infer<typeof BatchTasksResponse>;

/** One check script's result in `GET /batch/:id/task/:task_id`. */
const TestResultJson = z.object({
  name: z.string(),
  command: z.string().nullable(),
  passed: z.boolean(),
  exit_code: z.number().nullable(),
  timed_out: z.boolean(),
  duration_ms: z.number().nullable(),
  output: z.string(),
});

/** `GET /batch/:id/task/:task_id`: the task plus per-check results (empty until it completed). */
export const TaskDetailResponse = TaskJson.extend({
  test_results: z.array(TestResultJson),
  test_output: z.string(),
  phases: z.array(z.object({ phase: z.string(), duration_ms: z.number() })),
  agent: z.object({ exit_code: z.number().nullable(), timed_out: z.boolean() }).nullable().optional(),
  started_at: z.string().optional(),
  finished_at: z.string().optional(),
}).loose();
export type TaskDetailResponse = z.infer<typeof TaskDetailResponse>;

/** `GET /batches`, newest first. */
export const BatchListResponse = z.array(
  z.object({
    batch_id: z.string(),
    created_at: z.string(),
    status: BatchStatus,
    total_tasks: z.number().int().nonnegative(),
    completed_tasks: z.number().int().nonnegative(),
    passed_tasks: z.number().int().nonnegative(),
  }),
);
export type BatchListResponse = z.infer<typeof BatchListResponse>;

/** `GET /health` (200 ok, 503 unhealthy). */
export const HealthResponse = z.object({
  status: z.enum(["ok", "unhealthy"]),
  version: z.string(),
  checks: z.object({ data_dir: z.string(), runtime: z.string() }),
});
export type HealthResponse = z.infer<typeof HealthResponse>;

/** `GET /status` */
export const StatusResponse = z.object({
  version: z.string(),
  uptime_secs: z.number().int().nonnegative(),
  active_batches: z.number().int().nonnegative(),
  queued_batches: z.number().int().nonnegative(),
  total_batches: z.number().int().nonnegative(),
  completed_batches: z.number().int().nonnegative(),
  failed_batches: z.number().int().nonnegative(),
  cancelled_batches: z.number().int().nonnegative(),
  tasks_passed: z.number().int().nonnegative(),
  tasks_failed: z.number().int().nonnegative(),
  max_active_batches: z.number().int().positive(),
  max_queued_batches: z.number().int().nonnegative(),
  max_concurrent_tasks: z.number().int().positive(),
  has_active_batch: z.boolean(),
  ws_clients: z.number().int().nonnegative(),
  auth: z.string(),
}).loose();
export type StatusResponse = z.infer<typeof StatusResponse>;

/** The `snapshot` message's data: the batch status plus every task. */
export const SnapshotData = BatchStatusResponse.extend({ tasks: z.array(TaskJson) });

// ---- engine events -> wire ---------------------------------------------------------------

/** The `task_complete` data of a finished trial. */
export function taskCompleteData(result: TrialResult): Record<string, unknown> {
  return {
    task_id: result.taskId,
    status: "completed",
    outcome: result.status,
    passed: isCleanPass(result),
    reward: result.reward ?? 0,
    error: result.error === null ? null : `${result.error.kind}: ${result.error.message}`,
    duration_ms: Math.round(result.durationMs),
  };
}

/** The `batch_complete` payload from the engine's final summary. */
export function batchCompleteData(summary: RunSummary, status: BatchStatus): Record<string, unknown> {
  const failed = summary.trials.failed + summary.trials.errored;
  return {
    status,
    total: summary.trials.planned,
    completed: summary.trials.total,
    passed: summary.trials.passed,
    failed,
    errored: summary.trials.errored,
    reward: summary.meanReward ?? 0,
    duration_ms: Math.round(summary.durationMs),
  };
}

/**
 * Map one engine event to its wire form, or null for events the wire does not carry.
 * `run_finished` maps to `batch_complete` with the batch status the caller decides (an
 * interrupted run is `cancelled` when a user cancelled it; null when the batch goes on later).
 */
export function toWire(batchId: string, event: ProctorEvent, finalStatus: (summary: RunSummary) => BatchStatus | null): WireEnvelope | null {
  const base = { seq: event.seq, batch_id: batchId, ts: event.ts };
  switch (event.type) {
    case "run_started":
      return {
        ...base,
        event: "batch_started",
        data: { total_tasks: event.data.totalTrials, concurrent_tasks: event.data.concurrency, skipped_tasks: event.data.skipped, runtime: event.data.runtime },
      };
    case "trial_started":
      return { ...base, event: "task_started", task_id: event.taskId, data: { task_id: event.taskId, attempt: event.data.attempt, retry: event.data.retry } };
    case "trial_phase":
      return {
        ...base,
        event: "task_phase",
        task_id: event.taskId,
        data: {
          task_id: event.taskId,
          phase: event.data.phase,
          status: event.data.status,
          ...(event.data.durationMs === undefined ? {} : { duration_ms: Math.round(event.data.durationMs) }),
          ...(event.data.detail === undefined ? {} : { detail: event.data.detail }),
        },
      };
    case "trial_retry":
      return { ...base, event: "task_retry", task_id: event.taskId, data: { task_id: event.taskId, retry: event.data.retry, delay_ms: event.data.delayMs, message: event.data.message } };
    case "trial_finished":
      return { ...base, event: "task_complete", task_id: event.taskId, data: taskCompleteData(event.data) };
    case "run_finished": {
      const status = finalStatus(event.data);
      return status === null ? null : { ...base, event: "batch_complete", data: batchCompleteData(event.data, status) };
    }
    // Image build progress is for the CLI and events.jsonl; the term-executor wire has no such event.
    case "image_build_started":
    case "image_build_progress":
    case "image_build_finished":
      return null;
  }
}
