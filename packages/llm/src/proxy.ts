import { chmod, mkdtemp, rm } from "node:fs/promises";
import { createServer, type IncomingMessage, type OutgoingHttpHeaders, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createParser } from "eventsource-parser";
import { request, type Dispatcher } from "undici";
import { silentLogger, type Logger } from "@proctor/schema";
import { UNREACHABLE_ATTEMPTS, unreachableCode } from "./errors";
import { AdaptiveLimiter } from "./limiter";
import { Session, tokenKey, type ModelProxySession, type ModelProxySessionOptions } from "./proxy-session";
import { DEFAULT_RETRY_POLICY, backoffDelay, parseRetryAfter, systemClock, type Clock, type RetryPolicy } from "./retry";
import { StreamReply, conversationOf, errorBody, inputsOf, pinRequest, protocolOfPath, replyOf, type WireProtocol, type WireReply } from "./wire";

export type { ModelProxySession, ModelProxySessionOptions, ModelProxyUsage } from "./proxy-session";

/** Request bodies above this are refused (413): a conversation that large is a runaway, not a task. */
const MAX_BODY_BYTES = 32 * 1024 * 1024;
/** An error body from upstream is kept (redacted) up to this many bytes. */
const MAX_ERROR_BYTES = 64 * 1024;

/** Request headers passed upstream (everything else, the agent's token above all, stays here). */
const FORWARDED_HEADERS: Record<WireProtocol, readonly string[]> = {
  "anthropic-messages": ["anthropic-version", "anthropic-beta", "user-agent", "x-app"],
  "openai-responses": ["openai-beta", "user-agent", "originator", "session_id", "session-id", "x-client-request-id"],
  "openai-chat": ["openai-beta", "user-agent"],
};
/** Response headers passed back to the agent. */
const RETURNED_HEADERS = ["retry-after", "retry-after-ms", "x-request-id", "request-id", "openai-processing-ms"];

export interface ModelProxyOptions {
  /**
   * The real endpoint's API root, e.g. https://api.openai.com/v1 or https://api.anthropic.com/v1:
   * a request to the proxy's /v1/<route> goes to <root>/<route>. A URL without a path gets /v1.
   */
  upstreamBaseUrl: string;
  /** The real key: sent upstream only (`x-api-key` for Anthropic Messages, `Authorization: Bearer` otherwise), never to a sandbox, never in an answer, log or record. */
  apiKey?: string;
  /** Name of the env var the key came from, for messages. */
  apiKeyEnv?: string;
  /** The model every request is sent with (the proxy replaces whatever the agent asked for). */
  model: string;
  /** Most upstream requests in flight over every session (shrinks on 429s). Default 8. */
  maxConcurrency?: number;
  /** One upstream request's limit on waiting for headers and between body chunks. Default 10 minutes. */
  requestTimeoutMs?: number;
  /** How long 429s, 5xx and connection errors are retried before the agent sees them. Default DEFAULT_RETRY_POLICY. */
  retry?: Partial<RetryPolicy>;
  clock?: Clock;
  /** Also listen on this Unix socket path (created; its directory must exist). Default: a new private temp dir. */
  socketPath?: string;
  dispatcher?: Dispatcher;
  logger?: Logger;
}

export interface ModelProxy {
  /** http://127.0.0.1:<port>/v1: for sandboxes that are host processes (the local runtime). */
  readonly tcpBaseUrl: string;
  /** The Unix socket the proxy also listens on: for sandboxes reached through a forwarder. */
  readonly socketPath: string;
  /** The model every request is sent with. */
  readonly model: string;
  /** The adaptive in-flight limit every session shares. */
  readonly limiter: AdaptiveLimiter;
  openSession(options?: ModelProxySessionOptions): ModelProxySession;
  close(): Promise<void>;
}

function readBody(req: IncomingMessage): Promise<Buffer | null> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on("data", (chunk: Buffer) => {
      size += chunk.length;
      if (size > MAX_BODY_BYTES) {
        resolve(null);
        req.destroy();
        return;
      }
      chunks.push(chunk);
    });
    req.on("end", () => resolve(Buffer.concat(chunks)));
    req.on("error", reject);
  });
}

