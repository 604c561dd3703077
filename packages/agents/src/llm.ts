import { createWriteStream } from "node:fs";
import { mkdir } from "node:fs/promises";
import { finished } from "node:stream/promises";
import { basename, dirname, join } from "node:path";
import {
  DEFAULT_API_KEY_ENV,
  LlmAuthError,
  LlmContextLengthError,
  LlmModelNotFoundError,
  LlmUnreachableError,
  OpenAIChatModel,
  CostMeter,
  type FlatPrices,
  type ChatCompletion,
  type ChatMessage,
  type ChatModel,
} from "@proctor/llm";
import type { AgentSpec } from "@proctor/schema";
import { AgentError, RunFatalAgentError } from "./errors";
import { DEFAULT_TOOL_OUTPUT_BYTES, LLM_TOOLS, parseToolCall, runTool, type ToolOutcome } from "./llm-tools";
import { Trajectory, isoNow, type StopReason, type TrajectoryToolCall } from "./llm-trajectory";
import type { Agent, AgentContext, AgentRunResult } from "./types";

export const DEFAULT_MAX_TURNS = 100;

export interface LlmAgentOptions {
  /** Any chat model: `OpenAIChatModel`, or your own object implementing `ChatModel`. */
  model: ChatModel;
  /** Model requests per trial; the loop ends after this many. Default 100. */
  maxTurns?: number;
  temperature?: number;
  maxOutputTokens?: number;
  /** Bytes of one tool result the model sees (head and tail kept). Default 16 KiB. */
  maxToolOutputBytes?: number;
  /** Replaces the built-in system prompt. */
  systemPrompt?: string;
  /** Name of the env var the key came from, for error messages (never the key). */
  apiKeyEnv?: string;
  /**
   * Flat prices of the model in USD per million tokens (`--price-table`), used instead of the
   * price library's. Each request is priced as it returns; result.json's usage gets `costUsd`, or
   * `unpriced` with the reason when the model has no price.
   */
  prices?: FlatPrices;
}

type LlmSpec = Extract<AgentSpec, { kind: "llm" }>;

function systemPrompt(workdir: string, timeoutSec: number): string {
  return [
    "You are an autonomous agent working on a task inside a Linux sandbox. Nobody will answer questions: act on your own.",
    `The working directory is ${workdir}. Use the tools: bash runs a command there (each call is a fresh non-interactive shell), read_file and write_file read and write files.`,
    `You have ${timeoutSec} seconds in total; each tool result ends with the time left. When the task is done, call submit.`,
    "After you finish, the task's own tests check your work.",
  ].join("\n");
}

/**
 * The LLM tool loop: the model gets the task's instruction and the tools bash, read_file,
 * write_file and submit, and works until it answers without tool calls, calls submit, reaches
 * max turns, or the deadline comes. Malformed tool calls are answered with an error tool
 * message. A context-length error ends the loop (recorded); a rejected key or unknown model
 * throws RunFatalAgentError (the run stops). Writes `<logDir>/trajectory.json` (ATIF) and a
 * readable transcript in `<logDir>/stdout.txt`.
 */
