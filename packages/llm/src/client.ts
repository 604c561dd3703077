import { request, type Dispatcher } from "undici";
import { z } from "zod";
import { silentLogger, type Logger } from "@proctor/schema";
import {
  LlmAuthError,
  LlmContextLengthError,
  LlmHttpError,
  LlmModelNotFoundError,
  LlmResponseError,
  LlmRetriesExhaustedError,
  LlmUnreachableError,
  UNREACHABLE_ATTEMPTS,
  unreachableCode,
} from "./errors";
import { AdaptiveLimiter } from "./limiter";
import { backoffDelay, DEFAULT_RETRY_POLICY, parseRetryAfter, systemClock, type Clock, type RetryPolicy } from "./retry";
import type { ChatCompletion, ChatModel, ChatRequest, CompleteOptions, ToolCall } from "./types";

export const DEFAULT_BASE_URL = "https://api.openai.com/v1";
export const DEFAULT_API_KEY_ENV = "OPENAI_API_KEY";

export interface OpenAIChatModelOptions {
  /** e.g. https://api.openai.com/v1, http://127.0.0.1:8000/v1 (vLLM), https://openrouter.ai/api/v1. */
  baseUrl: string;
  model: string;
  /** Sent as `Authorization: Bearer <key>`; omitted when undefined or empty (local servers). */
  apiKey?: string;
  /** Name of the env var the key came from, so errors can say what to fix. Never the key. */
  apiKeyEnv?: string;
  /** Most requests in flight at once (the adaptive limit starts here and grows back to it). Default 8. */
  maxConcurrency?: number;
  /** A burst of 429s halves the in-flight limit at most once per this window. Default 1000 ms. */
  rateLimitCooldownMs?: number;
  retry?: Partial<RetryPolicy>;
  /** One attempt's limit on waiting for headers and between body chunks. Default 10 minutes. */
  requestTimeoutMs?: number;
  /** Extra request headers (e.g. OpenRouter's HTTP-Referer / X-Title). */
  headers?: Record<string, string>;
  dispatcher?: Dispatcher;
  clock?: Clock;
  random?: () => number;
  logger?: Logger;
}

const ToolCallWire = z.object({
  id: z.string().optional(),
  type: z.string().optional(),
  function: z.object({
    name: z.string().optional().default(""),
    // Some servers send parsed objects instead of JSON text.
    arguments: z.union([z.string(), z.record(z.string(), z.unknown()), z.null()]).optional(),
  }),
});

const CompletionWire = z.object({
  id: z.string().optional(),
  choices: z
    .array(
      z.object({
        message: z.object({
          content: z.string().nullable().optional(),
          reasoning_content: z.string().nullable().optional(),
          tool_calls: z.array(ToolCallWire).nullable().optional(),
        }),
        finish_reason: z.string().nullable().optional(),
      }),
    )
    .min(1),
  usage: z
    .object({
      prompt_tokens: z.number().optional(),
      completion_tokens: z.number().optional(),
      prompt_tokens_details: z.object({ cached_tokens: z.number().optional(), cache_write_tokens: z.number().optional() }).nullable().optional(),
    })
    .nullable()
    .optional(),
});

/** Statuses worth another attempt: rate limit, timeouts, server errors (incl. 529 overloaded). */
function isRetryableStatus(status: number): boolean {
  return status === 408 || status === 409 || status === 425 || status === 429 || status >= 500;
}

function errorText(body: string): { message: string; code: string } {
  try {
    const parsed = JSON.parse(body) as Record<string, unknown>;
    const err = parsed.error;
    if (err && typeof err === "object") {
      const e = err as Record<string, unknown>;
      return { message: String(e.message ?? ""), code: String(e.code ?? e.type ?? "") };
    }
    if (typeof err === "string") return { message: err, code: "" };
    if (typeof parsed.detail === "string") return { message: parsed.detail, code: "" };
    if (typeof parsed.message === "string") return { message: parsed.message, code: "" };
  } catch {
    // not JSON: use the text itself
  }
  return { message: body, code: "" };
}

const CONTEXT_LENGTH = /context[_ ]length|context window|maximum context|too many tokens|prompt is too long|input is too long|reduce the length/i;
const UNKNOWN_MODEL = /model_not_found|(model|deployment).*(not found|does not exist|not a valid|unknown|not available|no endpoints)|(invalid|unknown) model/i;

/**
 * OpenAI-compatible chat completions (`POST {baseUrl}/chat/completions`) over undici.
 * 429, 5xx (and 408/409/425) and connection errors are retried with exponential backoff and
 * jitter, honouring Retry-After (seconds or HTTP date) and retry-after-ms; 429s shrink the
 * in-flight limit, successes grow it back. 401/403 throw LlmAuthError, an unknown model
 * LlmModelNotFoundError, an over-long conversation LlmContextLengthError. One instance is
 * meant to be shared by every trial of a run, so the limit is shared too.
 */
