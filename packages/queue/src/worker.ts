import { randomBytes } from "node:crypto";
import { mkdir } from "node:fs/promises";
import { hostname } from "node:os";
import { join } from "node:path";
import { AgentConfigError, createAgent, type Agent } from "@proctor/agents";
import { RepoCache, runTrial, systemClock, type TrialEnvironment } from "@proctor/engine";
import { removeTreeWithoutStat, type SandboxCreateOptions, type SandboxRuntime } from "@proctor/sandbox";
import { silentLogger, type AgentSpec, type EventBody, type Logger, type TrialResult } from "@proctor/schema";
import { UnrecoverableError, Worker, type Job } from "bullmq";
import type { ChainableCommander } from "ioredis";
import * as tar from "tar";
import { BundleCache, localizeTask } from "./bundles";
import { connect, KEY_PREFIX, parseQueueUrl, bullConnection, TRIAL_QUEUE, watchConnection } from "./connection";
import { SpecError } from "./errors";
import { keys, RunContext, TaskRecord, TrialJob } from "./protocol";
import { SpecCache } from "./specs";
import { packTrialFiles, removeSmallTreeSync } from "./trial-files";
import { reapDeadWorkers, WORKER_LABELS, type ContainerApi } from "./reaper";
import { beat, forget, queueBeat, queueId, type WorkerInfo } from "./registry";

export interface QueueWorkerOptions {
  /** `redis://HOST:PORT/DB`. */
  url: string;
  runtime: SandboxRuntime;
  /** Trials at once (>= 1). */
  concurrency: number;
  /** Shown by `GET /v1/workers`; default `<host>-<pid>`. */
  name?: string;
  /** Bundle cache and scratch trial directories. */
  workDir: string;
  /** Worker token for a server's `GET /v1/bundles/:sha` (never logged). */
  token?: string;
  logger?: Logger;
  prefix?: string;
  /** Default 5,000 ms; the heartbeat expires after three missed beats. */
  heartbeatMs?: number;
  /** BullMQ lock: a job whose worker stops renewing it for this long is stalled and runs elsewhere. Default 30,000 ms. */
  lockDurationMs?: number;
  /** How often this worker looks for stalled jobs. Default 30,000 ms. */
  stalledIntervalMs?: number;
  /** Docker API to reap dead workers' containers with (at start and every `reapEveryMs`); null for none. */
  containers?: ContainerApi | null;
  /** Default 30,000 ms. */
  reapEveryMs?: number;
  /**
   * Limits a trial gets on this worker where neither its task nor its run sets one (a run's own
   * defaults and maxima still apply first).
   */
  defaultLimits?: TrialLimitDefaults;
  /** Told as each trial starts and ends (the worker app's log lines and metrics). */
  onTrial?: (event: WorkerTrialEvent) => void;
  /** Told after each heartbeat write whether Redis took it. */
  onHeartbeat?: (ok: boolean) => void;
}

export interface TrialLimitDefaults {
  memoryMb?: number;
  cpus?: number;
  pidsLimit?: number;
  storageMb?: number;
}

/**
 * A trial's course on this worker: `started` once it runs; then `finished` when its result went
 * to Redis, or `failed` when its job ended without one (an infra error retried, a bundle that
 * could not be fetched, a forced stop); `willRetry` says whether BullMQ runs it again.
 */
export type WorkerTrialEvent =
  | { type: "started"; runId: string; trialId: string; taskId: string; retry: number }
  | {
      type: "finished";
      runId: string;
      trialId: string;
      taskId: string;
      retry: number;
      status: TrialResult["status"];
      reward: number | null;
      durationMs: number;
      error: { kind: string; message: string } | null;
    }
  | { type: "failed"; runId: string; trialId: string; retry: number; message: string; willRetry: boolean };

export interface QueueWorkerHandle {
  id: string;
  name: string;
  /** Takes no new job; resolves when the running trials finished and the worker left the queue. */
  drain(): Promise<void>;
  /** Resolves after drain() (or a failure) ended the worker. */
  readonly closed: Promise<void>;
}