export function llmAgent(options: LlmAgentOptions): Agent {
  const { model } = options;
  const maxTurns = options.maxTurns ?? DEFAULT_MAX_TURNS;
  const maxOutputBytes = options.maxToolOutputBytes ?? DEFAULT_TOOL_OUTPUT_BYTES;
  return {
    name: "llm",
    async run(ctx: AgentContext): Promise<AgentRunResult> {
      const started = Date.now();
      const totalSec = Math.round((ctx.deadlineMs - started) / 1000);
      const deadline = new AbortController();
      const timer = setTimeout(() => deadline.abort(new Error("the agent's time is up")), Math.max(0, ctx.deadlineMs - started));
      const signal = AbortSignal.any([ctx.signal, deadline.signal]);
      const trajectory = new Trajectory(basename(dirname(ctx.logDir)), model.model, {
        ...(model.baseUrl ? { base_url: model.baseUrl } : {}),
        max_turns: maxTurns,
        ...(options.temperature !== undefined ? { temperature: options.temperature } : {}),
        ...(options.maxOutputTokens !== undefined ? { max_output_tokens: options.maxOutputTokens } : {}),
        tools: LLM_TOOLS.map((t) => t.function.name),
      });
      await mkdir(ctx.logDir, { recursive: true });
      // One stream for the trial's log: a write per line would put open/write/close on every turn's path.
      const stdout = createWriteStream(join(ctx.logDir, "stdout.txt"), { flags: "a" });
      let logError: Error | null = null;
      stdout.on("error", (error) => (logError ??= error));
      const log = (line: string) => {
        if (!logError) stdout.write(`${line}\n`);
      };
      const meter = new CostMeter(model.model, { ...(options.prices ? { prices: options.prices } : {}), ...(model.baseUrl ? { baseUrl: model.baseUrl } : {}) });
      let overBudget: string | null = null;
      const messages = trajectory.messages;
      const system: ChatMessage = { role: "system", content: options.systemPrompt ?? systemPrompt(ctx.sandbox.workdir, totalSec) };
      const user: ChatMessage = { role: "user", content: ctx.task.instruction };
      messages.push(system, user);
      trajectory.add({ source: "system", message: system.content });
      trajectory.add({ source: "user", message: user.content });
      const stop = (reason: StopReason, detail?: string) => {
        trajectory.stopReason = reason;
        if (detail) trajectory.stopDetail = detail;
      };

      try {
        for (let turn = 1; turn <= maxTurns && !trajectory.stopReason; turn++) {
          if (Date.now() >= ctx.deadlineMs) {
            stop("deadline");
            break;
          }
          const requestStarted = isoNow();
          const messageCount = messages.length;
          let completion: ChatCompletion;
          try {
            completion = await model.complete(
              {
                messages,
                tools: LLM_TOOLS,
                toolChoice: "auto",
                ...(options.temperature !== undefined ? { temperature: options.temperature } : {}),
                ...(options.maxOutputTokens !== undefined ? { maxOutputTokens: options.maxOutputTokens } : {}),
              },
              { signal },
            );
          } catch (error) {
            if (deadline.signal.aborted) stop("deadline");
            else if (ctx.signal.aborted) stop("aborted");
            else if (error instanceof LlmContextLengthError) stop("context_length", error.message);
            else if (error instanceof LlmAuthError || error instanceof LlmModelNotFoundError || error instanceof LlmUnreachableError) {
              const keyEnv = options.apiKeyEnv ?? DEFAULT_API_KEY_ENV;
              const message = `${error.message} [base URL ${model.baseUrl ?? "(custom model)"}, model ${model.model}, key from $${keyEnv}]`;
              stop("fatal", message);
              throw new RunFatalAgentError(message, { cause: error });
            } else {
              const message = error instanceof Error ? error.message : String(error);
              stop("model_error", message);
              throw new AgentError(`model request failed on turn ${turn}: ${message}`, { cause: error });
            }
            log(`[turn ${turn}] loop ends: ${trajectory.stopReason}${trajectory.stopDetail ? `: ${trajectory.stopDetail}` : ""}`);
            break;
          }
          trajectory.addUsage(completion.usage, completion.retries);
          const requestCost = meter.add({
            inputTokens: completion.usage.inputTokens,
            outputTokens: completion.usage.outputTokens,
            ...(completion.usage.cachedTokens !== undefined ? { cacheReadTokens: completion.usage.cachedTokens } : {}),
            ...(completion.usage.cacheWriteTokens !== undefined ? { cacheWriteTokens: completion.usage.cacheWriteTokens } : {}),
          });
          trajectory.costUsd = meter.costUsd;
          messages.push(completion.message);
          const calls = completion.message.tool_calls ?? [];
          const step = trajectory.add({
            timestamp: requestStarted,
            source: "agent",
            model_name: model.model,
            message: completion.message.content ?? "",
            ...(completion.message.reasoning_content ? { reasoning_content: completion.message.reasoning_content } : {}),
            ...(calls.length > 0 ? { tool_calls: calls.map(toTrajectoryCall) } : {}),
            metrics: {
              prompt_tokens: completion.usage.inputTokens,
              completion_tokens: completion.usage.outputTokens,
              ...(completion.usage.cachedTokens !== undefined ? { cached_tokens: completion.usage.cachedTokens } : {}),
              cost_usd: requestCost,
              ...(completion.usage.cacheWriteTokens ? { extra: { cache_creation_tokens: completion.usage.cacheWriteTokens } } : {}),
            },
            extra: {
              request: {
                message_count: messageCount,
                duration_ms: completion.durationMs,
                retries: completion.retries,
                finish_reason: completion.finishReason,
                ...(completion.id ? { id: completion.id } : {}),
              },
            },
          });
          if (completion.message.content) log(`[turn ${turn}] model: ${oneLine(completion.message.content)}`);
          const spent = meter.costUsd;
          if (ctx.maxCostUsd !== undefined && spent !== null && spent > ctx.maxCostUsd) {
            overBudget = `agent stopped: the trial's model cost $${spent.toFixed(4)} passed its limit of $${ctx.maxCostUsd} (--trial-max-cost) on turn ${turn}`;
            stop("budget", overBudget);
            log(`[turn ${turn}] ${overBudget}`);
            break;
          }
          if (calls.length === 0) {
            stop("no_tool_calls");
            log(`[turn ${turn}] no tool calls: the loop ends`);
            break;
          }
          const results: { source_call_id: string; content: string }[] = [];
          const toolRecords: Record<string, unknown>[] = [];
          let submitted = false;
          for (const call of calls) {
            const parsed = parseToolCall(call);
            const toolStarted = performance.now();
            let outcome: ToolOutcome;
            if (!parsed.ok) outcome = { content: parsed.error };
            else if (deadline.signal.aborted || ctx.signal.aborted) outcome = { content: "error: not run: the agent's time is up" };
            else {
              if (parsed.name === "submit") submitted = true;
              outcome = await runTool(parsed, { sandbox: ctx.sandbox, signal, deadlineMs: ctx.deadlineMs, maxOutputBytes });
            }
            const durationMs = Math.round((performance.now() - toolStarted) * 1000) / 1000;
            results.push({ source_call_id: call.id, content: outcome.content });
            toolRecords.push({
              tool_call_id: call.id,
              function_name: call.function.name,
              duration_ms: durationMs,
              ...(parsed.ok ? {} : { error: parsed.error }),
              ...(outcome.exitCode !== undefined ? { exit_code: outcome.exitCode } : {}),
              ...(outcome.timedOut ? { timed_out: true } : {}),
              ...(outcome.outputBytes !== undefined ? { output_bytes: outcome.outputBytes, truncated: outcome.truncated ?? false } : {}),
            });
            log(`[turn ${turn}] ${call.function.name} ${oneLine(call.function.arguments)} -> ${oneLine(outcome.content.split("\n").slice(-1)[0] ?? "")} (${Math.round(durationMs)} ms)`);
          }
          const leftSec = Math.max(0, Math.round((ctx.deadlineMs - Date.now()) / 1000));
          const last = results[results.length - 1];
          if (last) last.content += `\n[proctor: ${leftSec} s of ${totalSec} s left; turn ${turn} of ${maxTurns}]`;
          for (const r of results) messages.push({ role: "tool", tool_call_id: r.source_call_id, content: r.content });
          step.observation = { results };
          step.extra = { ...step.extra, tools: toolRecords };
          if (deadline.signal.aborted) stop("deadline");
          else if (ctx.signal.aborted) stop("aborted");
          else if (submitted) stop("submit");
        }
        if (!trajectory.stopReason) stop("max_turns", `stopped after ${maxTurns} turns (--max-turns)`);
        if (trajectory.stopReason !== "no_tool_calls" && trajectory.stopReason !== "submit") {
          log(`loop ends: ${trajectory.stopReason}${trajectory.stopDetail ? `: ${trajectory.stopDetail}` : ""}`);
        }
        if (trajectory.stopReason === "context_length") {
          ctx.logger?.warn("llm agent: the conversation outgrew the model's context; the loop ended and the verifier runs", { taskId: ctx.task.id, model: model.model });
        }
      } finally {
        clearTimeout(timer);
        stdout.end();
        await finished(stdout).catch((error: unknown) => (logError ??= error instanceof Error ? error : new Error(String(error))));
        if (logError) ctx.logger?.error("writing the agent's stdout.txt failed", { taskId: ctx.task.id, error: logError.message });
        await trajectory.write(ctx.logDir).catch((error: unknown) =>
          ctx.logger?.error("writing trajectory.json failed", { taskId: ctx.task.id, error: error instanceof Error ? error.message : String(error) }),
        );
      }
      const t = trajectory.totals;
      return {
        exitCode: trajectory.stopReason === "deadline" || trajectory.stopReason === "aborted" ? null : 0,
        timedOut: trajectory.stopReason === "deadline",
        aborted: trajectory.stopReason === "aborted",
        durationMs: Date.now() - started,
        outputTruncated: false,
        model: model.model,
        usage: {
          inputTokens: t.inputTokens,
          outputTokens: t.outputTokens,
          requests: t.requests,
          retries: t.retries,
          ...(t.cachedTokens > 0 || t.cacheWriteTokens > 0 ? { cacheReadTokens: t.cachedTokens, cacheWriteTokens: t.cacheWriteTokens } : {}),
          ...meter.fields(),
        },
        ...(overBudget ? { error: overBudget } : {}),
      };
    },
  };
}

