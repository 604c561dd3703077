import { createHash, randomUUID } from "node:crypto";
import { createReadStream } from "node:fs";
import { stat } from "node:fs/promises";
import { basename } from "node:path";
import { Readable } from "node:stream";
import { contentDigestHeader, signRequest } from "@proctor/auth";
import type { Keypair } from "@proctor/auth";
import { request } from "undici";
import WebSocket from "ws";
import { z } from "zod";
import { ClientError, unreachableError } from "./errors";
import { BatchListResponse, BatchStatusResponse, BatchTasksResponse, ErrorBody, SubmitResponse, TaskDetailResponse, WireEnvelope } from "./wire";

/** How a client proves who it is: an Epistula keypair, a bearer token, or nothing (auth none). */
export interface ClientAuth {
  keypair?: Keypair;
  token?: string;
  /** The server's SS58 address, when it requires Epistula-Signed-For. */
  signedFor?: string;
}

export interface SubmitBatchOptions extends ClientAuth {
  /** Base URL, e.g. http://127.0.0.1:8080 */
  server: string;
  /** A .tar.gz / .tar / .zip holding tasks/ and agent_code/. */
  archivePath: string;
  concurrentTasks?: number;
  /** `?model=`: the model the batch's agent gets through the server's model proxy (one the server allows). */
  model?: string;
  /** `?agent=`: one of the server's installed CLI agents (`proctor serve --agents`); the archive then holds tasks/ only. */
  agent?: string;
  /** `?max_cost=&max_tokens=&trial_max_cost=&on_budget=`: the batch's budgets (USD, tokens); at a spent budget no more tasks start. */
  budget?: { maxCostUsd?: number; maxTokens?: number; trialMaxCostUsd?: number; onBudget?: "finish" | "stop" };
  /** Called with the 202 answer, before the WebSocket is opened. */
  onSubmitted?: (result: SubmitResponse) => void;
  /** Every WebSocket message (snapshot, batch_started, task_*, batch_complete), in order. */
  onEvent?: (event: WireEnvelope) => void;
  signal?: AbortSignal;
  /** Reconnect attempts when the WebSocket drops before batch_complete (default 10). */
  maxReconnects?: number;
  /** Called before each WebSocket reconnect (see FollowOptions). */
  onReconnect?: FollowOptions["onReconnect"];
  /**
   * Times an upload refused for the server's upload caps (429/503 `too_many_uploads`) is retried
   * after its Retry-After (at most 60 s each); default 3.
   */
  uploadRetries?: number;
  /** Called before such a retry. */
  onUploadRetry?: (info: { attempt: number; delaySec: number; message: string }) => void;
}

const FINAL: ReadonlySet<string> = new Set(["completed", "failed", "cancelled"]);

/** Auth headers for one request whose body has this sha256 (GETs and WebSockets sign the empty body). */
export function authHeaders(auth: ClientAuth, bodySha256Hex: string): Record<string, string> {
  if (auth.keypair) return signRequest({ keypair: auth.keypair, body: { sha256Hex: bodySha256Hex }, signedFor: auth.signedFor });
  if (auth.token) return { authorization: `Bearer ${auth.token}` };
  return {};
}

const EMPTY_SHA256 = createHash("sha256").digest("hex");

/**
 * A signed request with an empty body; returns the JSON answer (checked against `schema` when
 * given) or throws ClientError.
 */
export async function requestJson<T = unknown>(server: string, method: "GET" | "POST", path: string, auth: ClientAuth, signal?: AbortSignal, schema?: z.ZodType<T>): Promise<T> {
  let response: Awaited<ReturnType<typeof request>>;
  try {
    response = await request(new URL(path, server), { method, headers: authHeaders(auth, EMPTY_SHA256), signal });
  } catch (error) {
    throw unreachableError(server, error) ?? error;
  }
  return readJson(response, `${method} ${path}`, schema);
}

async function readJson<T>(response: Awaited<ReturnType<typeof request>>, what: string, schema?: z.ZodType<T>): Promise<T> {
  const text = await response.body.text();
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch (error) {
    throw new ClientError(response.statusCode, "bad_response", `${what}: the server answered ${response.statusCode} with non-JSON: ${text.slice(0, 200)}`, { cause: error });
  }
  if (response.statusCode >= 400) {
    const parsed = ErrorBody.safeParse(body);
    const failure = parsed.success
      ? new ClientError(response.statusCode, parsed.data.error, `${what}: ${response.statusCode} ${parsed.data.message}`)
      : new ClientError(response.statusCode, "error", `${what}: ${response.statusCode} ${text.slice(0, 200)}`);
    const retryAfter = Number(response.headers["retry-after"]);
    if (Number.isFinite(retryAfter) && retryAfter >= 0) failure.retryAfterSec = retryAfter;
    throw failure;
  }
  if (!schema) return body as T;
  const checked = schema.safeParse(body);
  if (!checked.success) {
    const issue = checked.error.issues[0];
    throw new ClientError(response.statusCode, "bad_response", `${what}: the answer does not follow the wire protocol at ${issue?.path.join(".") || "(root)"}: ${issue?.message ?? "invalid"}; is the server a compatible Proctor version?`);
  }
  return checked.data;
}

