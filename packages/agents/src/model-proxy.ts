import { readFileSync } from "node:fs";
import { mkdir, rename, writeFile } from "node:fs/promises";
import { basename, dirname, join } from "node:path";
import { CostMeter, priceRequest, startModelProxy, type ModelProxy, type ModelProxySession } from "@proctor/llm";
import type { Logger, ModelProxySpec } from "@proctor/schema";
import { z } from "zod";
import { AgentConfigError, RunFatalAgentError } from "./errors";
import type { Agent, AgentContext } from "./types";

/** TCP port of the proxy inside a container sandbox (127.0.0.1 of the sandbox's own network namespace). */
export const MODEL_PROXY_PORT = 41_999;

export interface ModelProxyAgent {
  /** The wrapped agent: give it to the engine. */
  agent: Agent;
  /** Stops the proxy (every token stops working). Call when the run ends. */
  close(): Promise<void>;
}

interface TrialProxy {
  session: ModelProxySession;
  forwarder: { close(): Promise<void> } | null;
  env: Record<string, string>;
  finished?: Promise<void>;
}

/**
 * Starts a model proxy for `spec` and wraps `inner` (an agent that calls a model from inside
 * its sandbox, e.g. a code agent) so each trial gets OPENAI_BASE_URL / OPENAI_API_BASE /
 * PROCTOR_MODEL_BASE_URL (the proxy's /v1) and ANTHROPIC_BASE_URL (its root) pointing at the
 * proxy, a per-trial token as OPENAI_API_KEY / ANTHROPIC_API_KEY / PROCTOR_MODEL_TOKEN, and
 * OPENAI_MODEL / PROCTOR_MODEL. The real key is read here from `env[spec.apiKeyEnv]` and stays
 * in this process.
 *
 * Reachability: a sandbox that offers `forwardHostSocket` (Docker) gets the proxy's Unix socket
 * as 127.0.0.1:MODEL_PROXY_PORT inside its own network namespace and nothing else; other
 * sandboxes (host processes) use the proxy's 127.0.0.1 TCP port.
 *
 * When the trial ends its token is revoked, the trajectory goes to `<logDir>/trajectory.json`,
 * and result.json gets the model and usage. A spent budget stops the agent and is an `agent`
 * error naming the budget; an upstream that rejects the key or the model stops the run.
 */
export async function withModelProxy(
  inner: Agent,
  spec: ModelProxySpec,
  options: { env?: NodeJS.ProcessEnv; logger?: Logger; trajectoryAgent?: { name: string; version?: string } } = {},
): Promise<ModelProxyAgent> {
  const env = options.env ?? process.env;
  const proxy: ModelProxy = await startModelProxy({
    upstreamBaseUrl: spec.baseUrl,
    model: spec.model,
    apiKeyEnv: spec.apiKeyEnv,
    ...(env[spec.apiKeyEnv] ? { apiKey: env[spec.apiKeyEnv] } : {}),
    ...(spec.llmConcurrency !== undefined ? { maxConcurrency: spec.llmConcurrency } : {}),
    ...(options.logger ? { logger: options.logger } : {}),
  });
  const trials = new WeakMap<object, TrialProxy>();

  const open = async (ctx: AgentContext): Promise<TrialProxy> => {
    const session = proxy.openSession({
      label: basename(dirname(ctx.logDir)),
      ...(options.trajectoryAgent ? { agent: options.trajectoryAgent } : {}),
      ...(spec.budgetTokens !== undefined ? { budgetTokens: spec.budgetTokens } : {}),
      ...(spec.budgetRequests !== undefined ? { budgetRequests: spec.budgetRequests } : {}),
      // --trial-max-cost: the proxy refuses requests once the trial's priced cost passes it.
      ...(ctx.maxCostUsd !== undefined ? { maxCostUsd: ctx.maxCostUsd, priceRequest: (usage) => priceRequest(spec.model, usage, { baseUrl: spec.baseUrl, ...(spec.prices ? { prices: spec.prices } : {}) }).costUsd } : {}),
    });
    let forwarder: TrialProxy["forwarder"] = null;
    let baseUrl = proxy.tcpBaseUrl;
    if (ctx.sandbox.forwardHostSocket) {
      try {
        forwarder = await ctx.sandbox.forwardHostSocket(proxy.socketPath, MODEL_PROXY_PORT);
      } catch (error) {
        session.close();
        throw error;
      }
      baseUrl = `http://127.0.0.1:${MODEL_PROXY_PORT}/v1`;
    }
    const trial: TrialProxy = {
      session,
      forwarder,
      env: {
        OPENAI_BASE_URL: baseUrl,
        OPENAI_API_BASE: baseUrl,
        OPENAI_API_KEY: session.token,
        OPENAI_MODEL: spec.model,
        // Anthropic's SDKs add /v1/messages to the root themselves.
        ANTHROPIC_BASE_URL: baseUrl.replace(/\/v1$/, ""),
        ANTHROPIC_API_KEY: session.token,
        PROCTOR_MODEL: spec.model,
        PROCTOR_MODEL_BASE_URL: baseUrl,
        PROCTOR_MODEL_TOKEN: session.token,
      },
    };
    trials.set(ctx.sandbox, trial);
    return trial;
  };

  /** Revokes the token, removes the forwarder, writes the trajectory. Once per trial. */
  const finish = (trial: TrialProxy, ctx: AgentContext): Promise<void> =>
    (trial.finished ??= (async () => {
      trial.session.close();
      trials.delete(ctx.sandbox);
      await trial.forwarder?.close();
      await mkdir(ctx.logDir, { recursive: true });
      const path = join(ctx.logDir, "trajectory.json");
      await writeFile(`${path}.tmp`, `${JSON.stringify(trial.session.trajectory(), null, 2)}\n`);
      await rename(`${path}.tmp`, path);
    })());

  const agent: Agent = {
    name: inner.name,
    async setup(ctx) {
      const trial = await open(ctx);
      try {
        await inner.setup?.({ ...ctx, env: { ...ctx.env, ...trial.env } });
      } catch (error) {
        await finish(trial, ctx);
        throw error;
      }
    },
    async run(ctx) {
      const trial = trials.get(ctx.sandbox) ?? (await open(ctx));
      const { session } = trial;
      try {
        const result = await inner.run({ ...ctx, env: { ...ctx.env, ...trial.env }, signal: AbortSignal.any([ctx.signal, session.stopped]) });
        if (session.fatal) throw new RunFatalAgentError(`model proxy: ${session.fatal}; check --model, --base-url and $${spec.apiKeyEnv}`);
        return { ...result, model: spec.model, usage: { ...session.usage(), ...sessionCost(session, spec).fields() }, ...(session.exceeded ? { error: `agent stopped: ${session.exceeded}` } : {}) };
      } finally {
        await finish(trial, ctx);
      }
    },
  };
  return { agent, close: () => proxy.close() };
}