/**
 * The llm agent an AgentSpec names, over OpenAIChatModel. The key is read here, in the engine
 * process, from the env var the spec names; it goes nowhere but the Authorization header.
 * Call once per run: the model client (and its adaptive in-flight limit) is shared by every trial.
 */
export function llmAgentFromSpec(spec: LlmSpec, env: NodeJS.ProcessEnv = process.env): Agent {
  const model = new OpenAIChatModel({
    baseUrl: spec.baseUrl,
    model: spec.model,
    apiKey: env[spec.apiKeyEnv],
    apiKeyEnv: spec.apiKeyEnv,
    ...(spec.llmConcurrency !== undefined ? { maxConcurrency: spec.llmConcurrency } : {}),
  });
  return llmAgent({
    model,
    apiKeyEnv: spec.apiKeyEnv,
    ...(spec.maxTurns !== undefined ? { maxTurns: spec.maxTurns } : {}),
    ...(spec.temperature !== undefined ? { temperature: spec.temperature } : {}),
    ...(spec.maxOutputTokens !== undefined ? { maxOutputTokens: spec.maxOutputTokens } : {}),
    ...(spec.prices ? { prices: spec.prices } : {}),
  });
}

function toTrajectoryCall(call: { id: string; function: { name: string; arguments: string } }): TrajectoryToolCall {
  let args: Record<string, unknown>;
  try {
    const parsed: unknown = JSON.parse(call.function.arguments || "{}");
    args = parsed && typeof parsed === "object" && !Array.isArray(parsed) ? (parsed as Record<string, unknown>) : { _raw: call.function.arguments };
  } catch {
    args = { _raw: call.function.arguments };
  }
  return { tool_call_id: call.id, function_name: call.function.name, arguments: args };
}

function oneLine(text: string, max = 200): string {
  const flat = text.replace(/\s+/g, " ").trim();
  return flat.length > max ? `${flat.slice(0, max)}...` : flat;
}
