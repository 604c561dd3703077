import { createHash, randomBytes } from "node:crypto";
import type { WireInputs, WireProtocol, WireReply } from "./wire";

/** ATIF ("Agent Trajectory Interchange Format", Harbor RFC 0001) version whose field names the proxy's trajectory uses. */
export const ATIF_VERSION = "ATIF-v1.4";
/** A tool result or user message longer than this is cut in the trajectory (the agent got all of it). */
const MAX_RECORDED_TEXT = 64 * 1024;

export interface ModelProxySessionOptions {
  /** Refuse requests once prompt + completion tokens reach this. */
  budgetTokens?: number;
  /** Refuse requests once this many were forwarded. */
  budgetRequests?: number;
  /** Recorded in the trajectory (`session_id`). */
  label?: string;
  /** Recorded in the trajectory's `agent` (e.g. "codex", "0.171.0"). */
  agent?: { name: string; version?: string };
  /** Refuse requests once the session's model cost passes this many USD (needs `priceRequest`). */
  maxCostUsd?: number;
  /** Prices one exchange's usage in USD (null: unpriced); the session sums it for `maxCostUsd`. */
  priceRequest?: (usage: { inputTokens: number; outputTokens: number; cacheReadTokens: number; cacheWriteTokens: number }) => number | null;
}

/** Usage of one session, shaped like result.json `agent.usage`. */
export interface ModelProxyUsage {
  /** Prompt tokens, cached ones included. */
  inputTokens: number;
  outputTokens: number;
  /** Completions served (upstream 2xx). */
  requests: number;
  /** Upstream failures (429, 5xx, connection errors, cut streams), whether the proxy retried them or the agent did. */
  retries: number;
  /** Prompt tokens read from the provider's cache (part of inputTokens); present once the provider reported cache use. */
  cacheReadTokens?: number;
  /** Prompt tokens written to the provider's cache (part of inputTokens; Anthropic); present with cacheReadTokens. */
  cacheWriteTokens?: number;
}

/** One trial's access to the proxy: a token, its budget, and what it used. */
export interface ModelProxySession {
  /** Random, unguessable; what the sandbox gets instead of the real key. */
  readonly token: string;
  usage(): ModelProxyUsage;
  /** Set once a request was refused for the budget: the message the agent was sent. */
  readonly exceeded: string | null;
  /** Set when the upstream endpoint rejected Proctor's key or does not know the model: no trial can succeed. */
  readonly fatal: string | null;
  /** Fires once, when `exceeded` or `fatal` is first set. */
  readonly stopped: AbortSignal;
  /** ATIF-shaped trajectory of every exchange (`trajectory.json`). */
  trajectory(): Record<string, unknown>;
  /** Revokes the token (later requests get 401). Safe to call twice. */
  close(): void;
}

export interface TrajectoryStep {
  step_id: number;
  timestamp: string;
  source: "user" | "agent";
  model_name?: string;
  message: string;
  reasoning_content?: string;
  tool_calls?: { tool_call_id: string; function_name: string; arguments: Record<string, unknown> }[];
  observation?: { results: { source_call_id: string; content: string }[] };
  metrics?: { prompt_tokens: number; completion_tokens: number; cached_tokens?: number; extra?: Record<string, number> };
  extra?: Record<string, unknown>;
}

/** How one exchange went, for the trajectory's `extra.request`. */
export interface ExchangeInfo {
  protocol: WireProtocol;
  stream: boolean;
  status: number | null;
  /** Upstream attempts this exchange took (1 without retries). */
  attempts: number;
  durationMs: number;
  /** Until the first response byte from upstream. */
  firstByteMs: number | null;
  requestedModel: string | null;
  messageCount: number;
  reusedMessages: number;
  error?: string;
}

function clip(text: string): string {
  return text.length > MAX_RECORDED_TEXT ? `${text.slice(0, MAX_RECORDED_TEXT)}\n[... ${text.length - MAX_RECORDED_TEXT} more characters not recorded]` : text;
}

export function tokenKey(token: string): string {
  return createHash("sha256").update(token).digest("hex");
}

export class Session implements ModelProxySession {
  readonly token = `proctor-${randomBytes(32).toString("base64url")}`;
  exceeded: string | null = null;
  fatal: string | null = null;
  closed = false;
  private readonly stop = new AbortController();
  readonly stopped: AbortSignal = this.stop.signal;
  readonly steps: TrajectoryStep[] = [];
  readonly totals = { inputTokens: 0, outputTokens: 0, cacheRead: 0, cacheWrite: 0, requests: 0, retries: 0, forwarded: 0, refused: 0, countTokens: 0 };
  /** The model cost so far in USD (priced exchanges only; see options.priceRequest). */
  costUsd = 0;
  /** Per conversation (keyed by its first item), the items of its last request: conversations grow by appending. */
  private readonly conversations = new Map<string, string[]>();

  constructor(
    readonly options: ModelProxySessionOptions,
    private readonly model: string,
    private readonly onClose: () => void,
  ) {}