async function readLimited(body: Dispatcher.ResponseData["body"]): Promise<string> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of body as AsyncIterable<Buffer>) {
    if (size < MAX_ERROR_BYTES) chunks.push(chunk);
    size += chunk.length;
  }
  return Buffer.concat(chunks).subarray(0, MAX_ERROR_BYTES).toString("utf8");
}

function retryable(status: number): boolean {
  return status === 429 || status === 408 || status === 409 || status === 425 || status >= 500;
}

/** The upstream API root: the URL as given, or with /v1 when it has no path. */
export function upstreamRoot(baseUrl: string): string {
  let url: URL;
  try {
    url = new URL(baseUrl);
  } catch {
    throw new TypeError(`model proxy: base URL ${JSON.stringify(baseUrl)} is not a URL (expected e.g. https://api.openai.com/v1)`);
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") throw new TypeError(`model proxy: base URL ${baseUrl} must be http(s)`);
  const trimmed = baseUrl.replace(/\/+$/, "");
  return url.pathname === "/" || url.pathname === "" ? `${trimmed}/v1` : trimmed;
}

/**
 * A model proxy for agents that run inside a sandbox and call a model API themselves. Each
 * trial gets a session with a random token (what the sandbox holds instead of the key); the
 * proxy checks it, pins the model, enforces the session's budget, sends the request upstream
 * with the real key, retries 429s / 5xx / connection errors (honouring Retry-After) under one
 * adaptive in-flight limit, passes streamed answers through as they arrive, and records every
 * exchange as an ATIF-shaped trajectory with usage.
 *
 * Routes: `POST /v1/messages` and `/v1/messages/count_tokens` (Anthropic Messages),
 * `POST /v1/responses` (OpenAI Responses), `POST /v1/chat/completions` (Chat Completions),
 * each streamed (`stream: true`, server-sent events) or not; `GET /v1/models`.
 *
 * Listens on 127.0.0.1 (TCP, for host-process sandboxes) and on a Unix socket (for container
 * sandboxes, reached through a forwarder inside the container's network namespace).
 */
export async function startModelProxy(options: ModelProxyOptions): Promise<ModelProxy> {
  const root = upstreamRoot(options.upstreamBaseUrl);
  const apiKey = options.apiKey || undefined;
  const keyName = options.apiKeyEnv ? `$${options.apiKeyEnv}` : "the API key";
  const logger = options.logger ?? silentLogger;
  const timeoutMs = options.requestTimeoutMs ?? 10 * 60_000;
  const policy: RetryPolicy = { ...DEFAULT_RETRY_POLICY, ...options.retry };
  /** Whether the upstream ever gave an HTTP answer: until it has, refused connections mean a wrong URL. */
  let upstreamAnswered = false;
  const clock = options.clock ?? systemClock;
  const limiter = new AdaptiveLimiter({ max: options.maxConcurrency ?? 8, clock });
  const sessions = new Map<string, Session>();
  const redact = (text: string) => (apiKey ? text.split(apiKey).join("[redacted]") : text);

  const sendError = (res: ServerResponse, protocol: WireProtocol | null, status: number, code: string, message: string, headers: OutgoingHttpHeaders = {}) => {
    if (res.headersSent) return void res.destroy();
    res.writeHead(status, { "content-type": "application/json", ...headers });
    res.end(errorBody(protocol, status, code, message));
  };

  const upstreamHeaders = (req: IncomingMessage, protocol: WireProtocol, stream: boolean): Record<string, string> => {
    const headers: Record<string, string> = { "content-type": "application/json", accept: stream ? "text/event-stream" : "application/json", "accept-encoding": "identity" };
    for (const name of FORWARDED_HEADERS[protocol]) {
      const value = req.headers[name];
      if (typeof value === "string") headers[name] = value;
    }
    if (protocol === "anthropic-messages") {
      headers["anthropic-version"] ??= "2023-06-01";
      if (apiKey) headers["x-api-key"] = apiKey;
    } else if (apiKey) {
      headers.authorization = `Bearer ${apiKey}`;
    }
    return headers;
  };

  const returnedHeaders = (headers: Record<string, string | string[] | undefined>): OutgoingHttpHeaders => {
    const out: OutgoingHttpHeaders = {};
    for (const name of RETURNED_HEADERS) if (headers[name] !== undefined) out[name] = headers[name];
    return out;
  };

  /** An upstream answer the agent must not retry its way out of: marks the session fatal. */
  const fatalFor = (status: number, text: string, url: string): string | null => {
    if (status === 401 || status === 403) return `the model endpoint ${url} answered ${status} to Proctor's key from ${keyName} (model "${options.model}")`;
    if (status === 404 || (status === 400 && /model_not_found|does not exist|unknown model|invalid model|not_found_error/i.test(text))) {
      return `the model endpoint ${url} answered ${status} for model "${options.model}" (unknown model or wrong base URL)`;
    }
    return null;
  };

  const handle = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const [path = "", query = ""] = (req.url ?? "").split("?");
    // Claude Code checks that its base URL answers before it starts; nothing secret here.
    if ((req.method === "HEAD" || req.method === "GET") && path === "/api/hello") {
      req.resume();
      res.writeHead(200, { "content-type": "text/plain" });
      return void res.end(req.method === "HEAD" ? undefined : "ok");
    }
    const route = protocolOfPath(path);
    const protocol = route?.protocol ?? null;
    const auth = req.headers.authorization ?? "";
    const token = /^Bearer\s+(.+)$/i.exec(auth)?.[1]?.trim() ?? (typeof req.headers["x-api-key"] === "string" ? req.headers["x-api-key"] : "");
    const session = token ? sessions.get(tokenKey(token)) : undefined;
    if (!session) {
      req.resume();
      return sendError(res, protocol, 401, "invalid_api_key", "Proctor model proxy: this token is not valid (the trial it belonged to has ended, or it never existed)");
    }
    if (req.method === "GET" && (path === "/v1/models" || path === "/models")) {
      res.writeHead(200, { "content-type": "application/json" });
      const entry = { id: options.model, object: "model", type: "model", display_name: options.model, owned_by: "proctor", created: 0 };
      return void res.end(JSON.stringify({ object: "list", data: [entry], has_more: false, first_id: options.model, last_id: options.model }));
    }
    if (req.method !== "POST" || !route || !protocol) {
      req.resume();
      return sendError(res, protocol, 404, "not_found", `Proctor model proxy: no route ${req.method ?? ""} ${path}; it serves POST /v1/messages, /v1/messages/count_tokens, /v1/responses, /v1/chat/completions and GET /v1/models`);
    }
    const raw = await readBody(req);
    if (raw === null) return sendError(res, protocol, 413, "request_too_large", `Proctor model proxy: request body above ${MAX_BODY_BYTES} bytes`);
    let body: Record<string, unknown>;
    let items: unknown[] | null = null;
    try {
      const parsed: unknown = JSON.parse(raw.toString("utf8"));
      if (!parsed || typeof parsed !== "object" || Array.isArray(parsed)) throw new Error("not an object");
      body = parsed as Record<string, unknown>;
      items = conversationOf(protocol, body);
      if (items === null) throw new Error("no conversation");
    } catch {
      const field = protocol === "openai-responses" ? "an input" : "a messages array";
      return sendError(res, protocol, 400, "invalid_request_error", `Proctor model proxy: the body must be a JSON ${protocol} request with ${field}`);
    }
    if (!route.countTokens) {
      const over = session.overBudget();
      if (over !== null) {
        session.markExceeded(over);
        return sendError(res, protocol, 402, "budget_exceeded", over);
      }
    }
    const stream = body.stream === true && !route.countTokens;
    const requestedModel = typeof body.model === "string" ? body.model : null;
    const url = `${root}${path.replace(/^\/v1(?=\/)/, "")}${protocol === "anthropic-messages" && query === "beta=true" ? "?beta=true" : ""}`;
    // Sent as received when nothing changes (the usual case: the CLI was started with --model), else re-encoded.
    const pinned = pinRequest(protocol, body, options.model);
    const payload = requestedModel === options.model && pinned.stream_options === body.stream_options ? raw : JSON.stringify(pinned);
    const headers = upstreamHeaders(req, protocol, stream);
    if (route.countTokens) session.totals.countTokens++;
    else session.totals.forwarded++;

    // The agent hanging up (killed at its timeout, say) stops the upstream request too.
    const gone = new AbortController();
    res.on("close", () => {
      if (!res.writableFinished) gone.abort(new Error("the agent closed the connection"));
    });

    const started = performance.now();
    let firstByteMs: number | null = null;
    let attempts = 0;
    let lastStatus: number | null = null;
    let lastError = "";
    let lastHeaders: OutgoingHttpHeaders = {};
    // What the agent sent that is new goes into the trajectory once the exchange is over.
    let conversation: { reused: number; added: unknown[] } | null = null;
    const recordInputs = () => {
      if (route.countTokens || conversation) return;
      conversation = session.newItems(items ?? []);
      session.recordInputs(inputsOf(protocol, conversation.added));
    };
    const info = (status: number | null, error?: string) => {
      recordInputs(); // the agent's inputs come before the answer in the trajectory
      return {
        protocol,
        stream,
        status,
        attempts,
        durationMs: Math.round(performance.now() - started),
        firstByteMs,
        requestedModel,
        messageCount: items?.length ?? 0,
        reusedMessages: conversation?.reused ?? 0,
        ...(error !== undefined ? { error } : {}),
      };
    };

    for (;;) {
      attempts++;
      let release: () => void;
      try {
        release = await limiter.acquire(gone.signal);
      } catch {
        return; // the agent left while waiting for a slot
      }
      let answer: Dispatcher.ResponseData | null = null;
      try {
        const sent = request(url, {
          method: "POST",
          headers,
          body: payload,
          headersTimeout: timeoutMs,
          bodyTimeout: timeoutMs,
          signal: gone.signal,
          ...(options.dispatcher ? { dispatcher: options.dispatcher } : {}),
        });
        // Reading the request for the trajectory overlaps the upstream's work instead of delaying the answer.
        if (attempts === 1) setImmediate(recordInputs);
        answer = await sent;
      } catch (error) {
        release();
        if (gone.signal.aborted) return;
        lastStatus = null;
        lastError = `connection error: ${redact(error instanceof Error ? error.message : String(error))}`;
        const refused = upstreamAnswered ? null : unreachableCode(error);
        if (refused !== null && attempts >= UNREACHABLE_ATTEMPTS) {
          // Never answered and refusing connections: a wrong base URL, not a blip. Stop the run like a rejected key.
          const fatal = `the model endpoint ${url} cannot be reached (${refused}, ${attempts} attempts): is the model server running there? Check --base-url`;
          session.markFatal(fatal);
          session.recordReply(null, info(null, fatal));
          return sendError(res, protocol, 502, "upstream_unreachable", `Proctor model proxy: ${fatal}`);
        }
      }
      if (answer) {
        const status = answer.statusCode;
        upstreamAnswered = true;
        firstByteMs ??= Math.round(performance.now() - started);
        if (status === 429) limiter.onRateLimited();
        if (status >= 200 && status < 300) {
          limiter.onSuccess();
          const out: OutgoingHttpHeaders = { ...returnedHeaders(answer.headers), "content-type": String(answer.headers["content-type"] ?? (stream ? "text/event-stream" : "application/json")) };
          const isStream = stream && String(answer.headers["content-type"] ?? "").includes("text/event-stream");
          if (isStream) {
            await relayStream(answer, res, out, protocol, session, info, release);
            return;
          }
          let text: string;
          try {
            text = await answer.body.text();
          } catch (error) {
            release();
            session.totals.retries++;
            const why = `upstream body cut: ${redact(error instanceof Error ? error.message : String(error))}`;
            session.recordReply(null, info(status, why));
            return sendError(res, protocol, 502, "upstream_cut", `Proctor model proxy: ${why}`);
          }
          release();
          if (route.countTokens) {
            res.writeHead(status, out);
            return void res.end(text);
          }
          let reply: WireReply | null = null;
          try {
            reply = replyOf(protocol, JSON.parse(text));
          } catch {
            reply = null;
          }
          session.totals.requests++;
          session.recordReply(reply, info(status, reply ? undefined : "the answer was not JSON"));
          res.writeHead(status, out);
          return void res.end(text);
        }
        const text = redact(await readLimited(answer.body).catch(() => ""));
        release();
        lastStatus = status;
        lastError = `upstream answered ${status}: ${text.slice(0, 300)}`;
        lastHeaders = returnedHeaders(answer.headers);
        if (!retryable(status)) {
          recordInputs();
          const fatal = route.countTokens && status === 404 ? null : fatalFor(status, text, url);
          if (fatal) {
            session.markFatal(fatal);
            session.recordReply(null, info(status, fatal));
            // Not the agent's fault and not its token: a 502 so its client does not blame its own key.
            return sendError(res, protocol, 502, status === 404 || status === 400 ? "upstream_model_not_found" : "upstream_auth_failed", `Proctor model proxy: ${fatal}`);
          }
          if (!route.countTokens) session.recordReply(null, info(status, lastError));
          res.writeHead(status, { "content-type": String(answer.headers["content-type"] ?? "application/json"), ...lastHeaders });
          return void res.end(text);
        }
      }
      // 429, 5xx or no answer: wait and try again while the policy allows, else pass it on.
      session.totals.retries++;
      const elapsed = performance.now() - started;
      const asked = answer ? parseRetryAfter(answer.headers, clock.now()) : null;
      const backoff = backoffDelay(policy, attempts);
      const delay = asked !== null ? Math.min(asked, policy.maxRetryAfterMs) : !upstreamAnswered && lastStatus === null ? Math.min(backoff, 1000) : backoff;
      if (attempts >= policy.maxAttempts || elapsed + delay > policy.maxElapsedMs) {
        recordInputs();
        if (!route.countTokens) session.recordReply(null, info(lastStatus, `${lastError} (gave up after ${attempts} attempts)`));
        if (lastStatus === null) return sendError(res, protocol, 502, "upstream_unreachable", `Proctor model proxy: the model endpoint did not answer (${lastError.slice(0, 200)})`);
        return sendError(res, protocol, lastStatus, "upstream_error", `Proctor model proxy: ${lastError}`, lastHeaders);
      }
      try {
        await clock.sleep(delay, gone.signal);
      } catch {
        return; // the agent left
      }
    }
  };

  const listener = (req: IncomingMessage, res: ServerResponse) => {
    handle(req, res).catch((error: unknown) => {
      logger.warn("model proxy request failed", { error: redact(error instanceof Error ? error.message : String(error)) });
      sendError(res, null, 500, "proxy_error", "Proctor model proxy: internal error");
    });
  };

  const tcp = createServer(listener);
  const unix = createServer(listener);
  // Streams may be quiet for minutes while a model thinks; the agent's own client decides when to give up.
  for (const server of [tcp, unix]) {
    server.requestTimeout = 0;
    server.headersTimeout = 60_000;
    server.keepAliveTimeout = 65_000;
  }
  let ownDir: string | null = null;
  let socketPath = options.socketPath;
  if (!socketPath) {
    ownDir = await mkdtemp(join(tmpdir(), "proctor-model-"));
    socketPath = join(ownDir, "model.sock");
  }
  const listen = (server: Server, ...args: unknown[]) =>
    new Promise<void>((resolve, reject) => {
      server.once("error", reject);
      (server.listen as (...a: unknown[]) => void)(...args, () => {
        server.off("error", reject);
        resolve();
      });
    });
  await listen(tcp, 0, "127.0.0.1");
  await listen(unix, socketPath);
  // A forwarder in a container may run as any uid; the directory (0700) keeps host users out.
  await chmod(socketPath, 0o666);
  const { port } = tcp.address() as AddressInfo;
  const close = (server: Server) =>
    new Promise<void>((resolve) => {
      server.closeAllConnections();
      server.close(() => resolve());
    });
  let closing: Promise<void> | undefined;
  return {
    tcpBaseUrl: `http://127.0.0.1:${port}/v1`,
    socketPath,
    model: options.model,
    limiter,
    openSession(sessionOptions = {}) {
      for (const [name, value] of [["budgetTokens", sessionOptions.budgetTokens], ["budgetRequests", sessionOptions.budgetRequests]] as const) {
        if (value !== undefined && !(Number.isInteger(value) && value > 0)) throw new RangeError(`model proxy: ${name} must be a whole number > 0, got ${value}`);
      }
      let key = "";
      const session = new Session(sessionOptions, options.model, () => sessions.delete(key));
      key = tokenKey(session.token);
      sessions.set(key, session);
      return session;
    },
    close() {
      closing ??= (async () => {
        for (const session of sessions.values()) session.closed = true;
        sessions.clear();
        await Promise.all([close(tcp), close(unix)]);
        if (ownDir) await rm(ownDir, { recursive: true, force: true });
      })();
      return closing;
    },
  };
}

