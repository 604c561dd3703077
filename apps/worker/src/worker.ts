import { hostname, tmpdir } from "node:os";
import { join, resolve } from "node:path";
import {
  checkQueueReachable,
  openBuildLock,
  parseQueueUrl,
  QueueUnreachableError,
  QueueUrlError,
  startWorker,
  startWorkerStatusServer,
  trialLogLine,
  WorkerMetrics,
  type QueueWorkerHandle,
  type TrialLimitDefaults,
  type WorkerState,
  type WorkerStatusServer,
} from "@proctor/queue";
import { LocalRuntime, type SandboxRuntime } from "@proctor/sandbox";
import { DockerRuntime, ImageSettingsError, dockerAvailable, dockerDaemonId, imageSettings, type DockerRuntimeOptions } from "@proctor/sandbox-docker";
import type { Logger } from "@proctor/schema";
import { EXIT_INTERRUPTED, WorkerError } from "./errors";

export interface WorkerConfig {
  /** `redis://[:PASSWORD@]HOST:PORT/DB`. */
  queue: string;
  concurrency: number;
  runtime: "auto" | "docker" | "local";
  name?: string;
  /** For a server's GET /v1/bundles/:sha; never logged. */
  workerToken?: string;
  /** Bundle cache and scratch trial dirs; default `<tmp>/proctor-worker`. */
  workDir?: string;
  /** Serve /health and /metrics on this port (0: any free one). */
  port?: number;
  host?: string;
  /** Limits a trial gets where neither its task nor its run sets one. */
  defaultLimits?: TrialLimitDefaults;
  lockMs?: number;
  heartbeatMs?: number;
  /** Registry task images are shared through (HOST:PORT[/prefix]); builds then take a Redis lock per image. */
  imageRegistry?: string;
  /** Disk budget of task images in GB; default a quarter of the Docker data root's disk. */
  imageCacheGb?: number;
}

export interface RunWorkerOptions {
  /** Where the worker's lines go; default stderr. */
  out?: NodeJS.WritableStream;
  /** Stops like SIGTERM (a drain); for tests and embedding. */
  signal?: AbortSignal;
  /** Told the status server's URL once it listens. */
  onListening?: (url: string) => void;
  /** Whether to act on SIGTERM/SIGINT; default true. */
  handleSignals?: boolean;
}

/**
 * Runs trial jobs from the queue until SIGTERM/SIGINT (or `signal`), which drains: no new trial,
 * the running ones finish, then it resolves 0. A second signal exits at once (130): the running
 * trials' jobs stall and run again on another worker.
 */
