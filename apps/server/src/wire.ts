import type { ProctorEvent, RunSummary, TrialResult } from "@proctor/schema";

/** term-executor's event names on the WebSocket, plus `task_retry` (an infra retry). */
export type WireEventName = "snapshot" | "batch_started" | "task_started" | "task_phase" | "task_retry" | "task_complete" | "batch_complete";

/** One WebSocket message: `{seq, event, batch_id, task_id?, ts, data}`. */
export interface WireEnvelope {
  /** The engine event's sequence number; a snapshot carries the seq of the last event it reflects. */
  seq: number;
  event: WireEventName;
  batch_id: string;
  task_id?: string;
  ts: string;
  data: Record<string, unknown>;
}

export type BatchStatus = "queued" | "running" | "completed" | "failed" | "cancelled";

/** Events a slow client may miss (it gets a fresh snapshot later); the rest are never dropped. */
export const DROPPABLE_EVENTS: ReadonlySet<WireEventName> = new Set(["task_phase", "task_retry"]);

/** A task as every status route and snapshot shows it (term-executor's field names). */
export function taskCompleteData(result: TrialResult): Record<string, unknown> {
  return {
    task_id: result.taskId,
    status: "completed",
    outcome: result.status,
    passed: result.status === "passed",
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