/**
 * Upload an archive to POST /submit (streamed from disk, signed over its exact multipart bytes,
 * whose sha256 also goes in `Content-Digest` so the server checks the signature first),
 * follow the batch on the WebSocket (reconnecting with `since` if it drops), and return the
 * final GET /batch/:id. Throws ClientError for an error answer.
 */
export async function submitBatch(options: SubmitBatchOptions): Promise<BatchStatusResponse> {
  const submitted = await uploadArchive(options);
  options.onSubmitted?.(submitted);
  await followBatch({ ...options, batchId: submitted.batch_id });
  return requestJson(options.server, "GET", `/batch/${encodeURIComponent(submitted.batch_id)}`, options, options.signal, BatchStatusResponse);
}

/** POST /submit only; returns the 202 answer. Retries (re-signed) while the server's upload caps are full. */
export async function uploadArchive(options: SubmitBatchOptions): Promise<SubmitResponse> {
  const retries = options.uploadRetries ?? 3;
  for (let attempt = 1; ; attempt++) {
    try {
      return await uploadOnce(options);
    } catch (error) {
      if (!(error instanceof ClientError) || error.code !== "too_many_uploads" || attempt > retries) throw error;
      const delaySec = Math.min(error.retryAfterSec ?? 5, 60);
      options.onUploadRetry?.({ attempt, delaySec, message: error.message });
      await new Promise((resolve) => setTimeout(resolve, delaySec * 1000));
      options.signal?.throwIfAborted();
    }
  }
}

