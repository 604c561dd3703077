import { randomUUID } from "node:crypto";
import { access, mkdir, readdir, rm } from "node:fs/promises";
import { join } from "node:path";
import { silentLogger, TrialResult } from "@proctor/schema";
import type { Logger, ProctorEvent, RunSummary } from "@proctor/schema";
import { EngineError } from "../errors";
import { trialIdOf } from "../ids";
import { startRun, type RunHandle, type RunOptions } from "../run";
import { writeJsonAtomic } from "../store";
import { QueuedBatch, type BatchStatus, type FinalBatchStatus } from "./batch";
import { BATCH_FILES, BatchRecord, forEachJsonLine, readJsonFile, scanEvents } from "./store";

/** A queued batch runs each task once: its trial ids are `trialIdOf(taskId, 1)`. */
const BATCH_ATTEMPT = 1;
const RETENTION_SWEEP_MS = 60 * 60 * 1000;

/** What a batch runs, built when it starts (also after a restart) by `RunQueueOptions.prepare`. */
export type PreparedRun = Omit<RunOptions, "runId" | "runDir" | "resume" | "signal" | "logger" | "concurrency" | "attempts">;

/** Told about what a RunQueue does (metrics, receipts); none of these may throw. */
export interface RunQueueObserver {
  /** Each engine event of a running batch, with the batch's seq. */
  event?(batch: QueuedBatch, event: ProctorEvent): void;
  /** Awaited before a batch's final status becomes visible (e.g. to sign a receipt that must exist by then). */
  finishing?(batch: QueuedBatch, status: FinalBatchStatus): Promise<void>;
  finished?(batch: QueuedBatch, status: FinalBatchStatus): void;
}

export interface RunQueueOptions {
  /** Holds one directory per batch, `<root>/<batchId>/`, which is the engine's run directory. */
  root: string;
  /** Batches running at once. */
  maxActive: number;
  /** Batches waiting beyond the active ones; submitting more throws QueueFullError. */
  maxQueued: number;
  /** Finished batches older than this many days are deleted (on start, then hourly); null keeps them. */
  retentionDays: number | null;
  /**
   * Load what a batch runs (tasks, agent, runtime, limits) from its directory; called each time it
   * starts. Long work here (an image build) should stop when `batch.abort.signal` aborts.
   */
  prepare: (batch: QueuedBatch) => Promise<PreparedRun>;
  /**
   * How a batch's trials execute; default: the engine's `startRun`, in this process. This is the
   * seam for multi-machine runs (`proctor serve --queue`): pass a function that calls `startRun`
   * with a dispatcher option, so trials go to workers while the run dir, events, results and
   * this queue's bookkeeping stay exactly the same.
   */
  startRun?: (options: RunOptions) => RunHandle;
  observer?: RunQueueObserver;
  logger?: Logger;
}

/** submit() while the queue is full (maxActive running and maxQueued waiting). */
export class QueueFullError extends EngineError {
  override name = "QueueFullError";
}

/** submit() after close(). */
export class QueueClosedError extends EngineError {
  override name = "QueueClosedError";
}

/** cancel() of a batch that already ended. */
export class BatchFinishedError extends EngineError {
  override name = "BatchFinishedError";
}

/**
 * Batches of trials on the engine, one run directory each: queues them (max active, queue cap),
 * runs them with `startRun`, keeps their live state and event offsets (a batch's seq keeps
 * increasing across resumes), rebuilds everything from disk on start and resumes what a
 * shutdown or crash interrupted, and deletes finished batches past their retention. The server
 * (and `proctor serve --queue`) put routes in front of it.
 */
export class RunQueue {
  private readonly batches = new Map<string, QueuedBatch>();
  private readonly queue: QueuedBatch[] = [];
  private readonly active = new Set<QueuedBatch>();
  private reserved = 0;
  private closing = false;
  private retentionTimer: NodeJS.Timeout | null = null;
  private readonly logger: Logger;
  private readonly startRun: (options: RunOptions) => RunHandle;