  usage(): ModelProxyUsage {
    const t = this.totals;
    // Cache counts only when the provider reported any (not every endpoint caches).
    const cache = t.cacheRead > 0 || t.cacheWrite > 0 ? { cacheReadTokens: t.cacheRead, cacheWriteTokens: t.cacheWrite } : {};
    return { inputTokens: t.inputTokens, outputTokens: t.outputTokens, requests: t.requests, retries: t.retries, ...cache };
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
    const { maxCostUsd } = this.options;
    if (maxCostUsd !== undefined && this.costUsd > maxCostUsd) {
      return `model budget exceeded: this trial's model cost $${this.costUsd.toFixed(4)} passed its limit of $${maxCostUsd} (--trial-max-cost); no more model requests are served`;
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

  /** The items of this request not already sent by the previous request of the same conversation. */
  newItems(items: readonly unknown[]): { reused: number; added: unknown[] } {
    const key = items.length > 0 ? JSON.stringify(items[0]) : "";
    const last = this.conversations.get(key) ?? [];
    let encoded: string[];
    let reused = 0;
    // Conversations grow by appending: when the previous request's last item is still in its place,
    // only the new items need encoding (a long prompt is not re-encoded on every turn).
    if (last.length > 0 && items.length >= last.length && JSON.stringify(items[last.length - 1]) === last[last.length - 1]) {
      reused = last.length;
      encoded = [...last, ...items.slice(reused).map((m) => JSON.stringify(m))];
    } else {
      encoded = items.map((m) => JSON.stringify(m));
      while (reused < encoded.length && reused < last.length && encoded[reused] === last[reused]) reused++;
    }
    this.conversations.set(key, encoded);
    return { reused, added: items.slice(reused) };
  }

  /** Records the agent's new inputs (user text as user steps, tool results as observations of the calls they answer). */
  recordInputs(inputs: WireInputs): void {
    for (const result of inputs.toolResults) {
      const caller = [...this.steps].reverse().find((s) => s.tool_calls?.some((c) => c.tool_call_id === result.callId)) ?? [...this.steps].reverse().find((s) => s.source === "agent");
      if (!caller) continue;
      (caller.observation ??= { results: [] }).results.push({ source_call_id: result.callId, content: clip(result.content) });
    }
    for (const text of inputs.userTexts) this.push({ source: "user", message: clip(text) });
  }

  /** Records one exchange's answer (or failure) as an agent step and adds its usage. */
  recordReply(reply: WireReply | null, info: ExchangeInfo): void {
    const extra: Record<string, unknown> = {
      protocol: info.protocol,
      stream: info.stream,
      status: info.status,
      attempts: info.attempts,
      duration_ms: info.durationMs,
      first_byte_ms: info.firstByteMs,
      message_count: info.messageCount,
      reused_messages: info.reusedMessages,
      ...(info.requestedModel !== null && info.requestedModel !== this.model ? { requested_model: info.requestedModel } : {}),
      ...(reply?.stopReason ? { stop_reason: reply.stopReason } : {}),
    };
    if (!reply) {
      this.push({ source: "agent", model_name: this.model, message: "", extra: { request: extra, error: info.error ?? "no answer" } });
      return;
    }
    const usage = reply.usage;
    if (usage) {
      this.totals.inputTokens += usage.input;
      this.totals.outputTokens += usage.output;
      this.totals.cacheRead += usage.cacheRead;
      this.totals.cacheWrite += usage.cacheWrite;
      this.costUsd += this.options.priceRequest?.({ inputTokens: usage.input, outputTokens: usage.output, cacheReadTokens: usage.cacheRead, cacheWriteTokens: usage.cacheWrite }) ?? 0;
    }
    this.push({
      source: "agent",
      model_name: this.model,
      message: reply.text,
      ...(reply.reasoning ? { reasoning_content: reply.reasoning } : {}),
      ...(reply.toolCalls.length > 0 ? { tool_calls: reply.toolCalls.map((c, i) => ({ tool_call_id: c.id || `call_${this.steps.length}_${i}`, function_name: c.name, arguments: c.arguments })) } : {}),
      ...(usage
        ? { metrics: { prompt_tokens: usage.input, completion_tokens: usage.output, cached_tokens: usage.cacheRead, ...(usage.cacheWrite > 0 ? { extra: { cache_creation_tokens: usage.cacheWrite } } : {}) } }
        : {}),
      extra: { request: extra, ...(info.error ? { error: info.error } : {}) },
    });
  }

  private push(step: Omit<TrajectoryStep, "step_id" | "timestamp">): void {
    this.steps.push({ step_id: this.steps.length + 1, timestamp: new Date().toISOString(), ...step });
  }

  trajectory(): Record<string, unknown> {
    const t = this.totals;
    return {
      schema_version: ATIF_VERSION,
      session_id: this.options.label ?? "model-proxy",
      agent: { name: this.options.agent?.name ?? "proctor-model-proxy", version: this.options.agent?.version ?? "unknown", model_name: this.model, extra: { recorded_by: "proctor-model-proxy" } },
      steps: this.steps,
      final_metrics: {
        total_prompt_tokens: t.inputTokens,
        total_completion_tokens: t.outputTokens,
        total_cached_tokens: t.cacheRead,
        total_steps: this.steps.length,
        extra: { requests: t.requests, retries: t.retries, forwarded: t.forwarded, refused: t.refused, count_tokens_requests: t.countTokens, cache_creation_tokens: t.cacheWrite },
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