async function uploadOnce(options: SubmitBatchOptions): Promise<SubmitResponse> {
  const info = await stat(options.archivePath).catch((error: unknown) => {
    throw new ClientError(0, "archive", `${options.archivePath}: cannot be read (${(error as NodeJS.ErrnoException).code ?? String(error)}): give the .tar.gz, .tar or .zip archive to upload`, { cause: error });
  });
  if (!info.isFile()) throw new ClientError(0, "archive", `${options.archivePath} is not a file: upload an archive; pack a directory first (tar czf submission.tar.gz -C ${options.archivePath} .)`);
  const { size } = info;
  const boundary = `----proctor-${randomUUID()}`;
  const filename = basename(options.archivePath).replace(/["\r\n\\]/g, "_");
  const head = Buffer.from(
    `--${boundary}\r\nContent-Disposition: form-data; name="archive"; filename="${filename}"\r\nContent-Type: application/octet-stream\r\n\r\n`,
  );
  const tail = Buffer.from(`\r\n--${boundary}--\r\n`);
  // The signature covers sha256 of the exact body, so hash it first (one pass over the file).
  // It is also sent as Content-Digest (RFC 9530): the server verifies the signature from the
  // headers before it reads the body, then checks the body against the digest as it arrives.
  const hash = createHash("sha256").update(head);
  for await (const chunk of createReadStream(options.archivePath)) hash.update(chunk as Buffer);
  hash.update(tail);
  const bodySha256 = hash.digest("hex");
  const archivePath = options.archivePath;
  const body = Readable.from(
    (async function* () {
      yield head;
      yield* createReadStream(archivePath);
      yield tail;
    })(),
  );
  const params = new URLSearchParams();
  if (options.concurrentTasks !== undefined) params.set("concurrent_tasks", String(options.concurrentTasks));
  if (options.model !== undefined) params.set("model", options.model);
  if (options.agent !== undefined) params.set("agent", options.agent);
  const budget = options.budget ?? {};
  if (budget.maxCostUsd !== undefined) params.set("max_cost", String(budget.maxCostUsd));
  if (budget.maxTokens !== undefined) params.set("max_tokens", String(budget.maxTokens));
  if (budget.trialMaxCostUsd !== undefined) params.set("trial_max_cost", String(budget.trialMaxCostUsd));
  if (budget.onBudget !== undefined) params.set("on_budget", budget.onBudget);
  const query = params.size === 0 ? "" : `?${params.toString()}`;
  let response: Awaited<ReturnType<typeof request>>;
  try {
    response = await request(new URL(`/submit${query}`, options.server), {
      method: "POST",
      body,
      headers: {
        ...authHeaders(options, bodySha256),
        "content-digest": contentDigestHeader(bodySha256),
        "content-type": `multipart/form-data; boundary=${boundary}`,
        "content-length": String(head.length + size + tail.length),
      },
      signal: options.signal,
    });
  } catch (error) {
    const code = (error as { code?: unknown }).code;
    if (!options.signal?.aborted) {
      const unreachable = unreachableError(options.server, error);
      if (unreachable) throw unreachable;
    }
    if (options.signal?.aborted || typeof code !== "string" || !DROPPED_CONNECTION.has(code)) throw error;
    // The server refuses an upload from its headers and closes without reading the body; the
    // write can then fail before its answer is read. A signed GET gets the same refusal, if any.
    const probe = await request(new URL("/batches", options.server), { method: "GET", headers: authHeaders(options, EMPTY_SHA256), signal: options.signal });
    await readJson(probe, "POST /submit (the same credentials on GET /batches)");
    throw new ClientError(0, "upload_dropped", `POST /submit: the server closed the connection while the archive was being sent (${code}), though it accepts this client's credentials; its log says why (an archive over its upload limit, or a restart)`, { cause: error });
  }
  return readJson(response, "POST /submit", SubmitResponse);
}

/** Socket errors of a connection the other side closed while the request was being written. */
const DROPPED_CONNECTION = new Set(["EPIPE", "ECONNRESET", "UND_ERR_SOCKET"]);

/** What followBatch needs: where, who, which batch, and what to do with each message. */
export interface FollowOptions extends ClientAuth {
  server: string;
  batchId: string;
  /** Resume after this seq (events up to it were seen already); default: from the snapshot on. */
  since?: number;
  onEvent?: (event: WireEnvelope) => void;
  signal?: AbortSignal;
  /** Reconnect attempts when the WebSocket drops before batch_complete (default 10). */
  maxReconnects?: number;
  /** Called before each reconnect, with why the connection ended and how long until the next try. */
  onReconnect?: (info: { attempt: number; maxReconnects: number; reason: string; delayMs: number }) => void;
}

/**
 * Follow a batch's WebSocket until batch_complete (or a snapshot of a finished batch). A dropped
 * connection is reopened with `since` = the last seq seen, so no event is lost or repeated.
 */
export async function followBatch(options: FollowOptions): Promise<void> {
  let lastSeq: number | null = options.since ?? null;
  let failures = 0;
  const maxReconnects = options.maxReconnects ?? 10;
  // A server that never answered is a wrong URL or a server that is down: say so at once.
  let connected = false;
  for (;;) {
    options.signal?.throwIfAborted();
    const outcome = await followOnce(options, lastSeq, (envelope) => {
      connected = true;
      if (envelope.event === "snapshot") {
        // With `since`, the server sends the snapshot first and then every event after `since`
        // (the snapshot may be ahead of them), so only a first connect without `since` starts at
        // the snapshot's seq.
        lastSeq ??= envelope.seq;
      } else {
        if (lastSeq !== null && envelope.seq <= lastSeq) return;
        lastSeq = envelope.seq;
      }
      failures = 0;
      options.onEvent?.(envelope);
    });
    if (outcome.done) return;
    if (!connected && outcome.unreachable) throw outcome.unreachable;
    failures += 1;
    if (failures > maxReconnects) throw outcome.unreachable ?? new ClientError(0, "websocket", `lost the WebSocket for batch ${options.batchId} ${failures} times: ${outcome.reason}`);
    const delayMs = Math.min(250 * 2 ** (failures - 1), 5000);
    options.onReconnect?.({ attempt: failures, maxReconnects, reason: outcome.reason, delayMs });
    await new Promise((resolve) => setTimeout(resolve, delayMs));
  }
}

function followOnce(
  options: FollowOptions,
  since: number | null,
  onEnvelope: (envelope: WireEnvelope) => void,
): Promise<{ done: true } | { done: false; reason: string; unreachable?: ClientError }> {
  const url = new URL("/ws", options.server);
  url.protocol = url.protocol === "https:" ? "wss:" : "ws:";
  url.searchParams.set("batch_id", options.batchId);
  if (since !== null) url.searchParams.set("since", String(since));
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url, { headers: authHeaders(options, EMPTY_SHA256) });
    let done = false;
    const onAbort = () => ws.terminate();
    options.signal?.addEventListener("abort", onAbort, { once: true });
    ws.on("unexpected-response", (_request, response) => {
      let text = "";
      response.on("data", (chunk: Buffer) => (text += chunk.toString()));
      response.on("end", () => {
        const status = response.statusCode ?? 0;
        let parsed: { error?: string; message?: string } = {};
        try {
          parsed = JSON.parse(text) as typeof parsed;
        } catch {
          parsed = { message: text.slice(0, 200) };
        }
        options.signal?.removeEventListener("abort", onAbort);
        ws.terminate();
        if (status >= 400 && status < 500) reject(new ClientError(status, parsed.error ?? "error", `WebSocket /ws: ${status} ${parsed.message ?? ""}`));
        else resolve({ done: false, reason: `upgrade answered ${status}` });
      });
    });
    ws.on("message", (data) => {
      let envelope: WireEnvelope;
      try {
        envelope = WireEnvelope.parse(JSON.parse(String(data)));
      } catch (error) {
        // A server that breaks the protocol is an error to report, not a message to skip.
        options.signal?.removeEventListener("abort", onAbort);
        ws.terminate();
        reject(new ClientError(0, "bad_response", `WebSocket /ws: a message does not follow the wire protocol (${error instanceof Error ? error.message.slice(0, 300) : String(error)}): ${String(data).slice(0, 200)}`, { cause: error }));
        return;
      }
      onEnvelope(envelope);
      if (envelope.event === "batch_complete") done = true;
      if (envelope.event === "snapshot" && FINAL.has(String(envelope.data.status))) done = true;
    });
    let unreachable: ClientError | null = null;
    ws.on("error", (error) => {
      // "close" follows with the outcome.
      unreachable ??= unreachableError(options.server, error);
    });
    ws.on("close", (code, reason) => {
      options.signal?.removeEventListener("abort", onAbort);
      if (options.signal?.aborted) reject(options.signal.reason);
      else if (done) resolve({ done: true });
      else if (unreachable) resolve({ done: false, reason: unreachable.message, unreachable });
      else resolve({ done: false, reason: `closed with ${code}${reason.length > 0 ? ` ${reason.toString()}` : ""}` });
    });
  });
}

