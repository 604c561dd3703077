import { mkdir } from "node:fs/promises";
import { join } from "node:path";
import { Readable } from "node:stream";
import { extractArchive } from "@proctor/archive";
import type { DispatchContext, TrialDispatch } from "@proctor/engine";
import { removeTreeWithoutStat } from "@proctor/sandbox";
import { silentLogger, TrialResult, type EventBody, type Logger, type TaskSpec } from "@proctor/schema";
import { Queue, QueueEvents } from "bullmq";
import type { Redis } from "ioredis";
import { bundleTask, packBundle, type BundleRef, type BundleSource, type DirBundleStore } from "./bundles";
import { connect, KEY_PREFIX, parseQueueUrl, bullConnection, TRIAL_QUEUE, watchConnection, type Outage, type QueueTarget } from "./connection";
import { DispatchError } from "./errors";
import { jobIdOf, keys, type RunContext, type TaskRecord, type TrialJob } from "./protocol";
import { publishSpec } from "./specs";
import { listWorkers } from "./registry";
import { isTrialFileList, writeTrialFiles } from "./trial-files";

export interface WaitingNotice {
  /** Trials handed to the queue and not finished. */
  queued: number;
  /** How long no worker has been alive while trials waited. */
  waitingMs: number;
  /** The queue URL without credentials. */
  queue: string;
}

export interface QueueDispatcherOptions {
  /** `redis://HOST:PORT/DB`. */
  url: string;
  /**
   * Where bundles are published, and how workers reach them (the same directory shared, or a
   * server's URL; a function when the URL is known only once the server listens).
   */
  bundles: { store: DirBundleStore; source: BundleSource | (() => BundleSource) };
  logger?: Logger;
  /** Key prefix in Redis; default "proctor" (workers must use the same). */
  prefix?: string;
  /** Runs of a trial BullMQ may make for infra errors (bundle fetch, daemon, sandbox start); default 3. */
  attempts?: number;
  /** First backoff before such a retry, doubling; default 1000 ms. */
  backoffMs?: number;
  /** How often to look for live workers while trials wait; default 2000 ms. */
  pollMs?: number;
  /** Called while trials wait and no worker is alive (first after one poll, then every `noticeEveryMs`). */
  onWaiting?: (notice: WaitingNotice) => void;
  /** Default 10,000 ms. */
  noticeEveryMs?: number;
}

interface Pending {
  resolve: (result: TrialResult | null) => void;
  reject: (error: unknown) => void;
  task: TaskSpec;
  attempt: number;
}

interface RunState {
  ctx: DispatchContext;
  pending: Map<string, Pending>;
  /** Task id -> sha256 of its published TaskRecord. */
  tasks: Map<string, Promise<string>>;
  /** sha256 of the run's published RunContext. */
  context: Promise<string> | null;
  reader: Redis | null;
  cancelled: boolean;
}

const ADD_CHUNK = 1000;
/** Tasks bundled at once: the first jobs go out after a few bundles, not after all of them. */
const BUNDLE_LANES = 8;

/**
 * Sends one BullMQ job per trial and turns what workers send back through Redis into the run's
 * events and results. Pass `dispatcher.dispatch` as `startRun`'s `dispatch` option.
 */
export class QueueDispatcher {
  readonly target: QueueTarget;
  private readonly prefix: string;
  private readonly logger: Logger;
  private readonly queue: Queue;
  private readonly queueEvents: QueueEvents;
  private readonly redis: Redis;
  private readonly ready: Promise<void>;
  private readonly runs = new Map<string, RunState>();
  private toAdd: { job: TrialJob; jobId: string }[] = [];
  private flushing: Promise<void> | null = null;
  private bundling: (() => void)[] = [];
  private bundlingLanes = BUNDLE_LANES;
  private readonly poller: NodeJS.Timeout;
  private waitingSince: number | null = null;
  private lastNotice = 0;
  private closed = false;
  /** One report per outage for all of the dispatcher's connections. */
  private readonly outage: Outage = { down: false };

  constructor(private readonly options: QueueDispatcherOptions) {
    this.target = parseQueueUrl(options.url);
    this.prefix = options.prefix ?? KEY_PREFIX;
    this.logger = options.logger ?? silentLogger;
    const connection = bullConnection(this.target);
    this.queue = new Queue(TRIAL_QUEUE, { connection, prefix: this.prefix });
    watchConnection(this.queue, this.target, this.logger, "the dispatcher", this.outage);
    this.queueEvents = new QueueEvents(TRIAL_QUEUE, { connection, prefix: this.prefix });
    this.queueEvents.on("error", () => undefined); // reported once by the queue's own watcher
    this.queueEvents.on("failed", ({ jobId, failedReason }) => void this.onFailed(jobId, failedReason));
    this.redis = connect(this.target, this.logger, "the dispatcher", this.outage);
    this.ready = Promise.all([this.queue.waitUntilReady(), this.queueEvents.waitUntilReady()]).then(() => undefined);
    this.poller = setInterval(() => void this.poll(), options.pollMs ?? 2000);
    this.poller.unref();
  }

