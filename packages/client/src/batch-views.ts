import type { ProctorEvent, RunSummary, TrialResult } from "@proctor/schema";
import type { WsFeed } from "./ws-hub";
import { batchCompleteData, toWire, type BatchStatus, type BatchStatusResponse, type TaskDetailResponse, type TaskJson, type WireEnvelope } from "./wire";

// A batch's live state -> the routes' and WebSocket's answers. Anything holding a batch's state
// (the engine's RunQueue batches, a test, another server) maps it the same way. The shapes are
// structural so this package needs no engine.

/** A task's live state (the engine's TaskState). */
export interface TaskStateView {
  taskId: string;
  status: TaskJson["status"];
  phase: string | null;
  outcome: TaskJson["outcome"];
  reward: number | null;
  error: string | null;
  durationMs: number | null;
}

/** A batch's live state (the engine's QueuedBatch). */
export interface BatchStateView {
  readonly id: string;
  readonly status: BatchStatus;
  readonly tasks: ReadonlyMap<string, TaskStateView>;
  readonly completed: number;
  readonly passed: number;
  readonly failed: number;
  readonly meanReward: number;
  /** USD the completed tasks cost, over those with a price; unpricedTasks: those without one. */
  readonly costUsd: number;
  readonly unpricedTasks: number;
  readonly error: string | null;
  /** Set once finished; while running the duration counts from startedAtMs. */
  readonly durationMs: number | null;
  readonly startedAtMs: number | null;
  /** Seq of the last event the state reflects; null while unknown. */
  readonly seq: number | null;
  readonly record: { createdAt: string; finishedAt: string | null; concurrentTasks: number; submittedBy: string | null };
}

/** A batch's live update (the engine's BatchUpdate): an engine event, or its finish. */
export type BatchUpdateView =
  | { type: "event"; event: ProctorEvent }
  | { type: "finished"; seq: number; ts: string; status: BatchStatus; summary: RunSummary | null; error: string | null };

/** GET /batch/:id (queuePosition: while queued, else null). */
export function batchStatusJson(batch: BatchStateView, queuePosition: number | null): BatchStatusResponse {
  const duration = batch.durationMs ?? (batch.startedAtMs === null ? null : Date.now() - batch.startedAtMs);
  return {
    batch_id: batch.id,
    status: batch.status,
    total_tasks: batch.tasks.size,
    completed_tasks: batch.completed,
    passed_tasks: batch.passed,
    failed_tasks: batch.failed,
    aggregate_reward: batch.meanReward,
    cost_usd: Math.round(batch.costUsd * 1e6) / 1e6,
    unpriced_tasks: batch.unpricedTasks,
    error: batch.error,
    duration_ms: duration === null ? null : Math.round(duration),
    created_at: batch.record.createdAt,
    finished_at: batch.record.finishedAt,
    concurrent_tasks: batch.record.concurrentTasks,
    submitted_by: batch.record.submittedBy,
    ...(queuePosition === null ? {} : { queue_position: queuePosition }),
  };
}

/** A task as every status route and snapshot shows it. */
export function taskJson(task: TaskStateView): TaskJson {
  return {
    task_id: task.taskId,
    status: task.status,
    phase: task.phase,
    outcome: task.outcome,
    passed: task.outcome === null ? null : task.outcome === "passed",
    reward: task.reward,
    error: task.error,
    duration_ms: task.durationMs,
  };
}

/** GET /batch/:id/task/:task_id: the task plus per-check results from its result (null until it completed). */
export function taskDetailJson(task: TaskStateView, result: TrialResult | null): TaskDetailResponse {
  const base = taskJson(task);
  if (!result) return { ...base, test_results: [], test_output: "", phases: [] };
  const checks = result.checks ?? [];
  return {
    ...base,
    test_results: checks.map((c) => ({
      name: c.name,
      command: c.command ?? null,
      passed: c.passed,
      exit_code: c.exitCode,
      timed_out: c.timedOut,
      duration_ms: c.durationMs ?? null,
      output: c.output,
    })),
    test_output: checks.map((c) => `== ${c.name} (exit ${c.exitCode ?? "none"})\n${c.output}`).join("\n"),
    phases: result.phases.map((p) => ({ phase: p.phase, duration_ms: Math.round(p.durationMs) })),
    agent: result.agent === null ? null : { exit_code: result.agent.exitCode, timed_out: result.agent.timedOut },
    started_at: result.startedAt,
    finished_at: result.finishedAt,
  };
}