  constructor(private readonly options: RunQueueOptions) {
    for (const [name, value, min] of [["maxActive", options.maxActive, 1], ["maxQueued", options.maxQueued, 0]] as const) {
      if (!Number.isInteger(value) || value < min) throw new EngineError(`RunQueue: ${name} must be a whole number >= ${min}, got ${value}`);
    }
    this.logger = options.logger ?? silentLogger;
    this.startRun = options.startRun ?? startRun;
  }

  get root(): string {
    return this.options.root;
  }

  /** Rebuild state from the batch directories, delete expired ones, and start what was interrupted. */
  async start(): Promise<void> {
    await mkdir(this.root, { recursive: true });
    await this.sweepRetention();
    const restored: QueuedBatch[] = [];
    for (const entry of await readdir(this.root, { withFileTypes: true })) {
      if (!entry.isDirectory()) continue;
      const batch = await this.restore(join(this.root, entry.name));
      if (batch) restored.push(batch);
    }
    restored.sort((a, b) => a.record.createdAt.localeCompare(b.record.createdAt));
    for (const batch of restored) {
      this.batches.set(batch.id, batch);
      if (batch.status === "queued") this.queue.push(batch);
    }
    if (this.queue.length > 0) this.logger.info("resuming interrupted batches", { batches: this.queue.map((b) => b.id) });
    this.pump();
    this.retentionTimer = setInterval(() => {
      this.sweepRetention().catch((error: unknown) => this.logger.error("retention sweep failed", { error: String(error) }));
    }, RETENTION_SWEEP_MS);
    this.retentionTimer.unref();
  }

  find(batchId: string): QueuedBatch | undefined {
    return this.batches.get(batchId);
  }

  /** Every batch, newest first. */
  list(): QueuedBatch[] {
    return [...this.batches.values()].sort((a, b) => b.record.createdAt.localeCompare(a.record.createdAt));
  }

  /** 1-based place in the queue of a waiting batch; null when it is not waiting. */
  queuePosition(batch: QueuedBatch): number | null {
    const index = this.queue.indexOf(batch);
    return index < 0 ? null : index + 1;
  }

  counts(): { active: number; queued: number; total: number; completed: number; failed: number; cancelled: number; tasksPassed: number; tasksFailed: number; runningTrials: number } {
    const counts = { active: this.active.size, queued: this.queue.length, total: this.batches.size, completed: 0, failed: 0, cancelled: 0, tasksPassed: 0, tasksFailed: 0, runningTrials: 0 };
    for (const batch of this.batches.values()) {
      if (batch.status === "completed") counts.completed += 1;
      if (batch.status === "failed") counts.failed += 1;
      if (batch.status === "cancelled") counts.cancelled += 1;
      counts.tasksPassed += batch.passed;
      counts.tasksFailed += batch.failed;
      counts.runningTrials += batch.running.size;
    }
    return counts;
  }

  /**
   * Accept a batch: reserve a place (QueueFullError / QueueClosedError otherwise), create its
   * directory, let `fill` put its inputs there and name its tasks, write batch.json and queue it.
   * If `fill` throws, nothing is left on disk and the error is rethrown.
   */
  async submit(input: {
    concurrentTasks: number;
    submittedBy: string | null;
    fill: (dir: string) => Promise<{ taskIds: string[]; extra?: Record<string, unknown> }>;
  }): Promise<QueuedBatch> {
    if (this.closing) throw new QueueClosedError("the queue is shutting down; submit again once it is back");
    const capacity = this.options.maxActive + this.options.maxQueued;
    if (this.active.size + this.queue.length + this.reserved >= capacity) {
      throw new QueueFullError(
        `the batch queue is full (${this.active.size} running, ${this.queue.length} queued, limit ${this.options.maxQueued} queued); retry when a batch finishes`,
      );
    }
    this.reserved += 1;
    const batchId = randomUUID();
    const dir = join(this.root, batchId);
    try {
      await mkdir(dir);
      const filled = await input.fill(dir);
      const record: BatchRecord = {
        ...filled.extra,
        version: 1,
        batchId,
        createdAt: new Date().toISOString(),
        concurrentTasks: input.concurrentTasks,
        submittedBy: input.submittedBy,
        taskIds: filled.taskIds,
        cancelledAt: null,
        error: null,
        finishedAt: null,
      };
      await writeJsonAtomic(join(dir, BATCH_FILES.record), record);
      const batch = new QueuedBatch(dir, record, "queued");
      this.batches.set(batchId, batch);
      this.queue.push(batch);
      this.logger.info("batch accepted", { batchId, tasks: record.taskIds.length, concurrentTasks: input.concurrentTasks, submittedBy: input.submittedBy });
      return batch;
    } catch (error) {
      await rm(dir, { recursive: true, force: true });
      throw error;
    } finally {
      this.reserved -= 1;
      this.pump();
    }
  }