  /** Resolves when Redis answered (rejects never: commands wait through outages). */
  waitUntilReady(): Promise<void> {
    return this.ready;
  }

  readonly dispatch: TrialDispatch = (trial, ctx) => {
    if (this.closed) return Promise.reject(new DispatchError("the queue dispatcher is closed"));
    if (ctx.agent.kind === "custom") {
      return Promise.reject(new DispatchError(`agent "${ctx.agent.name}" is an object in this process; queue workers can only run built-in agents or an agent directory`));
    }
    const state = this.runState(ctx);
    return new Promise<TrialResult | null>((resolve, reject) => {
      state.pending.set(trial.trialId, { resolve, reject, task: trial.task, attempt: trial.attempt });
      this.enqueue(state, trial).catch((error: unknown) => {
        state.pending.delete(trial.trialId);
        reject(error);
      });
    });
  };

  private runState(ctx: DispatchContext): RunState {
    let state = this.runs.get(ctx.runId);
    if (state) return state;
    state = { ctx, pending: new Map(), tasks: new Map(), context: null, reader: null, cancelled: false };
    this.runs.set(ctx.runId, state);
    const run = state;
    ctx.signal.addEventListener("abort", () => void this.cancel(run), { once: true });
    void this.read(state);
    return state;
  }

  private async enqueue(state: RunState, trial: { task: TaskSpec; attempt: number; trialId: string }): Promise<void> {
    const { ctx } = state;
    let task = state.tasks.get(trial.task.id);
    if (!task) {
      task = this.publishTask(trial.task);
      state.tasks.set(trial.task.id, task);
    }
    state.context ??= this.publishContext(ctx);
    const [taskSha, contextSha] = await Promise.all([task, state.context]);
    if (state.cancelled || this.closed) return; // stopped while its bundle was packed: no job
    const job: TrialJob = { v: 2, runId: ctx.runId, trialId: trial.trialId, attempt: trial.attempt, task: taskSha, context: contextSha };
    this.toAdd.push({ job, jobId: jobIdOf(ctx.runId, trial.trialId) });
    await this.flush();
  }

  /** Bundles the task, stores the bundle and publishes the task record once; the sha256 jobs name it by. */
  private async publishTask(task: TaskSpec): Promise<string> {
    const { spec, bundle } = await this.inBundlingLane(() => bundleTask(task));
    await this.options.bundles.store.put(bundle);
    const record: TaskRecord = { task: spec, bundle: { sha256: bundle.sha256, source: this.bundleSource() } };
    await this.ready;
    return publishSpec(this.redis, this.prefix, record);
  }

  private async publishContext(ctx: DispatchContext): Promise<string> {
    const agentBundle = await this.bundleAgent(ctx);
    const agent = ctx.agent.kind === "code" || ctx.agent.kind === "image" || (ctx.agent.kind === "installed" && ctx.agent.dir !== undefined) ? { ...ctx.agent, dir: "." } : ctx.agent;
    const record: RunContext = {
      agent,
      agentBundle,
      runtime: ctx.runtime,
      timeoutMultiplier: ctx.timeoutMultiplier,
      defaultImage: ctx.defaultImage,
      isolateVerifier: ctx.isolateVerifier,
      grading: ctx.grading,
      limits: { ...ctx.limits },
      ...(ctx.maxCostUsd !== undefined ? { maxCostUsd: ctx.maxCostUsd } : {}),
      ...(ctx.computeUsdPerCpuHour !== undefined ? { computeUsdPerCpuHour: ctx.computeUsdPerCpuHour } : {}),
    };
    await this.ready;
    return publishSpec(this.redis, this.prefix, record);
  }

  /** Runs `pack` when one of BUNDLE_LANES is free (packing copies and gzips: CPU and disk bound). */
  private async inBundlingLane<T>(pack: () => Promise<T>): Promise<T> {
    if (this.bundlingLanes === 0) await new Promise<void>((r) => this.bundling.push(r));
    else this.bundlingLanes--;
    try {
      return await pack();
    } finally {
      const next = this.bundling.shift();
      if (next) next();
      else this.bundlingLanes++;
    }
  }

