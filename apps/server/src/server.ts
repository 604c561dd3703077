import { AuthConfigError, loadSchnorrkelWasm } from "@proctor/auth";
import { mkdir, readdir, rm } from "node:fs/promises";
import type { Server as HttpServer } from "node:http";
import { isIP } from "node:net";
import { join, resolve } from "node:path";
import { dockerAvailable } from "@proctor/sandbox-docker";
import type { SandboxRuntime } from "@proctor/sandbox";
import { silentLogger } from "@proctor/schema";
import type { Logger } from "@proctor/schema";
import { z } from "zod";
import { buildApp } from "./app";
import { AUTH_MODES, RequestAuthenticator } from "@proctor/auth";
import { Batches, type ServerModelProxy } from "./batches";
import type { AgentImageLimits } from "./agent-image";
import { ServerError } from "./errors";
import { ServerMetrics } from "./metrics";
import { BatchReceipts } from "./receipt";
import { stagingDir } from "./store";
import { SlotService, type SlotsOptions } from "./slots";
import { DEFAULT_WS_OPTIONS, WsHub } from "./ws-hub";
import { openServerQueue, type ServerQueueOptions } from "./workers";
import { DEFAULT_TRIAL_LIMITS, type RunHandle, type RunLimits, type RunOptions } from "@proctor/engine";
import type { ReceiptSigner } from "@proctor/report";

/**
 * Limits every uploaded task gets unless it asks for less (defaults), and that no uploaded task
 * may exceed (maxima, refused before the batch starts). Uploads are untrusted code.
 */
export const UPLOAD_LIMITS: RunLimits = Object.freeze({
  defaults: { ...DEFAULT_TRIAL_LIMITS },
  max: { memoryMb: 16_384, cpus: 8, storageMb: 51_200 },
  logBytes: 50 * 1024 * 1024,
});

export interface StartServerOptions {
  host: string;
  /** 0 picks a free port (see the returned url). */
  port: number;
  /** Holds batches/<batch_id>/ (each one the engine's run directory) and staging/. */
  dataDir: string;
  auth: "none" | "token" | "epistula" | "hotkey-header-insecure";
  runtime: SandboxRuntime;
  /** Image for tasks that name none (Docker runtime). */
  defaultImage: string | null;
  /** Batches running at once (default 1). */
  maxActiveBatches?: number;
  /** Batches waiting beyond the active ones; more is a 429 (default 10). */
  maxQueuedBatches?: number;
  /** Largest accepted archive, in bytes (default 500 MiB). */
  maxUploadBytes?: number;
  /** Largest `?concurrent_tasks`, and its default (default 8). */
  maxConcurrentTasks?: number;
  /** Auth `none` on a non-loopback host needs this to be true. */
  insecure?: boolean;
  /** Allowlisted SS58 hotkeys; default $PROCTOR_HOTKEYS or the file in $PROCTOR_HOTKEYS_FILE. */
  hotkeys?: string[];
  /** A file with one hotkey per line (wins over `hotkeys`). */
  hotkeysFile?: string;
  /** Bearer tokens (plain or sha256:<hex>); default $PROCTOR_TOKENS or $PROCTOR_TOKENS_FILE. */
  tokens?: string[];
  /**
   * Let workspace.yaml name a repository on the server's own disk (default false: uploads are
   * untrusted and must not read the host's repositories). For tests and trusted setups.
   */
  allowLocalRepos?: boolean;
  /**
   * true: every uploaded task's verifier starts with no agent process alive; false: agent
   * processes live through verification. Default: each task decides (check tasks isolate).
   */
  isolateVerifier?: boolean;
  /** Where every batch's verifiers run (--grading); default: each task's mode. */
  grading?: "fresh" | "shared";
  /** Resource limits for uploaded tasks; default UPLOAD_LIMITS. */
  limits?: RunLimits;
  /** Build limits of an uploaded agent_image/ (time, size, network); default DEFAULT_AGENT_IMAGE_LIMITS. */
  agentImage?: Partial<AgentImageLimits>;
  /** When set, Epistula-Signed-For must be this SS58 address. */
  signedFor?: string;
  /**
   * Identities that may read and cancel every batch (others see only their own): SS58 hotkeys
   * (allowed to sign in even if not on the allowlist) or `token:<id>`; default $PROCTOR_ADMIN_HOTKEYS.
   */
  adminHotkeys?: string[];
  /** Accepted Epistula clock skew, and how long a signed request is remembered against replay (default 30 s). */
  signatureWindowMs?: number;
  /** Uploads in progress at once, in total (default 8); more get 503 + Retry-After. */
  maxConcurrentUploads?: number;
  /** Uploads in progress at once per hotkey / token / client address (default 2); more get 429 + Retry-After. */
  maxConcurrentUploadsPerKey?: number;
  /** An upload whose connection sends nothing for this long is dropped, freeing its slot (default 60 s). */
  uploadIdleTimeoutMs?: number;
  /**
   * Accept Epistula-signed uploads without Content-Digest (old clients): the body is staged to
   * disk and the signature checked afterwards, so a forger's upload is read before its 401.
   * Default false: such uploads get 400 asking for Content-Digest.
   */
  allowUndigestedUploads?: boolean;
  /** Delete finished batches older than this many days (on start and hourly); default: keep. */
  retentionDays?: number | null;
  /**
   * Signs each finished batch's receipt, served at GET /batch/:id/receipt (a `Keypair` from
   * @proctor/auth `loadKeypair({ file })`); default: no receipts (that route answers 404).
   */
  receiptKey?: ReceiptSigner;
  /**
   * Give every batch's agent a model through Proctor's per-trial model proxy: upstream base URL,
   * the NAME of the env var with the key (read in this process, never sent or recorded), the
   * models a batch may name with `?model=` (the first is the default), per-trial budgets.
   */
  modelProxy?: ServerModelProxy;
  /**
   * How each batch's trials execute (RunQueue's seam); default: the engine's startRun in this
   * process. `--queue` passes one that sends trials to workers.
   */
  startRun?: (options: RunOptions) => RunHandle;
  /** `--queue`: one BullMQ job per trial on Redis, run by `proctor worker`s; this process runs none (pass a remoteRuntime). */
  queue?: ServerQueueOptions;
  /** How long close() lets running batches stop before giving up (default 30 s). */
  shutdownGraceMs?: number;
  /**
   * How often sandboxes whose owner process is gone are removed while serving (default 30 s; 0:
   * only at start). A create a killed process sent can land after the start's reap.
   */
  reapIntervalMs?: number;
  /** WebSocket heartbeat interval (default 30 s). */
  wsHeartbeatMs?: number;
  /** Per-client buffered bytes above which task_phase events are dropped (default 1 MiB). */
  wsSoftBufferBytes?: number;
  /** Per-client buffered bytes above which the client is resynced with a snapshot later (default 8 MiB). */
  wsHardBufferBytes?: number;
  /** Serve the /v1/slots API with these pool settings (slots.ts); default: not served. */
  slots?: Omit<SlotsOptions, "runtime" | "logger" | "defaultImage">;
  /** Checked by /health; default: the Docker daemon answers (docker runtime) or nothing (local). */
  runtimeCheck?: () => Promise<void>;
  logger?: Logger;
}