  /** Stop a queued or running batch. Finished trials are kept; the batch is never resumed. */
  async cancel(batch: QueuedBatch): Promise<void> {
    if (batch.finished) throw new BatchFinishedError(`batch ${batch.id} already ${batch.status}; only queued or running batches can be cancelled`);
    batch.cancelRequested = true;
    batch.record = { ...batch.record, cancelledAt: new Date().toISOString() };
    await writeJsonAtomic(join(batch.dir, BATCH_FILES.record), batch.record);
    const queued = this.queue.indexOf(batch);
    if (queued >= 0) {
      this.queue.splice(queued, 1);
      await this.finalize(batch, "cancelled", null, null);
    } else {
      batch.abort?.abort(new Error("batch cancelled by request"));
      await batch.done;
    }
  }

  /** Stop taking batches, abort running ones (their finished trials stay; they resume on the next start). */
  async close(graceMs: number): Promise<void> {
    this.closing = true;
    if (this.retentionTimer) clearInterval(this.retentionTimer);
    const running = [...this.active];
    for (const batch of running) batch.abort?.abort(new Error("shutting down"));
    const all = Promise.all(running.map((b) => b.done));
    let timer: NodeJS.Timeout | undefined;
    const timedOut = await Promise.race([
      all.then(() => false),
      new Promise<boolean>((resolve) => {
        timer = setTimeout(() => resolve(true), graceMs);
      }),
    ]);
    clearTimeout(timer);
    if (timedOut) this.logger.error("batches did not stop within the shutdown grace period", { graceMs, batches: running.map((b) => b.id) });
  }

  /** The stored result of a completed task (trials/<trialId>/result.json); null when absent or unreadable. */
  async trialResult(batch: QueuedBatch, taskId: string): Promise<TrialResult | null> {
    const raw = await readJsonFile(join(batch.dir, BATCH_FILES.trials, trialIdOf(taskId, BATCH_ATTEMPT), "result.json")).catch(() => null);
    const parsed = TrialResult.safeParse(raw);
    return parsed.success ? parsed.data : null;
  }

  /**
   * A batch's events with seq > afterSeq, oldest first, with batch seqs: from the live bus when it
   * still holds them, else from events.jsonl (then topped up from the bus, which may be ahead of the file).
   */
  async replay(batch: QueuedBatch, afterSeq: number): Promise<ProctorEvent[]> {
    const out: ProctorEvent[] = [];
    let last = afterSeq;
    const push = (event: ProctorEvent) => {
      if (event.seq <= last) return;
      last = event.seq;
      out.push(event);
    };
    const bus = batch.bus;
    const offset = batch.seqOffset;
    const busCovers = bus !== null && afterSeq >= offset && bus.oldestSeq !== null && bus.oldestSeq + offset <= afterSeq + 1;
    if (!busCovers) await scanEvents(join(batch.dir, BATCH_FILES.events), push);
    if (bus) for (const event of bus.history(Math.max(0, last - offset))) push({ ...event, seq: event.seq + offset });
    return out;
  }