  private async bundleAgent(ctx: DispatchContext): Promise<BundleRef | null> {
    if (ctx.agent.kind === "installed") {
      // A built-in is known to every worker by name; an agent.toml dir travels as a bundle.
      if (ctx.agent.dir === undefined) return null;
      const bundle = await packBundle([ctx.agent.dir]);
      await this.options.bundles.store.put(bundle);
      return { sha256: bundle.sha256, source: this.bundleSource() };
    }
    if (ctx.agent.kind !== "code" && ctx.agent.kind !== "image") return null;
    if (ctx.agent.kind === "code" && ctx.agent.modelProxy) throw new DispatchError("--llm-proxy cannot be used with --queue yet: the model proxy runs in this process, out of the workers' reach");
    const bundle = await packBundle([ctx.agent.dir]);
    await this.options.bundles.store.put(bundle);
    return { sha256: bundle.sha256, source: this.bundleSource() };
  }

  private bundleSource(): BundleSource {
    const source = this.options.bundles.source;
    return typeof source === "function" ? source() : source;
  }

  /** Adds what is buffered in chunks (addBulk), one flush at a time; resolves once this caller's job is in Redis. */
  private flush(): Promise<void> {
    if (this.flushing) return this.flushing.then(() => (this.toAdd.length > 0 ? this.flush() : undefined));
    this.flushing = (async () => {
      await new Promise((r) => setImmediate(r)); // gather the trials dispatched in the same turn
      await this.ready;
      while (this.toAdd.length > 0) {
        const chunk = this.toAdd.splice(0, ADD_CHUNK);
        await this.queue.addBulk(
          chunk.map(({ job, jobId }) => ({
            name: "trial",
            data: job,
            opts: {
              jobId,
              attempts: this.options.attempts ?? 3,
              backoff: { type: "exponential", delay: this.options.backoffMs ?? 1000 },
              // Gone when done, so a resumed run can add the same job id again.
              removeOnComplete: true,
              removeOnFail: true,
            },
          })),
        );
      }
    })().finally(() => {
      this.flushing = null;
    });
    return this.flushing;
  }

  /** Reads the run's event and result streams until no trial of it is pending. */
  private async read(state: RunState): Promise<void> {
    const runId = state.ctx.runId;
    const reader = connect(this.target, this.logger, "the dispatcher", this.outage);
    state.reader = reader;
    const eventsKey = keys.events(this.prefix, runId);
    const resultsKey = keys.results(this.prefix, runId);
    let lastEvent = "$";
    let lastResult = "0";
    try {
      // Events from before this session are stale; results are not (a resumed run may find some).
      const newest = await reader.xrevrange(eventsKey, "+", "-", "COUNT", 1);
      lastEvent = newest[0]?.[0] ?? "0";
      while (!this.closed && !state.cancelled) {
        const reply = await reader.xreadBuffer("COUNT", 500, "BLOCK", 1000, "STREAMS", eventsKey, resultsKey, lastEvent, lastResult);
        if (!reply) {
          if (state.pending.size === 0 && this.toAdd.length === 0) break;
          continue;
        }
        for (const [streamKey, entries] of reply) {
          if (streamKey.toString() !== resultsKey) {
            for (const [idBuffer, fields] of entries) {
              lastEvent = idBuffer.toString();
              this.onEvents(state, fieldsOf(fields));
            }
            continue;
          }
          // Results of one read are extracted side by side, then leave the stream in one XDEL.
          const ids = entries.map(([idBuffer]) => idBuffer.toString());
          await Promise.all(entries.map(([, fields]) => this.onResult(state, fieldsOf(fields))));
          lastResult = ids.at(-1) ?? lastResult;
          if (ids.length > 0) await this.redis.xdel(resultsKey, ...ids);
        }
        if (state.pending.size === 0 && this.toAdd.length === 0) break;
      }
    } catch (error) {
      if (!this.closed) {
        for (const pending of state.pending.values()) pending.reject(error);
        state.pending.clear();
      }
    } finally {
      state.reader = null;
      reader.disconnect();
      this.runs.delete(runId);
    }
  }

  /** One stream entry holds the events a worker gathered in one flush, in order. */
  private onEvents(state: RunState, record: Map<string, Buffer>): void {
    const batch = record.get("events");
    if (!batch) return;
    for (const event of JSON.parse(batch.toString("utf8")) as EventBody[]) {
      // A trial already recorded (its stalled twin still running) adds nothing to the run.
      if ("trialId" in event && !state.pending.has(event.trialId)) continue;
      state.ctx.emit(event);
    }
  }