/**
 * The typed client of one server with one credential: every answer is checked against the wire
 * schemas (./wire.ts), every request signed (Epistula), bearer-authenticated or plain (auth none).
 */
export class ProctorClient {
  constructor(readonly options: ClientAuth & { server: string }) {}

  /** Upload, follow live, and return the final status (see submitBatch). */
  submit(options: Omit<SubmitBatchOptions, "server" | keyof ClientAuth>): Promise<BatchStatusResponse> {
    return submitBatch({ ...this.options, ...options });
  }

  /** POST /submit only. */
  upload(options: Omit<SubmitBatchOptions, "server" | keyof ClientAuth>): Promise<SubmitResponse> {
    return uploadArchive({ ...this.options, ...options });
  }

  /** WS /ws with resume from `since` (see followBatch). */
  follow(batchId: string, options: Omit<FollowOptions, "server" | "batchId" | keyof ClientAuth> = {}): Promise<void> {
    return followBatch({ ...this.options, ...options, batchId });
  }

  /** GET /batch/:id */
  status(batchId: string, signal?: AbortSignal): Promise<BatchStatusResponse> {
    return this.get(`/batch/${encodeURIComponent(batchId)}`, BatchStatusResponse, signal);
  }

  /** GET /batch/:id/tasks */
  tasks(batchId: string, signal?: AbortSignal): Promise<BatchTasksResponse> {
    return this.get(`/batch/${encodeURIComponent(batchId)}/tasks`, BatchTasksResponse, signal);
  }

  /** GET /batch/:id/task/:task_id */
  task(batchId: string, taskId: string, signal?: AbortSignal): Promise<TaskDetailResponse> {
    return this.get(`/batch/${encodeURIComponent(batchId)}/task/${encodeURIComponent(taskId)}`, TaskDetailResponse, signal);
  }

  /** GET /batches */
  batches(signal?: AbortSignal): Promise<BatchListResponse> {
    return this.get("/batches", BatchListResponse, signal);
  }

  /** GET /batch/:id/receipt: the finished batch's signed receipt, as the server wrote it (check it with verifyReceipt). */
  receipt(batchId: string, signal?: AbortSignal): Promise<Record<string, unknown>> {
    return this.get(`/batch/${encodeURIComponent(batchId)}/receipt`, z.record(z.string(), z.unknown()), signal);
  }

  /** POST /batch/:id/cancel */
  cancel(batchId: string, signal?: AbortSignal): Promise<BatchStatusResponse> {
    return requestJson(this.options.server, "POST", `/batch/${encodeURIComponent(batchId)}/cancel`, this.options, signal, BatchStatusResponse);
  }

  private get<T>(path: string, schema: z.ZodType<T>, signal?: AbortSignal): Promise<T> {
    return requestJson(this.options.server, "GET", path, this.options, signal, schema);
  }
}