/** An installed agent (its model proxy) is closed this long after its run's last trial on this worker. */
const HELD_AGENT_IDLE_MS = 5 * 60_000;
/** How long a worker gathers trial events before sending them. */
const EVENT_FLUSH_MS = 50;
/** Trials starting within this long share one heartbeat. */
const BEAT_COALESCE_MS = 250;
/** Big artifacts (a trial's logs) are gzipped fast: they cross Redis once and are unpacked once. */
const ARTIFACT_GZIP = { level: 1 };
/** A drain waits this long at most for a Redis write that is only bookkeeping (its last heartbeat, leaving the registry). */
const DRAIN_REDIS_MS = 1000;
/** Runs trial jobs from the queue with the engine's own trial pipeline, and beats its heart in Redis. */
export async function startWorker(options: QueueWorkerOptions): Promise<QueueWorkerHandle> {
  if (!Number.isInteger(options.concurrency) || options.concurrency < 1) throw new Error(`--concurrency must be a whole number >= 1, got ${options.concurrency}`);
  const target = parseQueueUrl(options.url);
  const prefix = options.prefix ?? KEY_PREFIX;
  const logger = options.logger ?? silentLogger;
  const host = hostname();
  const id = `${host}-${process.pid}-${randomBytes(3).toString("hex")}`;
  const name = options.name ?? `${host}-${process.pid}`;
  const heartbeatMs = options.heartbeatMs ?? 5000;
  // One report per outage for the worker's connections.
  const outage = { down: false };
  const redis = connect(target, logger, `worker ${name}`, outage);
  const specs = new SpecCache(redis, prefix);
  const cache = new BundleCache(join(options.workDir, "bundles"), options.token ? { token: options.token } : {});
  // Workers reap each other's containers per Docker daemon: workers in containers on one daemon
  // have host names of their own, but share its containers.
  const reapScope = await daemonScope(options.containers, host, logger);
  const queue = await queueId(redis, prefix);
  const runtime = labelled(options.runtime, { [WORKER_LABELS.worker]: id, [WORKER_LABELS.host]: reapScope, [WORKER_LABELS.queue]: queue });
  const repoCache = new RepoCache(join(options.workDir, "repos"), { logger });
  const stop = new AbortController(); // only a forced stop aborts running trials
  const running = new Set<string>();
  // Jobs in the processor, from before their trial starts until its result went out (or it failed).
  let inFlight = 0;
  const idleWaiters: Array<() => void> = [];
  const idle = () => (inFlight === 0 ? Promise.resolve() : new Promise<void>((done) => idleWaiters.push(done)));
  let finished = 0;
  let draining = false;
  const startedAt = new Date().toISOString();

  const info = (): WorkerInfo => ({
    id,
    name,
    host,
    pid: process.pid,
    runtime: runtime.name,
    capacity: options.concurrency,
    running: [...running],
    finished,
    startedAt,
    heartbeatAt: new Date().toISOString(),
    draining,
  });
  const tell = (event: WorkerTrialEvent) => {
    try {
      options.onTrial?.(event);
    } catch (error) {
      logger.warn("a trial listener threw", { error: (error as Error).message });
    }
  };
  const beatNow = () =>
    beat(redis, prefix, info(), heartbeatMs * 3).then(
      () => options.onHeartbeat?.(true),
      () => options.onHeartbeat?.(false),
    );
  // A trial's start shows in the heartbeat within BEAT_COALESCE_MS (trials starting together share
  // one beat); its end goes out with its result.
  let beatTimer: NodeJS.Timeout | null = null;
  const beatSoon = () => {
    beatTimer ??= setTimeout(() => {
      beatTimer = null;
      void beatNow();
    }, BEAT_COALESCE_MS);
  };

  // Events go out in batches: one stream entry per run and flush, and a trial's last batch in the
  // same round trip as its result (a trivial trial emits a dozen events).
  const eventsOf = new Map<string, EventBody[]>(); // runId -> events waiting for the next flush
  let eventTimer: NodeJS.Timeout | null = null;
  const takeEvents = (pipeline: ChainableCommander): ChainableCommander => {
    if (eventTimer) clearTimeout(eventTimer);
    eventTimer = null;
    for (const [runId, batch] of eventsOf) pipeline.xadd(keys.events(prefix, runId), "MAXLEN", "~", "100000", "*", "events", JSON.stringify(batch));
    eventsOf.clear();
    return pipeline;
  };
  const flushEvents = () => {
    if (eventsOf.size === 0) return;
    takeEvents(redis.pipeline()).exec().catch((error: unknown) => logger.warn("sending events failed", { error: (error as Error).message }));
  };
  const emitFor = (runId: string) => (body: EventBody) => {
    let batch = eventsOf.get(runId);
    if (!batch) eventsOf.set(runId, (batch = []));
    batch.push(body);
    eventTimer ??= setTimeout(flushEvents, EVENT_FLUSH_MS);
  };

  // A cancelled run's jobs are skipped; whether it is cancelled is asked at most once a second.
  const cancelledRuns = new Map<string, { at: number; cancelled: Promise<boolean> }>();
  const isCancelled = (runId: string): Promise<boolean> => {
    const known = cancelledRuns.get(runId);
    if (known && Date.now() - known.at < 1000) return known.cancelled;
    const cancelled = redis.exists(keys.cancelled(prefix, runId)).then((n) => n === 1);
    if (cancelledRuns.size > 100) cancelledRuns.clear();
    cancelledRuns.set(runId, { at: Date.now(), cancelled });
    return cancelled;
  };

  // Agents that hold something for a run (an installed CLI's model proxy, its install) live per
  // run settings while that run has trials here, and are closed a while after its last one.
  const heldAgents = new Map<string, { agent: Agent; active: number; idle: NodeJS.Timeout | null }>();
  const agentFor = (contextSha: string, spec: AgentSpec): { agent: Agent; done: () => void } => {
    if (spec.kind !== "installed") return { agent: createAgent(spec), done: () => undefined };
    let held = heldAgents.get(contextSha);
    if (!held) heldAgents.set(contextSha, (held = { agent: createAgent(spec), active: 0, idle: null }));
    const entry = held;
    if (entry.idle) clearTimeout(entry.idle);
    entry.idle = null;
    entry.active++;
    return {
      agent: entry.agent,
      done: () => {
        if (--entry.active > 0) return;
        entry.idle = setTimeout(() => {
          heldAgents.delete(contextSha);
          void entry.agent.close?.().catch(() => undefined);
        }, HELD_AGENT_IDLE_MS);
        entry.idle.unref();
      },
    };
  };
  const closeHeldAgents = async () => {
    const all = [...heldAgents.values()];
    heldAgents.clear();
    for (const held of all) if (held.idle) clearTimeout(held.idle);
    await Promise.all(all.map((held) => held.agent.close?.().catch(() => undefined)));
  };

  const processor = async (job: Job): Promise<{ trialId: string } | { skipped: true }> => {
    inFlight++;
    try {
      return await runJob(job);
    } finally {
      if (--inFlight === 0) for (const done of idleWaiters.splice(0)) done();
    }
  };
  const runJob = async (job: Job): Promise<{ trialId: string } | { skipped: true }> => {
    const parsed = TrialJob.safeParse(job.data);
    if (!parsed.success) {
      const issue = parsed.error.issues[0];
      throw new UnrecoverableError(`job ${job.id} is not a trial job this worker understands (${issue?.path.join(".")}: ${issue?.message}); are dispatcher and worker the same Proctor version?`);
    }
    const data = parsed.data;
    let context: RunContext;
    let record: TaskRecord;
    try {
      [context, record] = await Promise.all([specs.get(data.context, RunContext, "run settings"), specs.get(data.task, TaskRecord, "task")]);
    } catch (error) {
      // Gone or not understood: no worker can run this job, and retrying will not bring it back.
      if (error instanceof SpecError) throw new UnrecoverableError(`job ${job.id}: ${error.message}`);
      throw error;
    }
    if (context.runtime !== runtime.name) {
      throw new UnrecoverableError(`worker ${name} runs the ${runtime.name} runtime but run ${data.runId} needs ${context.runtime}; start workers with --runtime ${context.runtime}`);
    }
    if (await isCancelled(data.runId)) return { skipped: true };
    running.add(data.trialId);
    beatSoon();
    tell({ type: "started", runId: data.runId, trialId: data.trialId, taskId: record.task.id, retry: job.attemptsMade });
    const runDir = join(options.workDir, "runs", `${data.runId}-${job.attemptsMade}-${randomBytes(3).toString("hex")}`);
    const emit = emitFor(data.runId);
    let small = false; // the trial dir went as a file list: its scratch dir is small
    let releaseAgent = () => undefined as void;
    try {
      const root = await cache.materialize(record.bundle);
      const task = localizeTask(record.task, root);
      let agentSpec: AgentSpec = context.agent;
      if ((agentSpec.kind === "code" || agentSpec.kind === "image" || (agentSpec.kind === "installed" && agentSpec.dir !== undefined)) && context.agentBundle) {
        agentSpec = { ...agentSpec, dir: join(await cache.materialize(context.agentBundle), "p0") };
      }
      let agent: Agent;
      try {
        ({ agent, done: releaseAgent } = agentFor(data.context, agentSpec));
      } catch (error) {
        // This worker cannot run the run's agent at all (its key's variable is not set here, say).
        if (error instanceof AgentConfigError) throw new UnrecoverableError(`worker ${name}: ${error.message}`);
        throw error;
      }
      await mkdir(join(runDir, "trials"), { recursive: true });
      const env: TrialEnvironment = {
        runId: data.runId,
        runDir,
        runtime,
        agent,
        timeoutMultiplier: context.timeoutMultiplier,
        defaultImage: context.defaultImage,
        repoCache,
        emit,
        logger,
        clock: systemClock,
        maxInfraRetries: 0, // BullMQ's attempts/backoff retry infra errors, on any worker
        retryBaseDelayMs: 0,
        limits: options.defaultLimits ? { ...context.limits, defaults: { ...options.defaultLimits, ...definedOnly(context.limits.defaults) } } : context.limits,
        isolateVerifier: context.isolateVerifier,
        grading: context.grading,
        ...(context.maxCostUsd !== undefined ? { maxCostUsd: context.maxCostUsd } : {}),
        ...(context.computeUsdPerCpuHour !== undefined ? { computeUsdPerCpuHour: context.computeUsdPerCpuHour } : {}),
      };
      const result = await runTrial(task, data.attempt, env, stop.signal);
      if (!result) throw new Error(`worker ${name} was stopped before trial ${data.trialId} finished`);
      const attempts = job.opts.attempts ?? 1;
      if (result.error?.kind === "infra" && job.attemptsMade + 1 < attempts) {
        emit({ type: "trial_retry", trialId: data.trialId, taskId: task.id, data: { retry: job.attemptsMade + 1, delayMs: 0, message: result.error.message } });
        throw new Error(result.error.message);
      }
      const final: TrialResult = { ...result, retries: job.attemptsMade, worker: { name, host } };
      const trialDir = join(runDir, "trials", data.trialId);
      await mkdir(trialDir, { recursive: true });
      const files = packTrialFiles(trialDir);
      small = files !== null;
      const artifact = files ?? (await collect(tar.c({ cwd: trialDir, gzip: ARTIFACT_GZIP, portable: true }, ["."])));
      // The events gathered so far, then the result, in one round trip (the dispatcher reads events first).
      const pipeline = takeEvents(redis.pipeline());
      pipeline.xadd(keys.results(prefix, data.runId), "*", "trialId", data.trialId, "result", JSON.stringify(final), "artifact", artifact);
      // The heartbeat that counts this trial as finished, in the same round trip.
      running.delete(data.trialId);
      finished++; // before the round trip, so a beat sent meanwhile cannot count one trial fewer
      queueBeat(pipeline, prefix, info(), heartbeatMs * 3);
      const sent = (await pipeline.exec())?.at(-3);
      if (!sent || sent[0]) {
        finished--;
        throw new Error(`sending trial ${data.trialId}'s result to Redis failed: ${sent?.[0]?.message ?? "no reply"}`);
      }
      tell({
        type: "finished",
        runId: data.runId,
        trialId: data.trialId,
        taskId: task.id,
        retry: job.attemptsMade,
        status: final.status,
        reward: final.reward,
        durationMs: final.durationMs,
        error: final.error ? { kind: final.error.kind, message: final.error.message } : null,
      });
      return { trialId: data.trialId };
    } finally {
      releaseAgent();
      if (running.delete(data.trialId)) beatSoon(); // ended without a result (retry, stop)
      await removeScratch(runDir, small, logger);
    }
  };

  const worker = new Worker(TRIAL_QUEUE, processor, {
    connection: bullConnection(target),
    prefix,
    concurrency: options.concurrency,
    lockDuration: options.lockDurationMs ?? 30_000,
    stalledInterval: options.stalledIntervalMs ?? 30_000,
    // A job whose worker died comes back; only a job that keeps killing workers is given up.
    maxStalledCount: 3,
    autorun: false,
  });
  watchConnection(worker, target, logger, `worker ${name}`, outage);
  worker.on("failed", (job, error) => {
    if (!job) return;
    logger.warn("trial job failed", { job: job.id, attempt: job.attemptsMade, error: error.message });
    const parsed = TrialJob.safeParse(job.data);
    const willRetry = !(error instanceof UnrecoverableError) && job.attemptsMade < (job.opts.attempts ?? 1);
    if (parsed.success) tell({ type: "failed", runId: parsed.data.runId, trialId: parsed.data.trialId, retry: Math.max(0, job.attemptsMade - 1), message: error.message, willRetry });
  });

  await beatNow();
  const heart = setInterval(() => void beatNow(), heartbeatMs);
  const reap = async () => {
    if (!options.containers) return;
    try {
      await reapDeadWorkers(options.containers, redis, { prefix, host: reapScope, queue, logger });
    } catch (error) {
      logger.warn("reaping dead workers' containers failed", { error: (error as Error).message });
    }
  };
  await reap();
  const reaper = setInterval(() => void reap(), options.reapEveryMs ?? 30_000);
  const runningWorker = worker.run();
  logger.info("worker started", { name, id, queue: target.display, runtime: runtime.name, concurrency: options.concurrency });

  /** Waits for a write that is only bookkeeping: DRAIN_REDIS_MS at most, and not at all while Redis is away. */
  const bookkeeping = (write: Promise<unknown>): Promise<unknown> => (outage.down ? Promise.resolve() : within(write, DRAIN_REDIS_MS));
  let closing: Promise<void> | null = null;
  let resolveClosed!: () => void;
  const closed = new Promise<void>((r) => (resolveClosed = r));
  const drain = (): Promise<void> => {
    closing ??= (async () => {
      draining = true;
      await bookkeeping(beatNow());
      logger.info("worker draining: no new trials; waiting for the running ones", { name, running: running.size });
      // With Redis away, BullMQ's close would wait for it forever (its QUIT, and a blocking connection
      // that never ends while it waits to reconnect): no new fetch, the trials in flight finish and
      // send their results (those wait for Redis), and with none left nothing needs Redis.
      if (outage.down) {
        await worker.pause(true);
        await idle();
      }
      const away = outage.down && inFlight === 0;
      await worker.close(away);
      if (!away) await runningWorker.catch(() => undefined); // else its job fetch waits for Redis
      clearInterval(heart);
      if (beatTimer) clearTimeout(beatTimer);
      flushEvents();
      clearInterval(reaper);
      await closeHeldAgents();
      await options.runtime.drain?.().catch((error: unknown) => logger.warn("removing sandboxes failed", { error: (error as Error).message }));
      await bookkeeping(forget(redis, prefix, id).catch(() => undefined)); // else its heartbeat expires
      redis.disconnect();
      logger.info("worker stopped", { name, finished });
      resolveClosed();
    })();
    return closing;
  };
  return { id, name, drain, closed };
}