export interface RunningServer {
  /** http://host:port */
  url: string;
  port: number;
  /** The underlying node HTTP server (e.g. to tune timeouts or observe connections). */
  httpServer: HttpServer;
  /** Stop accepting, close WebSockets, abort running batches (they resume on the next start). */
  close(): Promise<void>;
}

const Options = z.object({
  host: z.string().min(1),
  port: z.number().int().min(0).max(65535),
  dataDir: z.string().min(1),
  auth: z.enum(AUTH_MODES),
  defaultImage: z.string().min(1).nullable(),
  maxActiveBatches: z.number().int().min(1).default(1),
  maxQueuedBatches: z.number().int().min(0).default(10),
  maxUploadBytes: z.number().int().min(1).default(500 * 1024 * 1024),
  maxConcurrentTasks: z.number().int().min(1).default(8),
  maxConcurrentUploads: z.number().int().min(1).default(8),
  maxConcurrentUploadsPerKey: z.number().int().min(1).default(2),
  uploadIdleTimeoutMs: z.number().int().positive().default(60_000),
  allowUndigestedUploads: z.boolean().default(false),
  insecure: z.boolean().default(false),
  retentionDays: z.number().positive().nullable().default(null),
  shutdownGraceMs: z.number().int().nonnegative().default(30_000),
  reapIntervalMs: z.number().int().nonnegative().default(30_000),
  wsHeartbeatMs: z.number().int().positive().default(DEFAULT_WS_OPTIONS.heartbeatMs),
  wsSoftBufferBytes: z.number().int().positive().default(DEFAULT_WS_OPTIONS.softBufferBytes),
  wsHardBufferBytes: z.number().int().positive().default(DEFAULT_WS_OPTIONS.hardBufferBytes),
});

/** Thrown by startServer when its options are invalid or unsafe. */
export class ServerConfigError extends ServerError {
  override name = "ServerConfigError";
  constructor(message: string) {
    super(500, "config", message);
  }
}

export function isLoopback(host: string): boolean {
  if (host === "localhost") return true;
  if (isIP(host) === 4) return host.startsWith("127.");
  return host === "::1" || host === "[::1]";
}

