import { randomUUID } from "node:crypto";
import { access, mkdir, readdir, rm, stat } from "node:fs/promises";
import { join, relative } from "node:path";
import type { Readable } from "node:stream";
import { ArchiveError, LimitExceededError, extractArchive } from "@proctor/archive";
import type { LimitName } from "@proctor/archive";
import { AgentConfigError, resolveEntrypoint } from "@proctor/agents";
import { startRun, trialIdOf, writeJsonAtomic, type RunLimits } from "@proctor/engine";
import type { EventBus } from "@proctor/events";
import type { SandboxRuntime } from "@proctor/sandbox";
import { TrialResult } from "@proctor/schema";
import type { Logger, ModelProxySpec, ProctorEvent, RunSummary, TrialStatus } from "@proctor/schema";
import { loadTermExecutorArchive } from "@proctor/tasks";
import type { TermExecutorArchive } from "@proctor/tasks";
import { BadRequestError, ConflictError, ForbiddenError, InvalidArchiveError, NotFoundError, PayloadTooLargeError, QueueFullError, UnavailableError } from "./errors";
import type { ServerMetrics } from "./metrics";
import type { BatchReceipts } from "./receipt";
import { BATCH_FILES, BatchRecord, batchesRoot, forEachJsonLine, readJsonFile, stagingDir } from "./store";
import type { StagedBody } from "./upload";
import { consumeArchivePart } from "./upload";
import { batchCompleteData, toWire } from "./wire";
import type { BatchStatus, WireEnvelope } from "./wire";

/** Server batches run each task once. */
const BATCH_ATTEMPT = 1;

/** The server's model proxy: upstream, the key's env var NAME, the models a batch may name (the first is the default). */
export interface ServerModelProxy {
  baseUrl: string;
  apiKeyEnv: string;
  models: string[];
  budgetTokens?: number;
  budgetRequests?: number;
  llmConcurrency?: number;
}

export interface BatchManagerOptions {
  dataDir: string;
  runtime: SandboxRuntime;
  defaultImage: string | null;
  maxActiveBatches: number;
  maxQueuedBatches: number;
  /** Upper bound of `?concurrent_tasks`; also the default when the query omits it. */
  maxConcurrentTasks: number;
  maxUploadBytes: number;
  /** Finished batches older than this many days are deleted (on start, then hourly); null keeps them. */
  retentionDays: number | null;
  /** Accept `repo:` paths on the server's own disk in workspace.yaml (tests, trusted users only). */
  allowLocalRepos: boolean;
  /** Overrides every task's verifier isolation when set (`--isolate-verifier` / `--no-isolate-verifier`). */
  isolateVerifier?: boolean;
  /** Resource limits for uploaded tasks: defaults, maxima, collected log bytes. */
  limits: RunLimits;
  /** Signs each finished batch's receipt (`--receipt-key`); null: no receipts. */
  receipts?: BatchReceipts | null;
  /** Gives every batch's agent a model through the per-trial model proxy (`--llm-proxy-base-url`); null: none. */
  modelProxy?: ServerModelProxy | null;
  logger: Logger;
  metrics: ServerMetrics;
}

/** A task's live state, as `/batch/:id/tasks` and snapshots show it. */
export interface TaskState {
  taskId: string;
  status: "pending" | "running" | "completed";
  /** The phase running now (while running). */
  phase: string | null;
  outcome: TrialStatus | null;
  reward: number | null;
  error: string | null;
  durationMs: number | null;
}

/** Called with each wire event of a batch; `json` is the envelope serialized once for every client. */
export type BatchListener = (envelope: WireEnvelope, json: string) => void;

/** What POST /submit answers. */
export interface SubmitResult {
  batch_id: string;
  total_tasks: number;
  concurrent_tasks: number;
  ws_url: string;
}