export async function runWorker(config: WorkerConfig, options: RunWorkerOptions = {}): Promise<number> {
  const out = options.out ?? process.stderr;
  const say = (line: string) => out.write(`${line}\n`);
  let queue: string;
  try {
    queue = parseQueueUrl(config.queue).display;
  } catch (error) {
    if (error instanceof QueueUrlError) throw new WorkerError(error.message.replace(/^--queue: /, "--queue (or PROCTOR_QUEUE_URL): "), 2, { cause: error });
    throw error;
  }
  // Asked once before joining: joining a Redis that is not there would wait for it with no word.
  // Outages after a good start are waited out (and a drain with nothing running does not wait).
  try {
    await checkQueueReachable(config.queue);
  } catch (error) {
    if (error instanceof QueueUnreachableError) throw new WorkerError(error.message.replace(/ or fix --queue$/, " or fix --queue (or PROCTOR_QUEUE_URL)"), 3, { cause: error });
    throw error;
  }
  const logger = lineLogger(say, Boolean(process.env.PROCTOR_DEBUG));
  const runtime = await openRuntime(config.runtime, logger, say, () => dockerImageOptions(config, logger));
  const name = config.name ?? `${hostname()}-${process.pid}`;
  const metrics = new WorkerMetrics(name);
  metrics.capacity.set(config.concurrency);
  const heartbeatMs = config.heartbeatMs ?? 5000;
  const state: WorkerState = { name: null, id: null, runtime: runtime.name, capacity: config.concurrency, queue, heartbeatMs };
  let status: WorkerStatusServer | null = null;
  if (config.port !== undefined) {
    try {
      status = await startWorkerStatusServer({ host: config.host ?? "127.0.0.1", port: config.port, metrics, state });
    } catch (error) {
      throw new WorkerError(`--port ${config.port}: cannot listen on ${config.host ?? "127.0.0.1"}:${config.port} (${(error as Error).message}); pick a free port`, 2, { cause: error });
    }
    say(`health and metrics on ${status.url}/health and ${status.url}/metrics`);
    options.onListening?.(status.url);
  }

  let stopping = false;
  let handle: QueueWorkerHandle | null = null;
  const drain = (why: string) => {
    if (stopping) return;
    stopping = true;
    metrics.draining = true;
    say(`${why}: draining: no new trials; ${metrics.runningTrials} running trial(s) finish, then the worker exits`);
    void handle?.drain();
  };
  const onSignal = (signal: NodeJS.Signals) => () => {
    if (stopping) {
      say(`${signal} again: exiting now; ${metrics.runningTrials} running trial(s) are given up and run again on another worker`);
      process.exit(EXIT_INTERRUPTED);
    }
    drain(signal);
  };
  const sigterm = onSignal("SIGTERM");
  const sigint = onSignal("SIGINT");
  if (options.handleSignals !== false) {
    process.on("SIGTERM", sigterm);
    process.on("SIGINT", sigint);
  }
  options.signal?.addEventListener("abort", () => drain("stop requested"), { once: true });
  try {
    handle = await startWorker({
      url: config.queue,
      runtime,
      concurrency: config.concurrency,
      workDir: resolve(config.workDir ?? join(tmpdir(), "proctor-worker")),
      logger,
      name,
      ...(config.workerToken ? { token: config.workerToken } : {}),
      containers: runtime instanceof DockerRuntime ? runtime.docker : null,
      heartbeatMs,
      ...(config.lockMs !== undefined ? { lockDurationMs: config.lockMs, stalledIntervalMs: config.lockMs } : {}),
      ...(config.defaultLimits && Object.keys(config.defaultLimits).length > 0 ? { defaultLimits: config.defaultLimits } : {}),
      onTrial: (event) => {
        metrics.trial(event);
        say(trialLogLine(name, event));
      },
      onHeartbeat: (ok) => metrics.heartbeat(ok),
    });
    state.name = handle.name;
    state.id = handle.id;
    say(`worker ${handle.name} ready: queue ${queue}, runtime ${runtime.name}, ${config.concurrency} trial(s) at once (SIGTERM drains)`);
    if (stopping) void handle.drain(); // a signal that came while it joined
    await handle.closed;
  } catch (error) {
    if (error instanceof Error && /--concurrency/.test(error.message)) throw new WorkerError(error.message, 2, { cause: error });
    throw error;
  } finally {
    process.off("SIGTERM", sigterm);
    process.off("SIGINT", sigint);
    await status?.close();
  }
  say(`worker ${name} stopped`);
  return 0;
}

/** auto: Docker when a daemon answers, else the local runtime (said, never silently). */
async function openRuntime(choice: WorkerConfig["runtime"], logger: Logger, say: (line: string) => void, images: () => Promise<Partial<DockerRuntimeOptions>>): Promise<SandboxRuntime> {
  if (choice === "local") return new LocalRuntime({ logger });
  if (await dockerAvailable()) return new DockerRuntime({ logger, ...(await images()) });
  if (choice === "docker") {
    throw new WorkerError(
      "--runtime docker: no Docker engine answers on DOCKER_HOST or /var/run/docker.sock. Start one, mount the host's socket into this container (-v /var/run/docker.sock:/var/run/docker.sock), or use --runtime local.",
      3,
    );
  }
  say("runtime: no Docker engine answers; using the local runtime (host processes)");
  return new LocalRuntime({ logger });
}

/**
 * The registry (checked once: unreachable exits 3, a bad name or refused credentials 2) and disk
 * budget. Builds take a Redis lock per image: with a registry one worker of the cluster builds it
 * and the others pull it; without one, workers on the same Docker daemon (compose's sibling
 * containers, which do not share a lock directory) build it once.
 */
async function dockerImageOptions(config: WorkerConfig, logger: Logger): Promise<Partial<DockerRuntimeOptions>> {
  try {
    const settings = await imageSettings({ registry: config.imageRegistry, cacheGb: config.imageCacheGb });
    const scope = settings.imageRegistry ? undefined : `daemon-${await dockerDaemonId()}`;
    return { ...settings, buildLock: openBuildLock(config.queue, logger, scope ? { scope } : {}) };
  } catch (error) {
    if (error instanceof ImageSettingsError) throw new WorkerError(error.message, error.kind === "unreachable" ? 3 : 2, { cause: error });
    throw error;
  }
}

/** Warnings and errors always; info and debug with PROCTOR_DEBUG. */
function lineLogger(say: (line: string) => void, debug: boolean): Logger {
  const line = (level: string, message: string, fields?: Record<string, unknown>) =>
    say(`${level}: ${message}${fields && Object.keys(fields).length > 0 ? ` ${JSON.stringify(fields)}` : ""}`);
  return {
    debug: (m, f) => debug && line("debug", m, f),
    info: (m, f) => debug && line("info", m, f),
    warn: (m, f) => line("warning", m, f),
    error: (m, f) => line("error", m, f),
  };
}