/**
 * Passes a streamed answer to the agent chunk by chunk (with backpressure), reading its events
 * on the way for the trajectory. A stream that breaks off is broken off for the agent too (its
 * client sees the connection end mid-answer, as it would from the provider) and recorded.
 */
function relayStream(
  answer: Dispatcher.ResponseData,
  res: ServerResponse,
  headers: OutgoingHttpHeaders,
  protocol: WireProtocol,
  session: Session,
  info: (status: number | null, error?: string) => Parameters<Session["recordReply"]>[1],
  release: () => void,
): Promise<void> {
  const reply = new StreamReply(protocol);
  const parser = createParser({ onEvent: (event) => reply.onEvent(event.data) });
  const decoder = new TextDecoder();
  const body = answer.body;
  res.writeHead(answer.statusCode, { ...headers, "cache-control": "no-cache" });
  // The headers leave with the first event (one write, not two), or on their own when the
  // upstream is quiet after its headers, so the agent's client sees the answer has begun.
  const flushLater = setTimeout(() => res.flushHeaders(), 50);
  let corked = false;
  const uncork = () => {
    corked = false;
    res.uncork();
  };
  return new Promise<void>((resolve) => {
    let done = false;
    const finish = (error: string | null) => {
      if (done) return;
      done = true;
      clearTimeout(flushLater);
      release();
      res.off("drain", onDrain);
      const cut = error ?? (reply.complete ? null : "the stream ended before its final event");
      if (cut !== null) session.totals.retries++;
      else session.totals.requests++;
      session.recordReply(reply.result(), info(answer.statusCode, cut ?? reply.error ?? undefined));
      resolve();
    };
    const onDrain = () => body.resume();
    res.on("drain", onDrain);
    body.on("data", (chunk: Buffer) => {
      clearTimeout(flushLater);
      // Chunks that arrive together leave together: one write per turn of the event loop.
      if (!corked) {
        corked = true;
        res.cork();
        process.nextTick(uncork);
      }
      if (!res.write(chunk)) body.pause();
      parser.feed(decoder.decode(chunk, { stream: true }));
    });
    body.on("end", () => {
      res.end();
      finish(null);
    });
    body.on("error", (error: Error) => {
      // Cut for the agent as it was cut for us: no clean end of the chunked body.
      res.destroy();
      finish(`stream cut: ${error.message}`);
    });
    res.on("close", () => {
      if (!res.writableFinished && !done) {
        body.destroy();
        finish("the agent closed the connection mid-stream");
      }
    });
  });
}