/** One batch: its record on disk, its live state, and (while running) the engine's handle. */
export class Batch {
  status: BatchStatus;
  readonly tasks = new Map<string, TaskState>();
  completed = 0;
  passed = 0;
  failed = 0;
  rewardSum = 0;
  /** Wire seq of the last event this state reflects; null until known (restored batches read it lazily). */
  seq: number | null = 0;
  /**
   * Added to the running engine's seq to get the wire seq: a resumed run may number its events
   * from 1 again, while a batch's wire seq keeps increasing across runs.
   */
  seqOffset = 0;
  startedAtMs: number | null = null;
  durationMs: number | null = null;
  error: string | null;
  bus: EventBus | null = null;
  abort: AbortController | null = null;
  done: Promise<void> | null = null;
  cancelRequested = false;
  readonly listeners = new Set<BatchListener>();
  readonly running = new Set<string>();
  private snapshotCache: { seq: number; status: BatchStatus; json: string } | null = null;

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

  applyResult(result: TrialResult): void {
    const task = this.tasks.get(result.taskId);
    if (!task) return;
    if (task.status !== "completed") {
      this.completed += 1;
      if (result.status === "passed") this.passed += 1;
      else this.failed += 1;
      this.rewardSum += result.reward ?? 0;
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

  /** GET /batch/:id */
  statusJson(queuePosition: number | null): Record<string, unknown> {
    const duration = this.durationMs ?? (this.startedAtMs === null ? null : Date.now() - this.startedAtMs);
    return {
      batch_id: this.id,
      status: this.status,
      total_tasks: this.tasks.size,
      completed_tasks: this.completed,
      passed_tasks: this.passed,
      failed_tasks: this.failed,
      aggregate_reward: this.completed === 0 ? 0 : this.rewardSum / this.completed,
      error: this.error,
      duration_ms: duration === null ? null : Math.round(duration),
      created_at: this.record.createdAt,
      finished_at: this.record.finishedAt,
      concurrent_tasks: this.record.concurrentTasks,
      submitted_by: this.record.submittedBy,
      ...(queuePosition === null ? {} : { queue_position: queuePosition }),
    };
  }

  taskJson(task: TaskState): Record<string, unknown> {
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

  /** The `snapshot` message (status + every task), serialized once per seq for all clients. */
  snapshot(): { seq: number; json: string } {
    const seq = this.seq ?? 0;
    // Task states only change with an event (a new seq); the batch status may change without one.
    if (this.snapshotCache?.seq === seq && this.snapshotCache.status === this.status) return this.snapshotCache;
    const envelope: WireEnvelope = {
      seq,
      event: "snapshot",
      batch_id: this.id,
      ts: new Date().toISOString(),
      data: { ...this.statusJson(null), tasks: [...this.tasks.values()].map((t) => this.taskJson(t)) },
    };
    this.snapshotCache = { seq, status: this.status, json: JSON.stringify(envelope) };
    return this.snapshotCache;
  }

  emit(envelope: WireEnvelope): void {
    if (this.listeners.size === 0) return;
    const json = JSON.stringify(envelope);
    for (const listener of this.listeners) listener(envelope, json);
  }
}

const RESULTS_RETENTION_SWEEP_MS = 60 * 60 * 1000;
const SIZE_LIMITS: ReadonlySet<LimitName> = new Set(["maxCompressedBytes", "maxTotalBytes", "maxFileBytes"]);

/**
 * Owns every batch: accepts uploads, queues them (max active, queue cap), runs them on the
 * engine with the batch directory as the run directory, tracks live state for the routes and
 * the WebSocket hub, rebuilds state from disk on start and resumes interrupted batches.
 */
export class BatchManager {
  private readonly batches = new Map<string, Batch>();
  private readonly queue: Batch[] = [];
  private readonly active = new Set<Batch>();
  private reserved = 0;
  private closing = false;
  private retentionTimer: NodeJS.Timeout | null = null;
  readonly startedAtMs = Date.now();

  constructor(private readonly options: BatchManagerOptions) {}

  get root(): string {
    return batchesRoot(this.options.dataDir);
  }

  /** Rebuild state from the batch directories, delete expired ones, and start what was interrupted. */
  async start(): Promise<void> {
    await mkdir(this.root, { recursive: true });
    await this.sweepRetention();
    const restored: Batch[] = [];
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
    this.updateGauges();
    if (this.queue.length > 0) this.options.logger.info("resuming interrupted batches", { batches: this.queue.map((b) => b.id) });
    this.pump();
    this.retentionTimer = setInterval(() => {
      this.sweepRetention().catch((error: unknown) => this.options.logger.error("retention sweep failed", { error: String(error) }));
    }, RESULTS_RETENTION_SWEEP_MS);
    this.retentionTimer.unref();
  }

  get(batchId: string): Batch {
    const batch = this.batches.get(batchId);
    if (!batch) throw this.notFound(batchId);
    return batch;
  }

  /** The 404 for an unknown batch, also answered for a batch the caller may not see. */
  notFound(batchId: string): NotFoundError {
    return new NotFoundError(`no batch with id ${JSON.stringify(batchId)}; list batches with GET /batches`);
  }

  find(batchId: string): Batch | undefined {
    return this.batches.get(batchId);
  }

  list(): Batch[] {
    return [...this.batches.values()].sort((a, b) => b.record.createdAt.localeCompare(a.record.createdAt));
  }

  queuePosition(batch: Batch): number | null {
    const index = this.queue.indexOf(batch);
    return index < 0 ? null : index + 1;
  }

  counts(): { active: number; queued: number; total: number; completed: number; failed: number; cancelled: number; tasksPassed: number; tasksFailed: number } {
    let completed = 0;
    let failed = 0;
    let cancelled = 0;
    let tasksPassed = 0;
    let tasksFailed = 0;
    for (const batch of this.batches.values()) {
      if (batch.status === "completed") completed += 1;
      if (batch.status === "failed") failed += 1;
      if (batch.status === "cancelled") cancelled += 1;
      tasksPassed += batch.passed;
      tasksFailed += batch.failed;
    }
    return { active: this.active.size, queued: this.queue.length, total: this.batches.size, completed, failed, cancelled, tasksPassed, tasksFailed };
  }

  /**
   * Accept an upload whose signature already verified: extract the archive (with the archive
   * package's limits), load its tasks, write batch.json and queue it. On any error nothing is
   * left on disk.
   */
  async submit(input: { staged: StagedBody; contentType: string; concurrentTasks: number | undefined; submittedBy: string | null; model?: string | undefined }): Promise<SubmitResult> {
    if (this.closing) throw new UnavailableError("the server is shutting down; submit again once it is back");
    const model = this.pickModel(input.model);
    const capacity = this.options.maxActiveBatches + this.options.maxQueuedBatches;
    if (this.active.size + this.queue.length + this.reserved >= capacity) {
      throw new QueueFullError(
        `the batch queue is full (${this.active.size} running, ${this.queue.length} queued, limit ${this.options.maxQueuedBatches} queued); retry when a batch finishes`,
      );
    }
    const concurrentTasks = input.concurrentTasks ?? this.options.maxConcurrentTasks;
    this.reserved += 1;
    const batchId = randomUUID();
    const dir = join(this.root, batchId);
    try {
      await mkdir(dir);
      const uploadDir = join(dir, BATCH_FILES.upload);
      const archiveName = await consumeArchivePart(input.staged, input.contentType, async (stream: Readable, filename: string) => {
        await this.extract(stream, uploadDir);
        return filename || null;
      });
      const loaded = await this.load(uploadDir);
      this.checkLoaded(loaded, uploadDir);
      const record: BatchRecord = {
        version: 1,
        batchId,
        createdAt: new Date().toISOString(),
        concurrentTasks,
        submittedBy: input.submittedBy,
        archive: { name: archiveName, bytes: input.staged.bytes, sha256: input.staged.sha256 },
        taskIds: loaded.tasks.map((t) => t.id),
        cancelledAt: null,
        error: null,
        finishedAt: null,
        ...(model !== null ? { model } : {}),
      };
      await writeJsonAtomic(join(dir, BATCH_FILES.record), record);
      const batch = new Batch(dir, record, "queued");
      this.batches.set(batchId, batch);
      this.queue.push(batch);
      this.options.metrics.batchesSubmitted.inc();
      this.options.logger.info("batch accepted", { batchId, tasks: record.taskIds.length, concurrentTasks, submittedBy: input.submittedBy });
      return { batch_id: batchId, total_tasks: record.taskIds.length, concurrent_tasks: concurrentTasks, ws_url: `/ws?batch_id=${batchId}` };
    } catch (error) {
      await rm(dir, { recursive: true, force: true });
      throw error;
    } finally {
      this.reserved -= 1;
      this.updateGauges();
      this.pump();
    }
  }

  /** Stop a queued or running batch. Finished trials are kept; the batch is never resumed. */
  async cancel(batchId: string): Promise<Batch> {
    const batch = this.get(batchId);
    if (batch.finished) throw new ConflictError(`batch ${batchId} already ${batch.status}; only queued or running batches can be cancelled`);
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
    return batch;
  }

  /** Stop taking batches, abort running ones (their finished trials stay; they resume on the next start). */
  async close(graceMs: number): Promise<void> {
    this.closing = true;
    if (this.retentionTimer) clearInterval(this.retentionTimer);
    const running = [...this.active];
    for (const batch of running) batch.abort?.abort(new Error("server shutting down"));
    const all = Promise.all(running.map((b) => b.done));
    let timer: NodeJS.Timeout | undefined;
    const timedOut = await Promise.race([
      all.then(() => false),
      new Promise<boolean>((resolve) => {
        timer = setTimeout(() => resolve(true), graceMs);
      }),
    ]);
    clearTimeout(timer);
    if (timedOut) this.options.logger.error("batches did not stop within the shutdown grace period", { graceMs, batches: running.map((b) => b.id) });
  }

  /** A task's detail with per-check results, read from trials/<trialId>/result.json. */
  async taskDetail(batchId: string, taskId: string): Promise<Record<string, unknown>> {
    const batch = this.get(batchId);
    const task = batch.tasks.get(taskId);
    if (!task) throw new NotFoundError(`batch ${batchId} has no task ${JSON.stringify(taskId)}; list its tasks with GET /batch/${batchId}/tasks`);
    const base = batch.taskJson(task);
    if (task.status !== "completed") return { ...base, test_results: [], test_output: "", phases: [] };
    const raw = await readJsonFile(join(batch.dir, BATCH_FILES.trials, trialIdOf(taskId, BATCH_ATTEMPT), "result.json"));
    const parsed = TrialResult.safeParse(raw);
    if (!parsed.success) return { ...base, test_results: [], test_output: "", phases: [] };
    const checks = parsed.data.checks ?? [];
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
      phases: parsed.data.phases.map((p) => ({ phase: p.phase, duration_ms: Math.round(p.durationMs) })),
      agent: parsed.data.agent === null ? null : { exit_code: parsed.data.agent.exitCode, timed_out: parsed.data.agent.timedOut },
      started_at: parsed.data.startedAt,
      finished_at: parsed.data.finishedAt,
    };
  }

  /**
   * Wire events of a batch with seq > afterSeq, oldest first: from the live bus when it still
   * holds them, else from events.jsonl (then topped up from the bus, which may be ahead of the file).
   */
  async replay(batch: Batch, afterSeq: number): Promise<WireEnvelope[]> {
    const out: WireEnvelope[] = [];
    let last = afterSeq;
    const push = (event: ProctorEvent) => {
      if (event.seq <= last) return;
      last = event.seq;
      const wire = this.wireOf(batch, event, batch.bus === null);
      if (wire) out.push(wire);
    };
    const bus = batch.bus;
    const offset = batch.seqOffset;
    const busCovers = bus !== null && afterSeq >= offset && bus.oldestSeq !== null && bus.oldestSeq + offset <= afterSeq + 1;
    if (!busCovers) await scanEvents(join(batch.dir, BATCH_FILES.events), push);
    if (bus) for (const event of bus.history(Math.max(0, last - offset))) push({ ...event, seq: event.seq + offset });
    return out;
  }

  /** For restored batches: read the last seq from events.jsonl once. */
  async ensureSeq(batch: Batch): Promise<void> {
    if (batch.seq !== null) return;
    let seq = 0;
    await scanEvents(join(batch.dir, BATCH_FILES.events), (event) => {
      seq = event.seq;
    });
    batch.seq ??= seq;
  }

  private async extract(stream: Readable, destDir: string): Promise<void> {
    try {
      await extractArchive(stream, destDir, { maxCompressedBytes: this.options.maxUploadBytes }, { tempDir: stagingDir(this.options.dataDir), logger: this.options.logger });
    } catch (error) {
      if (error instanceof LimitExceededError && SIZE_LIMITS.has(error.limit)) throw new PayloadTooLargeError(error.message, { cause: error });
      if (error instanceof ArchiveError) throw new InvalidArchiveError(error.message, { cause: error });
      throw error;
    }
  }

  /** The model a new batch gets: `?model=` when the server allows it, else the server's default; null without a model proxy. */
  private pickModel(asked: string | undefined): string | null {
    const proxy = this.options.modelProxy;
    if (asked === undefined) return proxy?.models[0] ?? null;
    if (!proxy) throw new BadRequestError(`model: this server has no model proxy, so a batch cannot name a model; leave out ?model=`);
    if (!proxy.models.includes(asked)) throw new ForbiddenError(`model: ${JSON.stringify(asked.slice(0, 200))} is not allowed on this server; allowed: ${proxy.models.join(", ")}`);
    return asked;
  }

  private modelProxySpec(record: BatchRecord): { modelProxy?: ModelProxySpec } {
    const proxy = this.options.modelProxy;
    const model = record.model ?? proxy?.models[0];
    if (!proxy || !model) return {};
    const { models: _models, ...rest } = proxy;
    return { modelProxy: { ...rest, model } };
  }

  /** Refuse an archive whose tasks do not load or that has no usable agent_code/; returns the agent directory. */
  private checkLoaded(loaded: TermExecutorArchive, uploadDir: string): string {
    if (loaded.errors.length > 0) {
      // Name files inside the archive, not where the server keeps it.
      const inArchive = (message: string) => message.split(`${uploadDir}/`).join("").split(relative(process.cwd(), uploadDir) + "/").join("");
      const shown = loaded.errors.slice(0, 5).map((e) => inArchive(e.message)).join("; ");
      throw new InvalidArchiveError(`the archive holds ${loaded.errors.length} invalid task(s): ${shown}; fix them and upload again`);
    }
    if (loaded.tasks.length === 0) throw new InvalidArchiveError("the archive holds no tasks: put each task in tasks/<id>/ (at the root or one directory down)");
    if (loaded.agentDir === null) throw new InvalidArchiveError("the archive holds no agent_code/ directory beside tasks/; add the agent's code there");
    try {
      resolveEntrypoint(loaded.agentDir);
    } catch (error) {
      if (!(error instanceof AgentConfigError)) throw error;
      throw new InvalidArchiveError(`agent_code/: ${error.message.split(`${uploadDir}/`).join("")}`, { cause: error });
    }
    return loaded.agentDir;
  }

  private load(uploadDir: string): Promise<TermExecutorArchive> {
    return loadTermExecutorArchive(uploadDir, { allowLocalRepos: this.options.allowLocalRepos, logger: this.options.logger });
  }

  private async restore(dir: string): Promise<Batch | null> {
    const raw = await readJsonFile(join(dir, BATCH_FILES.record)).catch((error: unknown) => {
      this.options.logger.error("unreadable batch record; leaving the directory alone", { dir, error: String(error) });
      return undefined;
    });
    if (raw === undefined) return null;
    if (raw === null) {
      // Never acknowledged: the server died between creating the directory and writing batch.json.
      await rm(dir, { recursive: true, force: true });
      return null;
    }
    const parsed = BatchRecord.safeParse(raw);
    if (!parsed.success) {
      this.options.logger.error("invalid batch.json; leaving the directory alone", { dir, issues: parsed.error.message });
      return null;
    }
    const summaryRaw = await readJsonFile(join(dir, BATCH_FILES.summary)).catch(() => null);
    const summary = summaryRaw as RunSummary | null;
    const record = parsed.data;
    let status: BatchStatus = "queued";
    if (record.cancelledAt !== null) status = "cancelled";
    else if (record.error !== null) status = "failed";
    else if (summary?.status === "completed") status = "completed";
    else if (summary?.status === "failed") status = "failed";
    const batch = new Batch(dir, record, status);
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
    while (!this.closing && this.active.size < this.options.maxActiveBatches && this.queue.length > 0) {
      const batch = this.queue.shift();
      if (!batch) break;
      this.active.add(batch);
      batch.done = this.run(batch).catch((error: unknown) => {
        this.options.logger.error("batch bookkeeping failed", { batchId: batch.id, error: String(error) });
      });
    }
    this.updateGauges();
  }

  private async run(batch: Batch): Promise<void> {
    batch.status = "running";
    batch.startedAtMs ??= Date.now();
    await this.ensureSeq(batch);
    const controller = new AbortController();
    batch.abort = controller;
    let runFinished: ProctorEvent | null = null;
    let unsubscribe: (() => void) | null = null;
    try {
      const uploadDir = join(batch.dir, BATCH_FILES.upload);
      const loaded = await this.load(uploadDir);
      const agentDir = this.checkLoaded(loaded, uploadDir);
      const resume = await exists(join(batch.dir, BATCH_FILES.runConfig));
      const handle = startRun({
        runId: batch.id,
        runDir: batch.dir,
        tasks: loaded.tasks,
        agent: { kind: "code", dir: agentDir, ...this.modelProxySpec(batch.record) },
        runtime: this.options.runtime,
        concurrency: batch.record.concurrentTasks,
        attempts: BATCH_ATTEMPT,
        defaultImage: this.options.defaultImage,
        ...(this.options.isolateVerifier !== undefined ? { isolateVerifier: this.options.isolateVerifier } : {}),
        limits: this.options.limits,
        resume,
        sources: [uploadDir],
        signal: controller.signal,
        logger: this.options.logger,
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
      let status: BatchStatus | null;
      if (summary.status === "completed") status = "completed";
      else if (summary.status === "failed") status = "failed";
      else status = batch.cancelRequested ? "cancelled" : null;
      if (status === null) {
        // Interrupted by shutdown: it stays resumable on disk; nothing to announce.
        batch.status = "queued";
        return;
      }
      await this.finalize(batch, status, summary, runFinished, summary.status === "failed" ? "the engine reported the run as failed" : null);
    } catch (error) {
      const message = error instanceof Error ? error.message : String(error);
      this.options.logger.error("batch failed", { batchId: batch.id, error: message });
      await this.finalize(batch, batch.cancelRequested ? "cancelled" : "failed", null, runFinished, message);
    } finally {
      unsubscribe?.();
      batch.bus = null;
      batch.abort = null;
      for (const _ of batch.running) this.options.metrics.activeTrials.dec();
      batch.running.clear();
      this.active.delete(batch);
      this.pump();
    }
  }

  private onEngineEvent(batch: Batch, event: ProctorEvent): void {
    if (batch.seq !== null && event.seq <= batch.seq) return;
    batch.seq = event.seq;
    const metrics = this.options.metrics;
    switch (event.type) {
      case "trial_started": {
        const task = batch.tasks.get(event.taskId);
        if (task) Object.assign(task, { status: "running", phase: null });
        if (!batch.running.has(event.trialId)) {
          batch.running.add(event.trialId);
          metrics.activeTrials.inc();
        }
        break;
      }
      case "trial_phase": {
        const task = batch.tasks.get(event.taskId);
        if (task && event.data.status === "started") task.phase = event.data.phase;
        break;
      }
      case "trial_finished": {
        batch.applyResult(event.data);
        if (batch.running.delete(event.trialId)) metrics.activeTrials.dec();
        metrics.trialsFinished.inc({ outcome: event.data.status });
        metrics.trialDuration.observe({ outcome: event.data.status }, event.data.durationMs / 1000);
        for (const phase of event.data.phases) metrics.phaseDuration.observe({ phase: phase.phase }, phase.durationMs / 1000);
        break;
      }
      default:
        break;
    }
    // batch_complete is sent by finalize(), once the batch's own status is decided.
    if (event.type === "run_finished") return;
    const wire = this.wireOf(batch, event, false);
    if (wire) batch.emit(wire);
  }

  private wireOf(batch: Batch, event: ProctorEvent, historic: boolean): WireEnvelope | null {
    return toWire(batch.id, event, (summary) => {
      if (summary.status === "completed") return "completed";
      if (summary.status === "failed") return "failed";
      // An interrupted run in history is a shutdown (resumed later) unless the batch was cancelled.
      return historic && batch.status === "cancelled" ? "cancelled" : null;
    });
  }

  private async finalize(batch: Batch, status: BatchStatus, summary: RunSummary | null, runFinished: ProctorEvent | null, error: string | null = null): Promise<void> {
    // Signed before the status flips, so whoever sees the batch finished finds its receipt.
    await this.options.receipts?.write(batch, status);
    batch.status = status;
    batch.error = error;
    batch.durationMs = summary?.durationMs ?? (batch.startedAtMs === null ? 0 : Date.now() - batch.startedAtMs);
    batch.record = { ...batch.record, error, finishedAt: new Date().toISOString() };
    await writeJsonAtomic(join(batch.dir, BATCH_FILES.record), batch.record);
    this.options.metrics.batchesFinished.inc({ outcome: status });
    const seq = runFinished?.seq ?? (batch.seq ?? 0) + 1;
    batch.seq = seq;
    const data = summary
      ? batchCompleteData(summary, status)
      : { status, total: batch.tasks.size, completed: batch.completed, passed: batch.passed, failed: batch.failed, reward: batch.completed === 0 ? 0 : batch.rewardSum / batch.completed, duration_ms: Math.round(batch.durationMs) };
    batch.emit({ seq, event: "batch_complete", batch_id: batch.id, ts: new Date().toISOString(), data: { ...data, error } });
    this.options.logger.info("batch finished", { batchId: batch.id, status, passed: batch.passed, failed: batch.failed });
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
      this.options.logger.info("deleted expired batch", { batchId: name, finishedAt: record.data.finishedAt });
    }
  }

  private updateGauges(): void {
    this.options.metrics.activeBatches.set(this.active.size);
    this.options.metrics.queuedBatches.set(this.queue.length);
  }
}


/**
 * Stream events.jsonl, giving each event its wire seq: a resumed run that numbered its events
 * from 1 again continues after the previous run's last seq.
 */
async function scanEvents(path: string, onEvent: (event: ProctorEvent) => void): Promise<void> {
  let offset = 0;
  let lastRaw = 0;
  await forEachJsonLine(path, (line) => {
    const event = line as ProctorEvent;
    if (typeof event.seq !== "number") return;
    if (event.seq <= lastRaw) offset += lastRaw;
    lastRaw = event.seq;
    onEvent({ ...event, seq: event.seq + offset });
  });
}

async function exists(path: string): Promise<boolean> {
  try {
    await access(path);
    return true;
  } catch {
    return false;
  }
}

export async function dirExists(path: string): Promise<boolean> {
  try {
    return (await stat(path)).isDirectory();
  } catch {
    return false;
  }
}