/** Start the batch server (DESIGN.md "Server API"); resumes batches a previous process left unfinished. */
export async function startServer(options: StartServerOptions): Promise<RunningServer> {
  const parsed = Options.safeParse(options);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    throw new ServerConfigError(`server option ${issue?.path.join(".")}: ${issue?.message}`);
  }
  const config = parsed.data;
  if (config.auth === "none" && !isLoopback(config.host) && !config.insecure) {
    throw new ServerConfigError(`--auth none accepts anyone, so it binds loopback only; to serve ${config.host} without auth pass --insecure (option insecure: true), or use --auth token or --auth epistula`);
  }
  const logger = options.logger ?? silentLogger;
  const dataDir = resolve(config.dataDir);
  await mkdir(dataDir, { recursive: true }).catch((error: unknown) => {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === "EEXIST" || code === "ENOTDIR") throw new ServerConfigError(`--data-dir ${dataDir} is not a directory: name a directory (it is created when missing)`);
    throw new ServerConfigError(`--data-dir ${dataDir} cannot be created (${code ?? String(error)}): name a directory this user may write`);
  });
  // Uploads that were being received when a previous process died.
  await rm(stagingDir(dataDir), { recursive: true, force: true });
  await mkdir(stagingDir(dataDir), { recursive: true });
  // Sandboxes a previous process left when it died (kill -9, OOM); their batches resume below.
  const reaped = await options.runtime.reap();
  if (reaped > 0) logger.warn("removed sandboxes left by a previous server process", { reaped });

  // schnorrkel in WebAssembly verifies about 4x faster than the pure-TS default (bench/auth-verify).
  const verifier = config.auth === "epistula" ? await loadSchnorrkelWasm() : undefined;
  const auth = configured(() => new RequestAuthenticator({
    mode: config.auth,
    verifier,
    hotkeys: options.hotkeys,
    hotkeysFile: options.hotkeysFile,
    tokens: options.tokens,
    signedFor: options.signedFor,
    adminHotkeys: options.adminHotkeys,
    maxSkewMs: options.signatureWindowMs,
    // Survives restarts for the whole timestamp window (see @proctor/auth FileReplayCache).
    replayCachePath: replayCachePath(dataDir),
    logger,
  }));
  const metrics = new ServerMetrics();
  const queue = options.queue ? openQueue({ ...options.queue, dataDir, logger, registry: metrics.registry }) : null;
  const receipts = options.receiptKey ? new BatchReceipts({ signer: options.receiptKey, allowLocalRepos: options.allowLocalRepos ?? false, logger }) : null;
  const batches = new Batches({
    dataDir,
    runtime: options.runtime,
    defaultImage: config.defaultImage,
    maxActiveBatches: config.maxActiveBatches,
    maxQueuedBatches: config.maxQueuedBatches,
    maxConcurrentTasks: config.maxConcurrentTasks,
    maxUploadBytes: config.maxUploadBytes,
    retentionDays: config.retentionDays,
    allowLocalRepos: options.allowLocalRepos ?? false,
    ...(options.isolateVerifier !== undefined ? { isolateVerifier: options.isolateVerifier } : {}),
    ...(options.grading !== undefined ? { grading: options.grading } : {}),
    limits: options.limits ?? UPLOAD_LIMITS,
    ...(options.agentImage ? { agentImage: options.agentImage } : {}),
    receipts,
    ...(options.modelProxy ? { modelProxy: options.modelProxy } : {}),
    ...(queue ? { startRun: queue.startRun } : options.startRun ? { startRun: options.startRun } : {}),
    logger,
    metrics,
  });
  metrics.observe(batches.queue);
  const hub = new WsHub(batches.queue, {
    heartbeatMs: config.wsHeartbeatMs,
    softBufferBytes: config.wsSoftBufferBytes,
    hardBufferBytes: config.wsHardBufferBytes,
    stalledTimeoutMs: DEFAULT_WS_OPTIONS.stalledTimeoutMs,
    logger,
    metrics,
  });
  const runtimeCheck = options.runtimeCheck ?? queue?.runtimeCheck ?? defaultRuntimeCheck(options.runtime);
  const slots = options.slots
    ? new SlotService({ ...options.slots, runtime: options.runtime, logger, defaultImage: config.defaultImage ?? "proctor/base:bookworm" })
    : null;
  await slots?.start();
  slots?.warm();
  const app = await buildApp({
    batches,
    hub,
    auth,
    metrics,
    logger,
    dataDir,
    maxUploadBytes: config.maxUploadBytes,
    maxConcurrentTasks: config.maxConcurrentTasks,
    maxActiveBatches: config.maxActiveBatches,
    maxQueuedBatches: config.maxQueuedBatches,
    maxConcurrentUploads: config.maxConcurrentUploads,
    maxConcurrentUploadsPerKey: config.maxConcurrentUploadsPerKey,
    uploadIdleTimeoutMs: config.uploadIdleTimeoutMs,
    allowUndigestedUploads: config.allowUndigestedUploads,
    runtimeCheck,
    receipts,
    queue,
    slots,
  });
  await batches.queue.start();
  try {
    await app.listen({ host: config.host, port: config.port });
  } catch (error) {
    await batches.queue.close(config.shutdownGraceMs);
    hub.close();
    await queue?.close();
    await slots?.close();
    auth.close();
    const code = (error as NodeJS.ErrnoException).code;
    const why: Record<string, string> = {
      EADDRINUSE: "another process is listening there: stop it or pick another --port",
      EACCES: "this user may not bind that port: pick one above 1023 or run with the right to bind it",
      EADDRNOTAVAIL: "no interface of this machine has that address: pick another --host",
    };
    if (code !== undefined && why[code]) throw new ServerConfigError(`cannot listen on ${config.host}:${config.port} (${code}): ${why[code]}`);
    throw error;
  }
  const address = app.server.address();
  const port = typeof address === "object" && address !== null ? address.port : config.port;
  const hostForUrl = config.host.includes(":") && !config.host.startsWith("[") ? `[${config.host}]` : config.host;
  const url = `http://${hostForUrl}:${port}`;
  queue?.setPublicUrl(url);
  // Debug: the caller (proctor serve) says where it listens in its own words.
  logger.debug("server listening", { url, auth: config.auth, dataDir, runtime: options.runtime.name, admins: auth.adminCount });
  if (receipts) logger.debug("signing batch receipts", { signer: receipts.signer });
  if (config.allowUndigestedUploads && config.auth === "epistula") {
    logger.warn("uploads without Content-Digest are accepted: their bodies are staged before the signature is checked (allowUndigestedUploads)");
  }

  const reaper = startReaper(options.runtime, config.reapIntervalMs, logger);
  let closing: Promise<void> | null = null;
  return {
    url,
    port,
    httpServer: app.server,
    close() {
      closing ??= (async () => {
        logger.debug("server shutting down", { graceMs: config.shutdownGraceMs });
        await reaper.stop();
        const stopped = app.close();
        hub.close();
        await batches.queue.close(config.shutdownGraceMs);
        await queue?.close();
        await slots?.close();
        await stopped;
        auth.close();
        await cleanStaging(dataDir);
      })();
      return closing;
    },
  };
}

