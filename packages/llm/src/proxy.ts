import { createHash, randomBytes } from "node:crypto";
import { chmod, mkdtemp, rm } from "node:fs/promises";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { request, type Dispatcher } from "undici";
import { silentLogger, type Logger } from "@proctor/schema";
import { AdaptiveLimiter } from "./limiter";

/** ATIF ("Agent Trajectory Interchange Format", Harbor RFC 0001) version whose field names the proxy's trajectory uses. */
const ATIF_VERSION = "ATIF-v1.4";
/** Request bodies above this are refused (413): a conversation that large is a runaway, not a task. */
const MAX_BODY_BYTES = 16 * 1024 * 1024;

export interface ModelProxyOptions {
  /** The real OpenAI-compatible endpoint, e.g. https://api.openai.com/v1. */
  upstreamBaseUrl: string;
  /** The real key: sent upstream only, never to a sandbox, never in an answer, log or record. */
  apiKey?: string;
  /** Name of the env var the key came from, for messages. */
  apiKeyEnv?: string;
  /** The model every request is sent with (the proxy replaces whatever the agent asked for). */
  model: string;
  /** Most upstream requests in flight over every session (shrinks on 429s). Default 8. */
  maxConcurrency?: number;
  /** One upstream request's limit on waiting for headers and between body chunks. Default 10 minutes. */
  requestTimeoutMs?: number;
  /** Also listen on this Unix socket path (created; its directory must exist). Default: a new private temp dir. */
  socketPath?: string;
  dispatcher?: Dispatcher;
  logger?: Logger;
}

export interface ModelProxySessionOptions {
  /** Refuse requests once prompt + completion tokens reach this. */
  budgetTokens?: number;
  /** Refuse requests once this many were forwarded. */
  budgetRequests?: number;
  /** Recorded in the trajectory (`session_id`). */
  label?: string;
}

/** Usage of one session, shaped like the llm agent's result.json `agent.usage`. */
export interface ModelProxyUsage {
  inputTokens: number;
  outputTokens: number;
  /** Completions served (upstream 200s). */
  requests: number;
  /** Upstream failures (429, 5xx, connection errors) passed back to the agent, which may retry them. */
  retries: number;
}

/** One trial's access to the proxy: a token, its budget, and what it used. */
export interface ModelProxySession {
  /** Random, unguessable; what the sandbox gets as OPENAI_API_KEY. */
  readonly token: string;
  usage(): ModelProxyUsage;
  /** Set once a request was refused for the budget: the message the agent was sent. */
  readonly exceeded: string | null;
  /** Set when the upstream endpoint rejected Proctor's key or does not know the model: no trial can succeed. */
  readonly fatal: string | null;
  /** Fires once, when `exceeded` or `fatal` is first set. */
  readonly stopped: AbortSignal;
  /** ATIF-shaped trajectory of every request (`trajectory.json`). */
  trajectory(): Record<string, unknown>;
  /** Revokes the token (later requests get 401). Safe to call twice. */
  close(): void;
}

export interface ModelProxy {
  /** http://127.0.0.1:<port>/v1: for sandboxes that are host processes (the local runtime). */
  readonly tcpBaseUrl: string;
  /** The Unix socket the proxy also listens on: for sandboxes reached through a forwarder. */
  readonly socketPath: string;
  /** The model every request is sent with. */
  readonly model: string;
  openSession(options?: ModelProxySessionOptions): ModelProxySession;
  close(): Promise<void>;
}

interface Step {
  step_id: number;
  timestamp: string;
  source: "agent";
  model_name: string;
  message: string;
  reasoning_content?: string;
  tool_calls?: { tool_call_id: string; function_name: string; arguments: Record<string, unknown> }[];
  metrics?: { prompt_tokens: number; completion_tokens: number; cached_tokens?: number };
  extra: Record<string, unknown>;
}

class Session implements ModelProxySession {
  readonly token = `proctor-${randomBytes(32).toString("base64url")}`;
  exceeded: string | null = null;
  fatal: string | null = null;
  closed = false;
  inFlight = 0;
  private readonly stop = new AbortController();
  readonly stopped = this.stop.signal;
  readonly steps: Step[] = [];
  readonly totals = { inputTokens: 0, outputTokens: 0, cachedTokens: 0, requests: 0, retries: 0, forwarded: 0, refused: 0 };
  private lastMessages: string[] = [];