const snapshots = new WeakMap<BatchStateView, { seq: number; status: string; json: string }>();

/** The `snapshot` message (status + every task), serialized once per seq and status for all clients. */
export function snapshotOf(batch: BatchStateView): { seq: number; json: string } {
  const seq = batch.seq ?? 0;
  // Task states only change with an event (a new seq); the batch status may change without one.
  const cached = snapshots.get(batch);
  if (cached?.seq === seq && cached.status === batch.status) return cached;
  const envelope: WireEnvelope = {
    seq,
    event: "snapshot",
    batch_id: batch.id,
    ts: new Date().toISOString(),
    data: { ...batchStatusJson(batch, null), tasks: [...batch.tasks.values()].map(taskJson) },
  };
  const fresh = { seq, status: batch.status, json: JSON.stringify(envelope) };
  snapshots.set(batch, fresh);
  return fresh;
}

/**
 * An engine event in wire form. `historic` (replayed from disk, the batch no longer running): a
 * run_finished of an interrupted run is `cancelled` if the batch was, else nothing (a shutdown).
 */
export function wireOfEvent(batch: BatchStateView, event: ProctorEvent, historic: boolean): WireEnvelope | null {
  return toWire(batch.id, event, (summary) => {
    if (summary.status === "completed") return "completed";
    if (summary.status === "failed") return "failed";
    return historic && batch.status === "cancelled" ? "cancelled" : null;
  });
}

/** A live update of a batch in wire form (its finish is `batch_complete` with the batch's own status). */
export function wireOfUpdate(batch: BatchStateView, update: BatchUpdateView): WireEnvelope | null {
  if (update.type === "event") return wireOfEvent(batch, update.event, false);
  const { seq, ts, status, summary, error } = update;
  const data = summary
    ? batchCompleteData(summary, status)
    : { status, total: batch.tasks.size, completed: batch.completed, passed: batch.passed, failed: batch.failed, reward: batch.meanReward, duration_ms: Math.round(batch.durationMs ?? 0) };
  return { seq, event: "batch_complete", batch_id: batch.id, ts, data: { ...data, error } };
}

/** A batch that tells its updates (the engine's QueuedBatch). */
export interface LiveBatchView extends BatchStateView {
  readonly finished: boolean;
  /** The running engine's event bus; null when the batch is not running (its events are history). */
  readonly bus: unknown;
  subscribe(listener: (update: BatchUpdateView) => void): () => void;
}

/**
 * A batch as a WsHub feed: its snapshot, its recorded events after a seq (from `events`, e.g. the
 * engine's RunQueue) and its live updates, all in wire form.
 */
export function batchFeed<B extends LiveBatchView>(
  batch: B,
  events: { ensureSeq(batch: B): Promise<void>; replay(batch: B, afterSeq: number): Promise<ProctorEvent[]> },
): WsFeed {
  return {
    id: batch.id,
    get finished() {
      return batch.finished;
    },
    prepare: () => events.ensureSeq(batch),
    snapshot: () => snapshotOf(batch),
    replay: async (since) => {
      const historic = batch.bus === null;
      const recorded = await events.replay(batch, since);
      return recorded.map((event) => wireOfEvent(batch, event, historic)).filter((e): e is WireEnvelope => e !== null);
    },
    subscribe: (listener) =>
      batch.subscribe((update) => {
        const envelope = wireOfUpdate(batch, update);
        if (envelope !== null) listener(envelope);
      }),
  };
}