  /** For restored batches: read the last seq from events.jsonl once. */
  async ensureSeq(batch: QueuedBatch): Promise<void> {
    if (batch.seq !== null) return;
    let seq = 0;
    await scanEvents(join(batch.dir, BATCH_FILES.events), (event) => {
      seq = event.seq;
    });
    batch.seq ??= seq;
  }

  private async restore(dir: string): Promise<QueuedBatch | null> {
    const raw = await readJsonFile(join(dir, BATCH_FILES.record)).catch((error: unknown) => {
      this.logger.error("unreadable batch record; leaving the directory alone", { dir, error: String(error) });
      return undefined;
    });
    if (raw === undefined) return null;
    if (raw === null) {
      // Never acknowledged: the process died between creating the directory and writing batch.json.
      await rm(dir, { recursive: true, force: true });
      return null;
    }
    const parsed = BatchRecord.safeParse(raw);
    if (!parsed.success) {
      this.logger.error("invalid batch.json; leaving the directory alone", { dir, issues: parsed.error.message });
      return null;
    }
    const summary = (await readJsonFile(join(dir, BATCH_FILES.summary)).catch(() => null)) as RunSummary | null;
    const record = parsed.data;
    let status: BatchStatus = "queued";
    if (record.cancelledAt !== null) status = "cancelled";
    else if (record.error !== null) status = "failed";
    else if (summary?.status === "completed" || summary?.status === "budget_exhausted") status = "completed";
    else if (summary?.status === "failed") status = "failed";
    const batch = new QueuedBatch(dir, record, status);
    batch.seq = null;
    await forEachJsonLine(join(dir, BATCH_FILES.results), (line) => {
      const result = TrialResult.safeParse(line);
      if (result.success) batch.applyResult(result.data);
    });
    if (summary) {
      batch.startedAtMs = Date.parse(summary.startedAt);
      if (batch.finished) batch.durationMs = summary.durationMs;
    }
    return batch;
  }

  private pump(): void {
    while (!this.closing && this.active.size < this.options.maxActive && this.queue.length > 0) {
      const batch = this.queue.shift();
      if (!batch) break;
      this.active.add(batch);
      batch.done = this.run(batch).catch((error: unknown) => {
        this.logger.error("batch bookkeeping failed", { batchId: batch.id, error: String(error) });
      });
    }
  }

  private async run(batch: QueuedBatch): Promise<void> {
    batch.status = "running";
    batch.startedAtMs ??= Date.now();
    await this.ensureSeq(batch);
    const controller = new AbortController();
    batch.abort = controller;
    let runFinished: ProctorEvent | null = null;
    let unsubscribe: (() => void) | null = null;
    try {
      const prepared = await this.options.prepare(batch);
      const handle = this.startRun({
        ...prepared,
        runId: batch.id,
        runDir: batch.dir,
        concurrency: batch.record.concurrentTasks,
        attempts: BATCH_ATTEMPT,
        resume: await exists(join(batch.dir, BATCH_FILES.runConfig)),
        signal: controller.signal,
        logger: this.logger,
      });
      const base = batch.seq ?? 0;
      let offset: number | null = null;
      unsubscribe = handle.bus.subscribe(
        (raw) => {
          if (offset === null) {
            offset = raw.seq <= base ? base - raw.seq + 1 : 0;
            batch.seqOffset = offset;
            batch.bus = handle.bus;
          }
          const event = { ...raw, seq: raw.seq + offset };
          if (event.type === "run_finished") runFinished = event;
          this.onEngineEvent(batch, event);
        },
        // Everything this run emits (startRun emits nothing before returning; a resumed run's bus starts at the old last seq).
        { since: handle.bus.lastSeq },
      );
      const summary = await handle.done;
      let status: FinalBatchStatus | null;
      // A batch whose budget was spent is finished: the trials it did not start are not run (never failures).
      if (summary.status === "completed" || summary.status === "budget_exhausted") status = "completed";
      else if (summary.status === "failed") status = "failed";
      else status = batch.cancelRequested ? "cancelled" : null;
      if (status === null) {
        // Interrupted by shutdown: it stays resumable on disk; nothing to announce.
        batch.status = "queued";
        return;
      }
      // (A spent budget is no error: the batch's summary.json says which budget and how many tasks did not run.)
      await this.finalize(batch, status, summary, runFinished, summary.status === "failed" ? "the engine reported the run as failed" : null);
    } catch (error) {
      if (this.closing && controller.signal.aborted && !batch.cancelRequested) {
        // Shutdown interrupted prepare() (e.g. an image build): the batch resumes on the next start.
        batch.status = "queued";
        return;
      }
      const message = error instanceof Error ? error.message : String(error);
      this.logger.error("batch failed", { batchId: batch.id, error: message });
      await this.finalize(batch, batch.cancelRequested ? "cancelled" : "failed", null, runFinished, message);
    } finally {
      unsubscribe?.();
      batch.bus = null;
      batch.abort = null;
      batch.running.clear();
      this.active.delete(batch);
      this.pump();
    }
  }