export class OpenAIChatModel implements ChatModel {
  readonly model: string;
  readonly baseUrl: string;
  readonly limiter: AdaptiveLimiter;
  private readonly url: string;
  private readonly apiKey: string | undefined;
  private readonly apiKeyEnv: string | undefined;
  private readonly policy: RetryPolicy;
  private readonly clock: Clock;
  private readonly random: () => number;
  private readonly logger: Logger;
  private readonly timeoutMs: number;
  private readonly headers: Record<string, string>;
  private readonly dispatcher: Dispatcher | undefined;
  /** Whether the endpoint ever gave an HTTP answer: until it has, failing connections mean a wrong URL. */
  private answered = false;

  constructor(options: OpenAIChatModelOptions) {
    let parsed: URL;
    try {
      parsed = new URL(options.baseUrl);
    } catch {
      throw new TypeError(`base URL ${JSON.stringify(options.baseUrl)} is not a URL (expected e.g. https://api.openai.com/v1)`);
    }
    if (parsed.protocol !== "http:" && parsed.protocol !== "https:") throw new TypeError(`base URL ${options.baseUrl} must be http(s)`);
    this.baseUrl = options.baseUrl.replace(/\/+$/, "");
    this.url = `${this.baseUrl}/chat/completions`;
    this.model = options.model;
    this.apiKey = options.apiKey || undefined;
    this.apiKeyEnv = options.apiKeyEnv;
    this.policy = { ...DEFAULT_RETRY_POLICY, ...options.retry };
    this.clock = options.clock ?? systemClock;
    this.random = options.random ?? Math.random;
    this.logger = options.logger ?? silentLogger;
    this.timeoutMs = options.requestTimeoutMs ?? 10 * 60_000;
    this.headers = { ...options.headers };
    this.dispatcher = options.dispatcher;
    this.limiter = new AdaptiveLimiter({ max: options.maxConcurrency ?? 8, clock: this.clock, ...(options.rateLimitCooldownMs !== undefined ? { decreaseCooldownMs: options.rateLimitCooldownMs } : {}) });
  }

  async complete(req: ChatRequest, options: CompleteOptions = {}): Promise<ChatCompletion> {
    const { signal } = options;
    const started = this.clock.now();
    // The round trip in µs (Date.now's whole ms would hide a sub-ms request in the trajectory).
    const startedPrecise = performance.now();
    const body = JSON.stringify({
      model: this.model,
      messages: req.messages,
      ...(req.tools && req.tools.length > 0 ? { tools: req.tools, tool_choice: req.toolChoice ?? "auto" } : {}),
      ...(req.temperature !== undefined ? { temperature: req.temperature } : {}),
      ...(req.maxOutputTokens !== undefined ? { max_tokens: req.maxOutputTokens } : {}),
    });
    const headers: Record<string, string> = { "content-type": "application/json", accept: "application/json", ...this.headers };
    if (this.apiKey) headers.authorization = `Bearer ${this.apiKey}`;

    let retries = 0;
    for (let attempt = 1; ; attempt++) {
      signal?.throwIfAborted();
      const release = await this.limiter.acquire(signal);
      let status: number | null = null;
      let text = "";
      let responseHeaders: Record<string, string | string[] | undefined> = {};
      let failure: unknown = null;
      try {
        const res = await request(this.url, {
          method: "POST",
          headers,
          body,
          ...(signal ? { signal } : {}),
          ...(this.dispatcher ? { dispatcher: this.dispatcher } : {}),
          headersTimeout: this.timeoutMs,
          bodyTimeout: this.timeoutMs,
        });
        status = res.statusCode;
        this.answered = true;
        responseHeaders = res.headers;
        text = await res.body.text();
      } catch (error) {
        if (signal?.aborted) {
          release();
          throw signal.reason;
        }
        failure = error;
      }
      if (status === 429) this.limiter.onRateLimited();
      else if (status !== null && status < 400) this.limiter.onSuccess();
      release();

      if (status !== null && status >= 200 && status < 300) {
        return { ...this.parse(text), retries, durationMs: Math.round((performance.now() - startedPrecise) * 1000) / 1000 };
      }
      if (status !== null && !isRetryableStatus(status)) throw this.httpError(status, text);

      const what = status !== null ? `HTTP ${status}` : `connection error: ${this.redact((failure as Error)?.message ?? String(failure))}`;
      const elapsed = this.clock.now() - started;
      const refused = status === null && !this.answered ? unreachableCode(failure) : null;
      if (refused !== null && attempt >= UNREACHABLE_ATTEMPTS) {
        throw new LlmUnreachableError(
          `${this.url} (model ${this.model}) cannot be reached (${refused}, ${attempt} attempts): is the model server running there? Check --base-url`,
          refused,
          { cause: failure },
        );
      }
      const asked = status !== null ? parseRetryAfter(responseHeaders, this.clock.now()) : null;
      const backoff = backoffDelay(this.policy, attempt, this.random);
      // An endpoint that never answered gets quick retries: a wrong URL should stop the run in seconds.
      const wait = asked !== null ? Math.min(asked, this.policy.maxRetryAfterMs) : refused !== null ? Math.min(backoff, 1000) : backoff;
      if (attempt >= this.policy.maxAttempts || elapsed + wait > this.policy.maxElapsedMs) {
        throw new LlmRetriesExhaustedError(
          `${this.url} (model ${this.model}): gave up after ${attempt} attempt(s) in ${Math.round(elapsed / 1000)} s; last: ${what}${status !== null ? ` ${this.snippet(text)}` : ""}`,
          status,
          attempt,
          failure ? { cause: failure } : undefined,
        );
      }
      this.logger.warn("model request failed; retrying", { url: this.url, model: this.model, attempt, error: what, waitMs: wait });
      retries++;
      await this.clock.sleep(wait, signal);
    }
  }

