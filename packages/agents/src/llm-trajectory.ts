import { writeFile, rename, mkdir } from "node:fs/promises";
import { join } from "node:path";
import type { ChatMessage, TokenUsage } from "@proctor/llm";

/** ATIF ("Agent Trajectory Interchange Format", Harbor RFC 0001) version whose field names we use. */
export const ATIF_SCHEMA_VERSION = "ATIF-v1.4";

export interface TrajectoryToolCall {
  tool_call_id: string;
  function_name: string;
  /** Parsed arguments; malformed JSON is kept as `{ _raw: "<text>" }`. */
  arguments: Record<string, unknown>;
}

export interface TrajectoryStep {
  step_id: number;
  timestamp: string;
  source: "system" | "user" | "agent";
  model_name?: string;
  message: string;
  reasoning_content?: string;
  tool_calls?: TrajectoryToolCall[];
  observation?: { results: { source_call_id: string; content: string }[] };
  metrics?: { prompt_tokens: number; completion_tokens: number; cached_tokens?: number; cost_usd?: number | null; extra?: Record<string, unknown> };
  extra?: Record<string, unknown>;
}

/** Wall-clock ms minus the monotonic clock; re-anchored when the wall clock moved (NTP). */
let clockOffset = Date.now() - performance.now();

/**
 * Now as ISO 8601 with microseconds (ATIF timestamps are ISO strings; six fraction digits parse
 * everywhere), so the time between two steps can be read below a millisecond. Sub-ms precision
 * comes from the monotonic clock, kept within 2 ms of the wall clock.
 */
export function isoNow(): string {
  let ms = performance.now() + clockOffset;
  if (Math.abs(Date.now() - ms) > 2) {
    clockOffset = Date.now() - performance.now();
    ms = performance.now() + clockOffset;
  }
  const micros = Math.floor(ms * 1000);
  const iso = new Date(Math.floor(micros / 1000)).toISOString();
  return `${iso.slice(0, -1)}${String(micros % 1000).padStart(3, "0")}Z`;
}

/** Why the loop ended. */
export type StopReason = "no_tool_calls" | "submit" | "max_turns" | "deadline" | "context_length" | "aborted" | "model_error" | "fatal" | "budget";

/**
 * trajectory.json in ATIF shape. Where Proctor records more than ATIF has fields for, it goes
 * under `extra`: per agent step `extra.request` (the request's message count, timings,
 * retries, finish reason) and `extra.tools` (per call timing, exit code, output size); at the
 * top, `extra.messages` (the whole conversation exactly as sent, so every request's messages
 * are its first `request.message_count` entries) and `extra.stop_reason`.
 */
export class Trajectory {
  readonly steps: TrajectoryStep[] = [];
  readonly messages: ChatMessage[] = [];
  stopReason: StopReason | null = null;
  stopDetail: string | null = null;
  totals = { inputTokens: 0, outputTokens: 0, cachedTokens: 0, cacheWriteTokens: 0, requests: 0, retries: 0 };
  /** The trial's model cost in USD so far (ATIF total_cost_usd); null when unpriced. */
  costUsd: number | null = null;

  constructor(
    private readonly sessionId: string,
    private readonly model: string,
    private readonly agentExtra: Record<string, unknown>,
  ) {}

  add(step: Omit<TrajectoryStep, "step_id" | "timestamp"> & { timestamp?: string }): TrajectoryStep {
    const full: TrajectoryStep = { step_id: this.steps.length + 1, timestamp: step.timestamp ?? isoNow(), ...step };
    this.steps.push(full);
    return full;
  }

  addUsage(usage: TokenUsage, retries: number): void {
    this.totals.inputTokens += usage.inputTokens;
    this.totals.outputTokens += usage.outputTokens;
    this.totals.cachedTokens += usage.cachedTokens ?? 0;
    this.totals.cacheWriteTokens += usage.cacheWriteTokens ?? 0;
    this.totals.requests += 1;
    this.totals.retries += retries;
  }

  toJSON(): Record<string, unknown> {
    return {
      schema_version: ATIF_SCHEMA_VERSION,
      session_id: this.sessionId,
      agent: { name: "proctor-llm", version: "0.1.0", model_name: this.model, extra: this.agentExtra },
      steps: this.steps,
      ...(this.stopDetail ? { notes: this.stopDetail } : {}),
      final_metrics: {
        total_prompt_tokens: this.totals.inputTokens,
        total_completion_tokens: this.totals.outputTokens,
        total_cached_tokens: this.totals.cachedTokens,
        total_cost_usd: this.costUsd,
        total_steps: this.steps.length,
        extra: { requests: this.totals.requests, retries: this.totals.retries, ...(this.totals.cacheWriteTokens > 0 ? { cache_creation_tokens: this.totals.cacheWriteTokens } : {}) },
      },
      extra: { stop_reason: this.stopReason, messages: this.messages },
    };
  }

  /** Written whole to a temp name, then renamed: a reader never sees half a file. */
  async write(dir: string): Promise<void> {
    await mkdir(dir, { recursive: true });
    const path = join(dir, "trajectory.json");
    await writeFile(`${path}.tmp`, `${JSON.stringify(this, null, 2)}\n`);
    await rename(`${path}.tmp`, path);
  }
}