  constructor(
    readonly options: ModelProxySessionOptions,
    private readonly model: string,
    private readonly onClose: () => void,
  ) {}

  usage(): ModelProxyUsage {
    return { inputTokens: this.totals.inputTokens, outputTokens: this.totals.outputTokens, requests: this.totals.requests, retries: this.totals.retries };
  }

  /** Why the next request must be refused, or null. */
  overBudget(): string | null {
    const { budgetTokens, budgetRequests } = this.options;
    const used = this.totals.inputTokens + this.totals.outputTokens;
    if (budgetTokens !== undefined && used >= budgetTokens) {
      return `model budget exceeded: this trial used ${used} of its ${budgetTokens} tokens (--llm-budget-tokens); no more model requests are served`;
    }
    if (budgetRequests !== undefined && this.totals.forwarded >= budgetRequests) {
      return `model budget exceeded: this trial made ${this.totals.forwarded} of its ${budgetRequests} model requests (--llm-budget-requests); no more model requests are served`;
    }
    return null;
  }

  markExceeded(why: string): void {
    this.totals.refused++;
    if (this.exceeded !== null) return;
    this.exceeded = why;
    this.stop.abort(new Error(why));
  }

  markFatal(why: string): void {
    if (this.fatal !== null) return;
    this.fatal = why;
    if (!this.stop.signal.aborted) this.stop.abort(new Error(why));
  }

  /** The messages of this request not already sent by the previous one (conversations grow by appending). */
  newMessages(messages: unknown[]): { reused: number; added: unknown[] } {
    const encoded = messages.map((m) => JSON.stringify(m));
    let reused = 0;
    while (reused < encoded.length && reused < this.lastMessages.length && encoded[reused] === this.lastMessages[reused]) reused++;
    this.lastMessages = encoded;
    return { reused, added: messages.slice(reused) };
  }

  record(step: Omit<Step, "step_id" | "timestamp" | "source" | "model_name">): void {
    this.steps.push({ step_id: this.steps.length + 1, timestamp: new Date().toISOString(), source: "agent", model_name: this.model, ...step });
  }

  trajectory(): Record<string, unknown> {
    return {
      schema_version: ATIF_VERSION,
      session_id: this.options.label ?? "model-proxy",
      agent: { name: "proctor-model-proxy", version: "0.1.0", model_name: this.model },
      steps: this.steps,
      final_metrics: {
        total_prompt_tokens: this.totals.inputTokens,
        total_completion_tokens: this.totals.outputTokens,
        total_cached_tokens: this.totals.cachedTokens,
        total_steps: this.steps.length,
        extra: { requests: this.totals.requests, retries: this.totals.retries, forwarded: this.totals.forwarded, refused: this.totals.refused },
      },
      extra: {
        budget: { tokens: this.options.budgetTokens ?? null, requests: this.options.budgetRequests ?? null },
        exceeded: this.exceeded,
        ...(this.fatal ? { fatal: this.fatal } : {}),
      },
    };
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.onClose();
  }
}

function tokenKey(token: string): string {
  return createHash("sha256").update(token).digest("hex");
}

