import { randomUUID } from "node:crypto";
import { rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import type { IncomingMessage } from "node:http";
import type { Duplex } from "node:stream";
import { CONTENT_DIGEST_HEADER, ReplayCacheFullError, ReplayCacheUnavailableError, RequestAuthError, parseContentDigest } from "@proctor/auth";
import type { Logger } from "@proctor/schema";
import Fastify from "fastify";
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import type { z } from "zod";
import { BatchParams, TaskParams, WsQuery, batchStatusJson, submitQuery, taskJson } from "@proctor/client";
import type { BatchListResponse, BatchTasksResponse, HealthResponse, StatusResponse } from "@proctor/client";
import type { QueuedBatch } from "@proctor/engine";
import { principalKey } from "@proctor/auth";
import type { RequestAuthenticator, PendingAuth } from "@proctor/auth";
import type { Batches } from "./batches";
import { BadHeaderError, BadRequestError, NotFoundError, PayloadTooLargeError, ServerError, fromEngineError } from "./errors";
import type { ServerMetrics } from "./metrics";
import { batchReceipt } from "./receipt";
import type { BatchReceipts } from "./receipt";
import { stagingDir } from "./store";
import { ServerUi } from "./ui";
import { UploadSlots, contentDigestMismatch, sha256Hex, stageBody } from "./upload";
import type { StagedBody } from "./upload";
import { taskDetail } from "./views";
import type { WsHub } from "./ws-hub";
import { registerWorkerRoutes, type ServerQueue } from "./workers";
import { registerSlotRoutes, type SlotService } from "./slots";
import packageJson from "../package.json" with { type: "json" };

/** This package's version, from its package.json (bundled into dist at build time); /health and /status report it. */
export const SERVER_VERSION: string = packageJson.version;

/** Bodies of routes other than /submit (none take one; cancel may send an empty body). */
const SMALL_BODY_LIMIT = 64 * 1024;
/** Multipart framing around the archive (boundaries, part headers, small fields). */
const MULTIPART_OVERHEAD_BYTES = 1024 * 1024;
const EMPTY_SHA256 = sha256Hex("");

export interface AppContext {
  batches: Batches;
  hub: WsHub;
  auth: RequestAuthenticator;
  metrics: ServerMetrics;
  logger: Logger;
  dataDir: string;
  maxUploadBytes: number;
  maxConcurrentTasks: number;
  maxActiveBatches: number;
  maxQueuedBatches: number;
  /** Uploads (POST /submit) in progress at once, in total and per credential. */
  maxConcurrentUploads: number;
  maxConcurrentUploadsPerKey: number;
  /** An upload whose connection stays silent this long is dropped (its slot freed). */
  uploadIdleTimeoutMs: number;
  /**
   * Accept Epistula-signed uploads without Content-Digest the old way: stage the whole body to
   * disk, then check the signature over its hash (a forger's body is read before the 401).
   */
  allowUndigestedUploads: boolean;
  /** Resolves when the sandbox runtime answers; rejects with the reason otherwise. */
  runtimeCheck: () => Promise<void>;
  /** Signs finished batches' receipts; null when the server has no --receipt-key. */
  receipts: BatchReceipts | null;
  /** `--queue`: workers' bundles and list (worker token); absent without. */
  queue?: ServerQueue | null;
  /** The /v1/slots API (slots.ts); null/absent: not served. */
  slots?: SlotService | null;
}

declare module "fastify" {
  interface FastifyRequest {
    proctorAuth: PendingAuth | null;
    proctorIdentity: string | null;
    /** True once the credentials are fully checked (an Epistula signature verified). */
    proctorVerified: boolean;
    /** The body's sha256 (hex) declared in Content-Digest; null when the client sent none. */
    contentDigest: string | null;
    bodySha256: string | null;
    staged: StagedBody | null;
  }
}

function parse<T>(schema: z.ZodType<T>, value: unknown, what: string): T {
  const result = schema.safeParse(value);
  if (!result.success) {
    const issue = result.error.issues[0];
    const field = issue?.path.join(".") || what;
    throw new BadRequestError(`${what} ${field}: ${issue?.message ?? "invalid"}`);
  }
  return result.data;
}

/** Routes that need no credentials. */
const PUBLIC_ROUTES = new Set(["/health"]);

/** True when the request's headers announce a body (Content-Length > 0 or any Transfer-Encoding). */
function declaresBody(headers: IncomingMessage["headers"]): boolean {
  if (headers["transfer-encoding"] !== undefined) return true;
  const length = headers["content-length"];
  return length !== undefined && length !== "0";
}

function isUpload(request: FastifyRequest): boolean {
  return request.method === "POST" && request.routeOptions.url === "/submit";
}

/** What a Python `requests` client adds (apps/server/README.md "Signed uploads from Python"): validators' clients predate the header. */
const PYTHON_DIGEST_LINE = `req.headers["${CONTENT_DIGEST_HEADER}"] = "sha-256=:" + base64.b64encode(hashlib.sha256(req.body).digest()).decode() + ":"`;
const MISSING_DIGEST_MESSAGE =
  `an Epistula-signed upload must carry request header ${CONTENT_DIGEST_HEADER}: sha-256=:<base64 of the sha256 of the exact request body>: (RFC 9530), ` +
  "so the signature is checked before the body is read. " +
  `Python requests: build the request with req = requests.Request("POST", url, files=...).prepare(), sign req.body as before, then add ${PYTHON_DIGEST_LINE} ` +
  '(base64 and hashlib are standard library; see "Signed uploads from Python" in the server\'s README). proctor submit and @proctor/client send it already.';

/** The Fastify app: thin routes over the batch queue, auth hooks, JSON errors, the WebSocket upgrade. */
export async function buildApp(ctx: AppContext): Promise<FastifyInstance> {
  const app = Fastify({ logger: false, bodyLimit: SMALL_BODY_LIMIT, return503OnClosing: true, forceCloseConnections: true });
  app.decorateRequest("proctorAuth", null);
  app.decorateRequest("proctorIdentity", null);
  app.decorateRequest("proctorVerified", false);
  app.decorateRequest("contentDigest", null);
  app.decorateRequest("bodySha256", null);
  app.decorateRequest("staged", null);
  const uploads = new UploadSlots(ctx.maxConcurrentUploads, ctx.maxConcurrentUploadsPerKey);
  ctx.metrics.observeUploads(uploads);

  // Every body is read as raw bytes so the signature's hash covers exactly what was sent.
  app.removeAllContentTypeParsers();
  app.addContentTypeParser("*", { parseAs: "buffer", bodyLimit: SMALL_BODY_LIMIT }, (request, body, done) => {
    request.bodySha256 = sha256Hex(body as Buffer);
    done(null, body);
  });

  // Headers first: an unlisted, stale, unsigned or forged request is refused before its body is
  // read. The signature is checked here over the Content-Digest (or the empty body when the
  // headers announce none); the body is then checked against the digest as it streams in.
  app.addHook("onRequest", async (request, reply) => {
    // /ui's browser routes check their session cookie themselves (ui.ts).
    // Worker routes (workers.ts) check the worker token themselves.
    if (PUBLIC_ROUTES.has(request.routeOptions.url ?? "") || request.routeOptions.config.uiSession === true || request.routeOptions.config.workerToken === true) return;
    const pending = ctx.auth.checkHeaders(request.headers);
    request.proctorAuth = pending;
    request.contentDigest = parseContentDigest(request.headers);
    const upload = isUpload(request);
    if (pending.epistula === null) {
      request.proctorIdentity = pending.identity;
      request.proctorVerified = true;
    } else if (request.contentDigest !== null || !declaresBody(request.headers)) {
      request.proctorIdentity = ctx.auth.verifyBody(pending, request.contentDigest ?? EMPTY_SHA256).identity;
      request.proctorVerified = true;
    } else if (upload && !ctx.allowUndigestedUploads) {
      throw new BadHeaderError("missing_content_digest", CONTENT_DIGEST_HEADER, MISSING_DIGEST_MESSAGE);
    }
    // Otherwise (a small body on another route, or an undigested upload in the opt-in staged
    // mode) the signature is checked over the body's hash in preHandler.
    if (!upload) return;
    const maxBytes = ctx.maxUploadBytes + MULTIPART_OVERHEAD_BYTES;
    const declared = Number(request.headers["content-length"] ?? 0);
    if (declared > maxBytes) {
      throw new PayloadTooLargeError(`request header Content-Length (${declared}) is larger than the server's upload limit of ${maxBytes} bytes; upload a smaller archive`);
    }
    const identity = request.proctorIdentity ?? pending.identity;
    const release = uploads.acquire(principalKey(identity) ?? `ip:${request.ip}`, identity === null ? `client ${request.ip}` : identity);
    // A stalled upload must not hold its slot forever: drop its connection after a silence
    // while the body is arriving (not while a complete upload is being extracted).
    const socket = request.raw.socket;
    const onIdle = () => {
      // The silence may be this server's, not the client's: after a busy stretch of the event
      // loop the expired timer runs before the bytes that arrived meanwhile are read, and a body
      // held back by its own consumer (staging to a slow disk) is not read at all. Decide after
      // this turn's reads, and only for a client that sent nothing while the body was being read.
      const read = socket.bytesRead;
      setImmediate(() => {
        if (!watching || socket.destroyed) return;
        if (socket.bytesRead !== read || request.raw.isPaused() || socket.isPaused()) {
          socket.setTimeout(ctx.uploadIdleTimeoutMs);
          return;
        }
        ctx.logger.warn("upload stalled; dropping the connection", { identity, idleMs: ctx.uploadIdleTimeoutMs });
        socket.destroy();
      });
    };
    // Told through the request: Node's HTTP server destroys a timed-out socket itself unless its
    // request (or response, or server) takes the 'timeout' event.
    socket.setTimeout(ctx.uploadIdleTimeoutMs);
    request.raw.on("timeout", onIdle);
    let watching = true;
    const stopWatching = () => {
      if (!watching) return;
      watching = false;
      request.raw.off("timeout", onIdle);
      // Node sets its keep-alive timeout on the socket itself once the response is done.
      if (!socket.destroyed) socket.setTimeout(0);
    };
    request.raw.once("end", stopWatching);
    reply.raw.once("close", () => {
      if (watching) {
        watching = false;
        request.raw.off("timeout", onIdle);
      }
      release();
    });
  });
  // Then the body against its digest, and (when not done from the headers) the signature over it.
  app.addHook("preHandler", async (request) => {
    if (request.proctorAuth === null) return;
    const actual = request.staged?.sha256 ?? request.bodySha256 ?? EMPTY_SHA256;
    if (request.contentDigest !== null && actual !== request.contentDigest) {
      throw contentDigestMismatch(request.staged?.bytes ?? (Buffer.isBuffer(request.body) ? request.body.length : 0));
    }
    if (!request.proctorVerified) {
      request.proctorIdentity = ctx.auth.verifyBody(request.proctorAuth, actual).identity;
      request.proctorVerified = true;
    }
  });
  // The staged upload is never kept past the response (it was extracted, or refused).
  app.addHook("onSend", async (request) => {
    if (request.staged) await rm(request.staged.path, { force: true });
  });
  app.addHook("onResponse", async (request) => {
    if (request.staged) await rm(request.staged.path, { force: true });
  });

  app.setErrorHandler((error: FastifyError | Error, request, reply) => sendError(error, request, reply, ctx));
  app.setNotFoundHandler((request, reply) => sendError(new NotFoundError(`no route ${request.method} ${request.url.split("?")[0]}`), request, reply, ctx));

  await app.register(async (submit) => {
    // Stage the raw multipart body to disk while hashing it; nothing in it is parsed until the signature verifies.
    submit.addContentTypeParser("multipart/form-data", (request, payload, done) => {
      stageBody(payload, { dir: stagingDir(ctx.dataDir), maxBytes: ctx.maxUploadBytes + MULTIPART_OVERHEAD_BYTES, expectedSha256: request.contentDigest }).then(
        (staged) => {
          request.staged = staged;
          done(null, undefined);
        },
        (error: Error) => done(error),
      );
    });
    const SubmitQuery = submitQuery(ctx.maxConcurrentTasks);
    submit.post("/submit", async (request, reply) => {
      const query = parse(SubmitQuery, request.query, "query parameter");
      if (!request.staged) throw new BadRequestError("POST /submit takes a multipart/form-data body with the archive in field `archive` (or `file`)");
      const result = await ctx.batches.submit({
        staged: request.staged,
        contentType: request.headers["content-type"] ?? "",
        concurrentTasks: query.concurrent_tasks,
        submittedBy: request.proctorIdentity,
        model: query.model,
        agent: query.agent,
        budget: { max_cost: query.max_cost, max_tokens: query.max_tokens, trial_max_cost: query.trial_max_cost, on_budget: query.on_budget },
      });
      return reply.code(202).send(result);
    });
  });

  // A batch belongs to the credential that submitted it: anyone else (but an admin) gets the
  // same 404 as for an unknown id, so batch ids of others cannot even be confirmed.
  const ownBatch = (request: FastifyRequest, id: string): QueuedBatch => {
    const batch = ctx.batches.get(id);
    if (!ctx.auth.canAccess(request.proctorIdentity, batch.record.submittedBy)) throw ctx.batches.notFound(id);
    return batch;
  };
  const queue = ctx.batches.queue;
  app.get("/batch/:id", async (request) => {
    const { id } = parse(BatchParams, request.params, "path parameter");
    const batch = ownBatch(request, id);
    return batchStatusJson(batch, queue.queuePosition(batch));
  });
  app.get("/batch/:id/tasks", async (request): Promise<BatchTasksResponse> => {
    const { id } = parse(BatchParams, request.params, "path parameter");
    const batch = ownBatch(request, id);
    return { batch_id: batch.id, status: batch.status, tasks: [...batch.tasks.values()].map(taskJson) };
  });
  app.get("/batch/:id/task/:task_id", async (request) => {
    const { id, task_id } = parse(TaskParams, request.params, "path parameter");
    return taskDetail(queue, ownBatch(request, id), task_id);
  });
  app.get("/batch/:id/receipt", async (request) => {
    const { id } = parse(BatchParams, request.params, "path parameter");
    return batchReceipt(ctx.receipts, ownBatch(request, id));
  });
  app.post("/batch/:id/cancel", async (request) => {
    const { id } = parse(BatchParams, request.params, "path parameter");
    const batch = ownBatch(request, id);
    await queue.cancel(batch);
    return batchStatusJson(batch, null);
  });
  app.get("/batches", async (request): Promise<BatchListResponse> =>
    queue.list().filter((b) => ctx.auth.canAccess(request.proctorIdentity, b.record.submittedBy)).map((b) => ({
      batch_id: b.id,
      created_at: b.record.createdAt,
      status: b.status,
      total_tasks: b.tasks.size,
      completed_tasks: b.completed,
      passed_tasks: b.passed,
    })),
  );

  let healthCache: { atMs: number; body: HealthResponse; ok: boolean } | null = null;
  app.get("/health", async (_request, reply) => {
    if (!healthCache || Date.now() - healthCache.atMs > 2000) {
      const [dataDir, runtime] = await Promise.all([checkWritable(ctx.dataDir), ctx.runtimeCheck().then(() => "ok", (e: unknown) => String(e instanceof Error ? e.message : e))]);
      const ok = dataDir === "ok" && runtime === "ok";
      healthCache = { atMs: Date.now(), ok, body: { status: ok ? "ok" : "unhealthy", version: SERVER_VERSION, checks: { data_dir: dataDir, runtime } } };
    }
    return reply.code(healthCache.ok ? 200 : 503).send(healthCache.body);
  });

  app.get("/status", async (): Promise<StatusResponse> => {
    const counts = queue.counts();
    return {
      version: SERVER_VERSION,
      uptime_secs: Math.floor((Date.now() - ctx.batches.startedAtMs) / 1000),
      active_batches: counts.active,
      queued_batches: counts.queued,
      total_batches: counts.total,
      completed_batches: counts.completed,
      failed_batches: counts.failed,
      cancelled_batches: counts.cancelled,
      tasks_passed: counts.tasksPassed,
      tasks_failed: counts.tasksFailed,
      max_active_batches: ctx.maxActiveBatches,
      max_queued_batches: ctx.maxQueuedBatches,
      max_concurrent_tasks: ctx.maxConcurrentTasks,
      has_active_batch: counts.active > 0,
      ws_clients: ctx.hub.size,
      auth: ctx.auth.mode,
    };
  });

  app.get("/metrics", async (_request, reply) => {
    const { contentType, body } = await ctx.metrics.render();
    return reply.type(contentType).send(body);
  });

  registerWorkerRoutes(app, ctx.queue ?? null);
  if (ctx.slots) registerSlotRoutes(app, ctx.slots, ctx.auth);

  // The viewer app at /ui (@proctor/viewer's assets and API over the caller's batches).
  const ui = new ServerUi({ queue: ctx.batches.queue, auth: ctx.auth, logger: ctx.logger });
  ui.register(app);

  app.server.on("upgrade", (request: IncomingMessage, socket: Duplex, head: Buffer) => {
    if (ui.handles(request)) return ui.upgrade(request, socket, head);
    handleUpgrade(ctx, request, socket, head).catch((error: unknown) => {
      ctx.logger.error("websocket upgrade failed", { error: String(error) });
      rejectUpgrade(socket, 500, { error: "internal", message: "the server failed to open the WebSocket" });
    });
  });

  return app;
}

async function handleUpgrade(ctx: AppContext, request: IncomingMessage, socket: Duplex, head: Buffer): Promise<void> {
  socket.on("error", (error) => ctx.logger.debug("websocket socket error before upgrade", { error: String(error) }));
  const url = new URL(request.url ?? "/", "http://localhost");
  if (url.pathname !== "/ws") {
    rejectUpgrade(socket, 404, { error: "not_found", message: `no WebSocket at ${url.pathname}; connect to /ws?batch_id=<id>` });
    return;
  }
  let identity: string | null;
  try {
    const pending = ctx.auth.checkHeaders(request.headers);
    // An upgrade has no body: a Content-Digest, if sent, must be that of the empty body.
    const digest = parseContentDigest(request.headers);
    if (digest !== null && digest !== EMPTY_SHA256) {
      rejectUpgrade(socket, 400, { error: "content_digest_mismatch", message: `request header ${CONTENT_DIGEST_HEADER} must be the digest of the empty body on a WebSocket upgrade` });
      return;
    }
    identity = ctx.auth.verifyBody(pending, EMPTY_SHA256).identity;
  } catch (error) {
    if (error instanceof RequestAuthError) {
      ctx.metrics.authFailures.inc({ status: String(error.statusCode) });
      rejectUpgrade(socket, error.statusCode, { error: error.code, message: error.message });
      return;
    }
    throw error;
  }
  const query = WsQuery.safeParse(Object.fromEntries(url.searchParams));
  if (!query.success) {
    rejectUpgrade(socket, 400, { error: "bad_request", message: `query: ${query.error.issues[0]?.message ?? "invalid"}; connect to /ws?batch_id=<id>[&since=<seq>]` });
    return;
  }
  const batch = ctx.batches.queue.find(query.data.batch_id);
  if (!batch || !ctx.auth.canAccess(identity, batch.record.submittedBy)) {
    rejectUpgrade(socket, 404, { error: "not_found", message: `no batch with id ${JSON.stringify(query.data.batch_id)}` });
    return;
  }
  ctx.hub.upgrade(request, socket, head, batch, query.data.since ?? null);
}

const STATUS_TEXT: Record<number, string> = { 400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found", 429: "Too Many Requests", 500: "Internal Server Error", 503: "Service Unavailable" };

function rejectUpgrade(socket: Duplex, status: number, body: { error: string; message: string }): void {
  if (socket.destroyed) return;
  const json = JSON.stringify(body);
  socket.end(
    `HTTP/1.1 ${status} ${STATUS_TEXT[status] ?? "Error"}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(json)}\r\n\r\n${json}`,
  );
  socket.destroy();
}

function sendError(error: FastifyError | Error, request: FastifyRequest, reply: FastifyReply, ctx: AppContext): FastifyReply {
  let status = 500;
  let code = "internal";
  let message = "the server failed to handle the request; see its log";
  let retryAfterSec: number | null = null;
  error = fromEngineError(error);
  if (error instanceof ServerError) {
    [status, code, message] = [error.statusCode, error.code, error.message];
    retryAfterSec = error.retryAfterSec;
  } else if (error instanceof RequestAuthError) {
    [status, code, message] = [error.statusCode, error.code, error.message];
    if (error instanceof ReplayCacheFullError || error instanceof ReplayCacheUnavailableError) retryAfterSec = Math.max(1, Math.ceil(error.retryAfterMs / 1000));
    ctx.metrics.authFailures.inc({ status: String(status) });
  } else if ("statusCode" in error && typeof error.statusCode === "number" && error.statusCode >= 400 && error.statusCode < 500) {
    // Fastify's own client errors (body too large, bad content type, ...).
    status = error.statusCode;
    code = status === 413 ? "payload_too_large" : "bad_request";
    message = error.message;
  } else {
    ctx.logger.error("request failed", { method: request.method, url: request.url, error: error instanceof Error ? (error.stack ?? error.message) : String(error) });
  }
  if (retryAfterSec !== null) reply.header("retry-after", String(retryAfterSec));
  // The body may still be arriving: do not keep the connection (and read the rest) after refusing it.
  if (!request.raw.complete || status === 401 || status === 403 || status === 413) reply.header("connection", "close");
  return reply.code(status).send({ error: code, message });
}

async function checkWritable(dir: string): Promise<string> {
  const probe = join(dir, `.health-${randomUUID()}`);
  try {
    await writeFile(probe, "ok");
    await rm(probe, { force: true });
    return "ok";
  } catch (error) {
    return `data dir ${dir} is not writable: ${(error as Error).message}`;
  }
}