/** `promise`'s value, or undefined once `ms` passed without one (the promise runs on). */
function within<T>(promise: Promise<T>, ms: number): Promise<T | undefined> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<undefined>((done) => (timer = setTimeout(() => done(undefined), ms)));
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

/** The Docker daemon's ID as `docker-<ID>` when the API tells it, else the host name. */
async function daemonScope(api: ContainerApi | null | undefined, host: string, logger: Logger): Promise<string> {
  if (!api?.info) return host;
  try {
    const id = (await api.info()).ID;
    return typeof id === "string" && id !== "" ? `docker-${id.replace(/[^A-Za-z0-9_.-]/g, "-")}` : host;
  } catch (error) {
    logger.warn("the Docker daemon did not say its ID; containers are reaped per host name", { error: (error as Error).message });
    return host;
  }
}

/** The keys of a limits record whose value is set (a run's `{memoryMb: undefined}` must not hide a worker default). */
function definedOnly(limits: TrialLimitDefaults | undefined): TrialLimitDefaults {
  return Object.fromEntries(Object.entries(limits ?? {}).filter(([, value]) => value !== undefined));
}

/** The runtime with the worker's labels on every sandbox (the reaper finds them by it). */
function labelled(runtime: SandboxRuntime, labels: Record<string, string>): SandboxRuntime {
  // A proxy, not a copy of chosen methods: an optional method left out (imageId, canMount, ...)
  // silently changes what a trial on a worker records and how it is graded.
  return new Proxy(runtime, {
    get(target, property) {
      if (property === "create") return (options: SandboxCreateOptions) => target.create({ ...options, labels: { ...options.labels, ...labels } });
      const value: unknown = Reflect.get(target, property, target);
      return typeof value === "function" ? (value as (...args: unknown[]) => unknown).bind(target) : value;
    },
  });
}

/** Removes a trial's scratch dir: synchronously when its trial dir was small, else (or if that fails) through the thread pool. */
async function removeScratch(dir: string, small: boolean, logger: Logger): Promise<void> {
  if (small) {
    try {
      removeSmallTreeSync(dir);
      return;
    } catch {
      // Something unexpected beside the trial dir: the walk below removes what is left, or says why not.
    }
  }
  await removeTreeWithoutStat(dir).catch((error: unknown) => logger.warn("removing a trial's scratch dir failed", { dir, error: (error as Error).message }));
}

async function collect(stream: AsyncIterable<Buffer | string>): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of stream) chunks.push(typeof chunk === "string" ? Buffer.from(chunk) : chunk);
  return Buffer.concat(chunks);
}