function parseArguments(text: unknown): Record<string, unknown> {
  if (text && typeof text === "object") return text as Record<string, unknown>;
  try {
    const parsed: unknown = JSON.parse(String(text ?? ""));
    return parsed && typeof parsed === "object" && !Array.isArray(parsed) ? (parsed as Record<string, unknown>) : { _raw: String(text) };
  } catch {
    return { _raw: String(text ?? "") };
  }
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

function sendError(res: ServerResponse, status: number, code: string, message: string): void {
  if (res.headersSent) return void res.end();
  res.writeHead(status, { "content-type": "application/json" });
  res.end(JSON.stringify({ error: { message, type: code, code } }));
}

/**
 * A model proxy for agents that run inside a sandbox and call an OpenAI-compatible API
 * themselves. Each trial gets a session with a random token (its OPENAI_API_KEY); the proxy
 * checks it, forces the configured model, enforces the session's budget, sends the request
 * upstream with the real key, and records usage and an ATIF-shaped trajectory.
 * `POST /v1/chat/completions` (non-streaming) and `GET /v1/models` only.
 *
 * Listens on 127.0.0.1 (TCP, for host-process sandboxes) and on a Unix socket (for container
 * sandboxes, reached through a forwarder inside the container's network namespace).
 */
export async function startModelProxy(options: ModelProxyOptions): Promise<ModelProxy> {
  let upstream: URL;
  try {
    upstream = new URL(options.upstreamBaseUrl);
  } catch {
    throw new TypeError(`model proxy: base URL ${JSON.stringify(options.upstreamBaseUrl)} is not a URL (expected e.g. https://api.openai.com/v1)`);
  }
  if (upstream.protocol !== "http:" && upstream.protocol !== "https:") throw new TypeError(`model proxy: base URL ${options.upstreamBaseUrl} must be http(s)`);
  const upstreamBase = options.upstreamBaseUrl.replace(/\/+$/, "");
  const completionsUrl = `${upstreamBase}/chat/completions`;
  const apiKey = options.apiKey || undefined;
  const keyName = options.apiKeyEnv ? `$${options.apiKeyEnv}` : "the API key";
  const logger = options.logger ?? silentLogger;
  const timeoutMs = options.requestTimeoutMs ?? 10 * 60_000;
  const limiter = new AdaptiveLimiter({ max: options.maxConcurrency ?? 8 });
  const sessions = new Map<string, Session>();
  const redact = (text: string) => (apiKey ? text.split(apiKey).join("[redacted]") : text);

  const handle = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const path = (req.url ?? "").split("?")[0] ?? "";
    const auth = req.headers.authorization ?? "";
    const token = /^Bearer\s+(.+)$/i.exec(auth)?.[1]?.trim() ?? (typeof req.headers["x-api-key"] === "string" ? req.headers["x-api-key"] : "");
    const session = token ? sessions.get(tokenKey(token)) : undefined;
    if (!session) {
      req.resume();
      return sendError(res, 401, "invalid_api_key", "Proctor model proxy: this token is not valid (the trial it belonged to has ended, or it never existed)");
    }
    if (req.method === "GET" && (path === "/v1/models" || path === "/models")) {
      res.writeHead(200, { "content-type": "application/json" });
      return void res.end(JSON.stringify({ object: "list", data: [{ id: options.model, object: "model", owned_by: "proctor" }] }));
    }
    if (req.method !== "POST" || (path !== "/v1/chat/completions" && path !== "/chat/completions")) {
      req.resume();
      return sendError(res, 404, "not_found", `Proctor model proxy: no route ${req.method ?? ""} ${path}; it serves POST /v1/chat/completions and GET /v1/models`);
    }
    const raw = await readBody(req);
    if (raw === null) return sendError(res, 413, "request_too_large", `Proctor model proxy: request body above ${MAX_BODY_BYTES} bytes`);
    let body: Record<string, unknown>;
    try {
      const parsed: unknown = JSON.parse(raw.toString("utf8"));
      if (!parsed || typeof parsed !== "object" || Array.isArray(parsed) || !Array.isArray((parsed as Record<string, unknown>).messages)) throw new Error("no messages");
      body = parsed as Record<string, unknown>;
    } catch {
      return sendError(res, 400, "invalid_request_error", "Proctor model proxy: the body must be a JSON chat-completions request with a messages array");
    }
    if (body.stream === true) {
      return sendError(res, 400, "stream_unsupported", "Proctor model proxy: stream: true is not supported (usage could not be accounted); send stream: false");
    }
    const over = session.overBudget();
    if (over !== null) {
      session.markExceeded(over);
      return sendError(res, 402, "budget_exceeded", over);
    }
    const requestedModel = typeof body.model === "string" ? body.model : null;
    const messages = body.messages as unknown[];
    const { reused, added } = session.newMessages(messages);
    session.totals.forwarded++;
    session.inFlight++;
    const started = performance.now();
    const release = await limiter.acquire();
    let status: number | null = null;
    let text = "";
    let contentType = "application/json";
    try {
      const headers: Record<string, string> = { "content-type": "application/json", accept: "application/json" };
      if (apiKey) headers.authorization = `Bearer ${apiKey}`;
      const answer = await request(completionsUrl, {
        method: "POST",
        headers,
        body: JSON.stringify({ ...body, model: options.model }),
        headersTimeout: timeoutMs,
        bodyTimeout: timeoutMs,
        ...(options.dispatcher ? { dispatcher: options.dispatcher } : {}),
      });
      status = answer.statusCode;
      const type = answer.headers["content-type"];
      if (typeof type === "string") contentType = type;
      text = redact(await answer.body.text());
    } catch (error) {
      text = redact(error instanceof Error ? error.message : String(error));
    } finally {
      if (status === 429) limiter.onRateLimited();
      else if (status !== null && status < 400) limiter.onSuccess();
      release();
      session.inFlight--;
    }
    const durationMs = Math.round(performance.now() - started);
    const request_ = { message_count: messages.length, reused_messages: reused, new_messages: added, duration_ms: durationMs, status, ...(requestedModel !== null && requestedModel !== options.model ? { requested_model: requestedModel } : {}) };

    if (status === null) {
      session.totals.retries++;
      session.record({ message: "", extra: { request: request_, error: `upstream connection error: ${text.slice(0, 300)}` } });
      return sendError(res, 502, "upstream_unreachable", `Proctor model proxy: the model endpoint did not answer (${text.slice(0, 200)})`);
    }
    if (status === 401 || status === 403) {
      const why = `the model endpoint ${completionsUrl} answered ${status} to Proctor's key from ${keyName} (model "${options.model}")`;
      session.markFatal(why);
      session.record({ message: "", extra: { request: request_, error: why } });
      // Not the agent's fault and not its token: a 502 so its client does not blame its own key.
      return sendError(res, 502, "upstream_auth_failed", `Proctor model proxy: ${why}`);
    }
    if (status === 404) {
      const why = `the model endpoint ${completionsUrl} answered 404 for model "${options.model}" (unknown model or wrong base URL)`;
      session.markFatal(why);
      session.record({ message: "", extra: { request: request_, error: why } });
      return sendError(res, 502, "upstream_model_not_found", `Proctor model proxy: ${why}`);
    }
    if (status === 429 || status >= 500 || status === 408) session.totals.retries++;
    if (status >= 200 && status < 300) {
      let parsed: Record<string, unknown> | null = null;
      try {
        parsed = JSON.parse(text) as Record<string, unknown>;
      } catch {
        parsed = null;
      }
      const usage = (parsed?.usage ?? {}) as { prompt_tokens?: number; completion_tokens?: number; prompt_tokens_details?: { cached_tokens?: number } | null };
      const inputTokens = Number(usage.prompt_tokens ?? 0) || 0;
      const outputTokens = Number(usage.completion_tokens ?? 0) || 0;
      const cached = usage.prompt_tokens_details?.cached_tokens;
      session.totals.requests++;
      session.totals.inputTokens += inputTokens;
      session.totals.outputTokens += outputTokens;
      session.totals.cachedTokens += cached ?? 0;
      const choice = (Array.isArray(parsed?.choices) ? parsed.choices[0] : undefined) as
        | { message?: { content?: string | null; reasoning_content?: string | null; tool_calls?: { id?: string; function?: { name?: string; arguments?: unknown } }[] | null }; finish_reason?: string | null }
        | undefined;
      const message = choice?.message;
      const calls = message?.tool_calls ?? [];
      session.record({
        message: message?.content ?? "",
        ...(message?.reasoning_content ? { reasoning_content: message.reasoning_content } : {}),
        ...(calls.length > 0
          ? { tool_calls: calls.map((c, i) => ({ tool_call_id: c.id ?? `call_${i}`, function_name: c.function?.name ?? "", arguments: parseArguments(c.function?.arguments) })) }
          : {}),
        metrics: { prompt_tokens: inputTokens, completion_tokens: outputTokens, ...(cached !== undefined ? { cached_tokens: cached } : {}) },
        extra: { request: { ...request_, finish_reason: choice?.finish_reason ?? null } },
      });
    } else {
      session.record({ message: "", extra: { request: request_, error: `upstream answered ${status}: ${text.slice(0, 300)}` } });
    }
    res.writeHead(status, { "content-type": contentType });
    res.end(text);
  };

  const listener = (req: IncomingMessage, res: ServerResponse) => {
    handle(req, res).catch((error: unknown) => {
      logger.warn("model proxy request failed", { error: redact(error instanceof Error ? error.message : String(error)) });
      sendError(res, 500, "proxy_error", "Proctor model proxy: internal error");
    });
  };

  const tcp = createServer(listener);
  const unix = createServer(listener);
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