/** The session's cost: each recorded exchange priced on its own (long-context tiers apply per request). */
function sessionCost(session: ModelProxySession, spec: ModelProxySpec): CostMeter {
  const meter = new CostMeter(spec.model, { baseUrl: spec.baseUrl, ...(spec.prices ? { prices: spec.prices } : {}) });
  const steps = (session.trajectory().steps ?? []) as { metrics?: { prompt_tokens?: number; completion_tokens?: number; cached_tokens?: number; extra?: { cache_creation_tokens?: number } } }[];
  for (const step of steps) {
    const m = step.metrics;
    if (!m) continue;
    meter.add({ inputTokens: m.prompt_tokens ?? 0, outputTokens: m.completion_tokens ?? 0, cacheReadTokens: m.cached_tokens ?? 0, cacheWriteTokens: m.extra?.cache_creation_tokens ?? 0 });
  }
  return meter;
}

/** Usage with its cost in USD when the spec has prices (USD per million tokens; cache prices default to the input price). */
export function withCost<U extends { inputTokens: number; outputTokens: number; cacheReadTokens?: number; cacheWriteTokens?: number }>(usage: U, prices: ModelProxySpec["prices"]): U & { costUsd?: number } {
  if (!prices) return usage;
  const read = usage.cacheReadTokens ?? 0;
  const write = usage.cacheWriteTokens ?? 0;
  const fresh = Math.max(0, usage.inputTokens - read - write);
  const micro = fresh * prices.input + read * (prices.cacheRead ?? prices.input) + write * (prices.cacheWrite ?? prices.input) + usage.outputTokens * prices.output;
  return { ...usage, costUsd: Math.round(micro) / 1e6 };
}

const PriceTable = z.record(
  z.string(),
  z.object({ input: z.number().nonnegative(), output: z.number().nonnegative(), cache_read: z.number().nonnegative().optional(), cache_write: z.number().nonnegative().optional() }).strict(),
);

/**
 * A price table's prices for `model`: the file is JSON `{"<model>": {"input": 3, "output": 15,
 * "cache_read": 0.3, "cache_write": 3.75}}`, USD per million tokens. Throws AgentConfigError
 * naming the file (and the field or the missing model).
 */
export function readPriceTable(file: string, model: string): NonNullable<ModelProxySpec["prices"]> {
  let raw: unknown;
  try {
    raw = JSON.parse(readFileSync(file, "utf8"));
  } catch (error) {
    throw new AgentConfigError(`${file}: ${(error as NodeJS.ErrnoException).code === "ENOENT" ? "no such file" : `not JSON: ${(error as Error).message}`}`, file, { cause: error });
  }
  const parsed = PriceTable.safeParse(raw);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    throw new AgentConfigError(`${file}: ${issue?.path.join(".") || "(root)"}: ${issue?.message} (expected {"<model>": {"input": 3, "output": 15, "cache_read": 0.3, "cache_write": 3.75}}, USD per million tokens)`, file);
  }
  const entry = parsed.data[model];
  if (!entry) throw new AgentConfigError(`${file} has no entry for model "${model}" (it has ${Object.keys(parsed.data).join(", ") || "none"})`, file);
  return { input: entry.input, output: entry.output, ...(entry.cache_read !== undefined ? { cacheRead: entry.cache_read } : {}), ...(entry.cache_write !== undefined ? { cacheWrite: entry.cache_write } : {}) };
}