  private parse(text: string): Omit<ChatCompletion, "retries" | "durationMs"> {
    let json: unknown;
    try {
      json = JSON.parse(text);
    } catch {
      throw new LlmResponseError(`${this.url} (model ${this.model}) answered 200 with a body that is not JSON: ${this.snippet(text)}`);
    }
    const parsed = CompletionWire.safeParse(json);
    if (!parsed.success) {
      throw new LlmResponseError(`${this.url} (model ${this.model}) answered 200 without a chat completion (${parsed.error.issues[0]?.message ?? "invalid"}): ${this.snippet(text)}`);
    }
    const choice = parsed.data.choices[0];
    if (!choice) throw new LlmResponseError(`${this.url} answered with no choices`);
    const toolCalls: ToolCall[] = (choice.message.tool_calls ?? []).map((call, i) => ({
      id: call.id || `call_${i}`,
      type: "function",
      function: {
        name: call.function.name,
        arguments: typeof call.function.arguments === "string" ? call.function.arguments : JSON.stringify(call.function.arguments ?? {}),
      },
    }));
    const usage = parsed.data.usage;
    const cached = usage?.prompt_tokens_details?.cached_tokens;
    // Cache writes as OpenRouter reports them (Anthropic models behind a Chat Completions endpoint).
    const written = usage?.prompt_tokens_details?.cache_write_tokens;
    return {
      message: {
        role: "assistant",
        content: choice.message.content ?? null,
        ...(toolCalls.length > 0 ? { tool_calls: toolCalls } : {}),
        ...(choice.message.reasoning_content ? { reasoning_content: choice.message.reasoning_content } : {}),
      },
      finishReason: choice.finish_reason ?? null,
      usage: {
        inputTokens: usage?.prompt_tokens ?? 0,
        outputTokens: usage?.completion_tokens ?? 0,
        ...(cached !== undefined ? { cachedTokens: cached } : {}),
        ...(written !== undefined && written > 0 ? { cacheWriteTokens: written } : {}),
      },
      ...(parsed.data.id ? { id: parsed.data.id } : {}),
    };
  }

  private httpError(status: number, text: string): LlmHttpError {
    const { message, code } = errorText(text);
    const body = this.snippet(text);
    const where = `${this.url} (model "${this.model}")`;
    const keyEnv = this.apiKeyEnv ? `$${this.apiKeyEnv}` : "the API key";
    if (status === 401 || status === 403) {
      const why = this.apiKey ? `rejected the key from ${keyEnv}` : `needs a key and ${keyEnv} is not set`;
      return new LlmAuthError(`${where} answered ${status}: it ${why}: ${this.redact(message).slice(0, 300)}`, status, body);
    }
    if (status === 404 || (status === 400 && UNKNOWN_MODEL.test(`${code} ${message}`) && !CONTEXT_LENGTH.test(message))) {
      return new LlmModelNotFoundError(
        `${where} answered ${status}: unknown model or wrong base URL (check --model and --base-url): ${this.redact(message).slice(0, 300)}`,
        status,
        body,
      );
    }
    if ((status === 400 || status === 413) && (CONTEXT_LENGTH.test(message) || code === "context_length_exceeded")) {
      return new LlmContextLengthError(`${where}: the conversation is longer than the model's context: ${this.redact(message).slice(0, 300)}`, status, body);
    }
    return new LlmHttpError(`${where} answered ${status}: ${this.redact(message).slice(0, 500)}`, status, body);
  }

  private snippet(text: string): string {
    const t = this.redact(text).trim();
    return t.length > 500 ? `${t.slice(0, 500)}...` : t;
  }

  /** Removes the API key from text the server sent (some servers echo a rejected key). */
  private redact(text: string): string {
    return this.apiKey ? text.split(this.apiKey).join("[redacted]") : text;
  }
}