  private onEngineEvent(batch: QueuedBatch, event: ProctorEvent): void {
    if (batch.seq !== null && event.seq <= batch.seq) return;
    batch.seq = event.seq;
    switch (event.type) {
      case "trial_started": {
        const task = batch.tasks.get(event.taskId);
        if (task) Object.assign(task, { status: "running", phase: null });
        batch.running.add(event.trialId);
        break;
      }
      case "trial_phase": {
        const task = batch.tasks.get(event.taskId);
        if (task && event.data.status === "started") task.phase = event.data.phase;
        break;
      }
      case "trial_finished":
        batch.applyResult(event.data);
        batch.running.delete(event.trialId);
        break;
      default:
        break;
    }
    this.options.observer?.event?.(batch, event);
    // The finish is announced by finalize(), once the batch's own status is decided.
    if (event.type !== "run_finished") batch.notify({ type: "event", event });
  }

  private async finalize(batch: QueuedBatch, status: FinalBatchStatus, summary: RunSummary | null, runFinished: ProctorEvent | null, error: string | null = null): Promise<void> {
    await this.options.observer?.finishing?.(batch, status);
    batch.status = status;
    batch.error = error;
    batch.durationMs = summary?.durationMs ?? (batch.startedAtMs === null ? 0 : Date.now() - batch.startedAtMs);
    batch.record = { ...batch.record, error, finishedAt: new Date().toISOString() };
    await writeJsonAtomic(join(batch.dir, BATCH_FILES.record), batch.record);
    this.options.observer?.finished?.(batch, status);
    const seq = runFinished?.seq ?? (batch.seq ?? 0) + 1;
    batch.seq = seq;
    batch.notify({ type: "finished", seq, ts: new Date().toISOString(), status, summary, error });
    this.logger.info("batch finished", { batchId: batch.id, status, passed: batch.passed, failed: batch.failed });
  }

  private async sweepRetention(): Promise<void> {
    const days = this.options.retentionDays;
    if (days === null) return;
    const cutoff = Date.now() - days * 24 * 60 * 60 * 1000;
    let entries: string[];
    try {
      entries = await readdir(this.root);
    } catch {
      return;
    }
    for (const name of entries) {
      const dir = join(this.root, name);
      const live = this.batches.get(name);
      if (live && !live.finished) continue;
      const raw = await readJsonFile(join(dir, BATCH_FILES.record)).catch(() => null);
      const record = BatchRecord.safeParse(raw);
      if (!record.success || record.data.finishedAt === null) continue;
      if (Date.parse(record.data.finishedAt) >= cutoff) continue;
      await rm(dir, { recursive: true, force: true });
      this.batches.delete(name);
      this.logger.info("deleted expired batch", { batchId: name, finishedAt: record.data.finishedAt });
    }
  }
}

async function exists(path: string): Promise<boolean> {
  try {
    await access(path);
    return true;
  } catch {
    return false;
  }
}
