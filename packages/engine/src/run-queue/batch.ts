import type { EventBus } from "@proctor/events";
import { trialCostUsd } from "@proctor/reward";
import { isCleanPass, type ProctorEvent, type RunSummary, type TrialResult, type TrialStatus } from "@proctor/schema";
import type { BatchRecord } from "./store";

export type BatchStatus = "queued" | "running" | "completed" | "failed" | "cancelled";
export type FinalBatchStatus = Exclude<BatchStatus, "queued" | "running">;

/** A task's live state. */
export interface TaskState {
  taskId: string;
  status: "pending" | "running" | "completed";
  /** The phase running now (while running). */
  phase: string | null;
  outcome: TrialStatus | null;
  reward: number | null;
  /** `<kind>: <message>` of a trial that ended with an error. */
  error: string | null;
  durationMs: number | null;
}

/**
 * What a batch's listeners are told: each engine event (with the batch's seq, which keeps
 * increasing across resumes; `run_finished` is not passed on), then once `finished` with the
 * status the queue decided (a shutdown is not a finish: the batch resumes on the next start).
 */
export type BatchUpdate =
  | { type: "event"; event: ProctorEvent }
  | { type: "finished"; seq: number; ts: string; status: FinalBatchStatus; summary: RunSummary | null; error: string | null };

export type BatchListener = (update: BatchUpdate) => void;

/** One batch of a RunQueue: its record on disk, its live state, and (while running) the engine's handle. */
export class QueuedBatch {
  status: BatchStatus;
  readonly tasks = new Map<string, TaskState>();
  completed = 0;
  passed = 0;
  failed = 0;
  rewardSum = 0;
  /** USD the completed tasks cost (model tokens + compute), over those with a price. */
  costUsd = 0;
  /** Completed tasks whose model usage has no price (their cost is not in costUsd). */
  unpricedTasks = 0;
  /** Seq of the last event this state reflects; null until known (restored batches read it lazily). */
  seq: number | null = 0;
  /**
   * Added to the running engine's seq to get the batch seq: a resumed run may number its events
   * from 1 again, while a batch's seq keeps increasing across runs.
   */
  seqOffset = 0;
  startedAtMs: number | null = null;
  durationMs: number | null = null;
  error: string | null;
  /** The running engine's event bus (null when not running). */
  bus: EventBus | null = null;
  /** Trial ids running now. */
  readonly running = new Set<string>();
  /** @internal RunQueue's bookkeeping. */
  abort: AbortController | null = null;
  /** @internal */
  done: Promise<void> | null = null;
  /** @internal */
  cancelRequested = false;
  private readonly listeners = new Set<BatchListener>();

  constructor(
    readonly dir: string,
    public record: BatchRecord,
    status: BatchStatus,
  ) {
    this.status = status;
    this.error = record.error;
    for (const taskId of record.taskIds) {
      this.tasks.set(taskId, { taskId, status: "pending", phase: null, outcome: null, reward: null, error: null, durationMs: null });
    }
  }

  get id(): string {
    return this.record.batchId;
  }

  get finished(): boolean {
    return this.status === "completed" || this.status === "failed" || this.status === "cancelled";
  }

  /** Mean reward over completed tasks (an errored task scores 0); 0 before any completed. */
  get meanReward(): number {
    return this.completed === 0 ? 0 : this.rewardSum / this.completed;
  }

  /** Listen to this batch's updates; returns the unsubscribe function. */
  subscribe(listener: BatchListener): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** @internal Count a finished trial once, whatever order results arrive in. */
  applyResult(result: TrialResult): void {
    const task = this.tasks.get(result.taskId);
    if (!task) return;
    if (task.status !== "completed") {
      this.completed += 1;
      // A pass flagged for audit is not a pass a validator may pay for.
      if (isCleanPass(result)) this.passed += 1;
      else this.failed += 1;
      this.rewardSum += result.reward ?? 0;
      const cost = trialCostUsd(result);
      if (cost === null) this.unpricedTasks += 1;
      else this.costUsd += cost;
    }
    Object.assign(task, {
      status: "completed",
      phase: null,
      outcome: result.status,
      reward: result.reward ?? 0,
      error: result.error === null ? null : `${result.error.kind}: ${result.error.message}`,
      durationMs: Math.round(result.durationMs),
    } satisfies Partial<TaskState>);
  }

  /** @internal */
  notify(update: BatchUpdate): void {
    for (const listener of this.listeners) listener(update);
  }
}