  private async onResult(state: RunState, record: Map<string, Buffer>): Promise<void> {
    const trialId = record.get("trialId")?.toString("utf8") ?? "";
    const pending = state.pending.get(trialId);
    if (!pending) return; // recorded already: a stalled job ran twice
    state.pending.delete(trialId);
    try {
      const result = TrialResult.parse(JSON.parse(record.get("result")?.toString("utf8") ?? "null"));
      const trialDir = join(state.ctx.runDir, "trials", trialId);
      await removeTreeWithoutStat(trialDir);
      const artifact = record.get("artifact");
      if (artifact && isTrialFileList(artifact)) writeTrialFiles(artifact, trialDir);
      else if (artifact && artifact.length > 0) await extractArchive(Readable.from([artifact]), trialDir);
      else await mkdir(trialDir, { recursive: true });
      pending.resolve(result);
    } catch (error) {
      pending.reject(new DispatchError(`trial ${trialId}: a worker sent a result this dispatcher cannot use (${(error as Error).message})`));
    }
  }

  /** BullMQ gave up on a job (attempts used up, stalled too often, refused by every worker): an infra error result. */
  private async onFailed(jobId: string, reason: string): Promise<void> {
    const cut = jobId.lastIndexOf("|");
    if (cut < 0) return;
    const state = this.runs.get(jobId.slice(0, cut));
    const trialId = jobId.slice(cut + 1);
    const pending = state?.pending.get(trialId);
    if (!state || !pending) return;
    state.pending.delete(trialId);
    const now = new Date().toISOString();
    await mkdir(join(state.ctx.runDir, "trials", trialId), { recursive: true });
    pending.resolve({
      trialId,
      taskId: pending.task.id,
      attempt: pending.attempt,
      category: pending.task.category,
      difficulty: pending.task.difficulty,
      status: "error",
      reward: null,
      error: { kind: "infra", message: `the queue gave up on this trial: ${reason}` },
      durationMs: 0,
      startedAt: now,
      finishedAt: now,
      retries: (this.options.attempts ?? 3) - 1,
      phases: [],
      agent: null,
      checks: null,
      integrity: null,
    });
  }

  /** The run was aborted: waiting jobs are removed, workers skip the rest, pending trials resolve null. */
  private async cancel(state: RunState): Promise<void> {
    state.cancelled = true;
    const runId = state.ctx.runId;
    const ids = [...state.pending.keys()];
    for (const pending of state.pending.values()) pending.resolve(null);
    state.pending.clear();
    try {
      await this.redis.set(keys.cancelled(this.prefix, runId), "1", "EX", 86_400);
      for (const trialId of ids) await this.queue.remove(jobIdOf(runId, trialId)).catch(() => 0); // active (locked) jobs stay; workers drop their results
    } catch (error) {
      this.logger.warn("removing a cancelled run's jobs failed", { runId, error: (error as Error).message });
    }
  }

  private async poll(): Promise<void> {
    let queued = 0;
    for (const state of this.runs.values()) queued += state.pending.size;
    if (queued === 0 || !this.options.onWaiting) {
      this.waitingSince = null;
      return;
    }
    let alive: number;
    try {
      alive = (await listWorkers(this.redis, this.prefix)).length;
    } catch {
      return; // Redis is away; the connection watcher said so
    }
    if (alive > 0) {
      this.waitingSince = null;
      return;
    }
    const now = Date.now();
    this.waitingSince ??= now;
    if (now - this.lastNotice < (this.options.noticeEveryMs ?? 10_000)) return;
    this.lastNotice = now;
    this.options.onWaiting({ queued, waitingMs: now - this.waitingSince, queue: this.target.display });
  }

  /** Stops reading; trials still pending stay in the queue (a resumed run picks their results up). */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    clearInterval(this.poller);
    for (const state of this.runs.values()) {
      for (const pending of state.pending.values()) pending.resolve(null);
      state.pending.clear();
      state.reader?.disconnect();
    }
    // A graceful close waits for Redis to answer; while it is away (the run was stopped during an
    // outage) nothing more can be said to it, so the connections are dropped and the process can end.
    const away = this.redis.status !== "ready";
    this.redis.disconnect();
    if (away) {
      // BullMQ's disconnect() never settles while Redis is away: not awaited, or the run would end silently.
      for (const closing of [this.queue.disconnect(), this.queueEvents.disconnect()]) closing.catch(() => undefined);
      return;
    }
    await Promise.allSettled([this.queue.close(), this.queueEvents.close()]);
  }
}

function fieldsOf(fields: Buffer[]): Map<string, Buffer> {
  const map = new Map<string, Buffer>();
  for (let i = 0; i + 1 < fields.length; i += 2) map.set((fields[i] as Buffer).toString("utf8"), fields[i + 1] as Buffer);
  return map;
}