/**
 * Removes, every `intervalMs`, the sandboxes whose owner process is gone: the start's reap misses
 * a container whose create a killed process sent before it died and the daemon finished later
 * (seen under load), and a dead owner's watchdog may have given up before it landed.
 */
function startReaper(runtime: SandboxRuntime, intervalMs: number, logger: Logger): { stop(): Promise<void> } {
  if (intervalMs === 0) return { stop: () => Promise.resolve() };
  let running: Promise<void> = Promise.resolve();
  let warned = false;
  const timer = setInterval(() => {
    running = running.then(async () => {
      try {
        const reaped = await runtime.reap();
        if (reaped > 0) logger.warn("removed sandboxes left by a process that is gone", { reaped });
        warned = false;
      } catch (error) {
        // Said once per outage: the daemon being away is reported by /health and by trials.
        if (!warned) logger.warn("removing sandboxes of processes that are gone failed; retrying", { error: error instanceof Error ? error.message : String(error) });
        warned = true;
      }
    });
  }, intervalMs);
  timer.unref();
  return {
    stop: async () => {
      clearInterval(timer);
      await running;
    },
  };
}

function defaultRuntimeCheck(runtime: SandboxRuntime): () => Promise<void> {
  if (runtime.name !== "docker") return () => Promise.resolve();
  return async () => {
    if (!(await dockerAvailable())) throw new Error("the Docker daemon does not answer");
  };
}

async function cleanStaging(dataDir: string): Promise<void> {
  const dir = stagingDir(dataDir);
  for (const name of await readdir(dir).catch(() => [] as string[])) await rm(resolve(dir, name), { force: true, recursive: true });
}

/** The Epistula replay cache file under the data directory. */
export function replayCachePath(dataDir: string): string {
  return join(dataDir, "auth", "replay-cache.log");
}

/** Bad allowlists, tokens or admin lists are configuration errors (the CLI exits 2 with the message). */
function configured<T>(build: () => T): T {
  try {
    return build();
  } catch (error) {
    if (error instanceof AuthConfigError) throw new ServerConfigError(error.message);
    throw error;
  }
}

/** A bad --queue URL or worker token is a configuration error (exit 2 with the message). */
function openQueue(options: Parameters<typeof openServerQueue>[0]): ReturnType<typeof openServerQueue> {
  try {
    return openServerQueue(options);
  } catch (error) {
    throw new ServerConfigError((error as Error).message);
  }
}
