import { z } from "zod";

/**
 * A model proxy for an agent that calls a model from inside its sandbox: each trial gets
 * OPENAI_BASE_URL (the proxy) and a per-trial token as OPENAI_API_KEY; the proxy sends every
 * request upstream to `baseUrl` as `model` with the key from `$apiKeyEnv` (read in the engine
 * process only, never recorded) and stops the trial at its budget.
 */
/** Flat prices of one model in USD per million tokens (`--price-table`), used instead of the price library's. Cache prices default to the input price. */
export const ModelPrices = z
  .object({ input: z.number().nonnegative(), output: z.number().nonnegative(), cacheRead: z.number().nonnegative().optional(), cacheWrite: z.number().nonnegative().optional() })
  .strict();
export type ModelPrices = z.infer<typeof ModelPrices>;

export const ModelProxySpec = z.object({
  model: z.string().min(1),
  baseUrl: z.string().url(),
  apiKeyEnv: z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/, "must be an environment variable name"),
  /** Prompt + completion tokens one trial may use. */
  budgetTokens: z.number().int().positive().optional(),
  /** Model requests one trial may make. */
  budgetRequests: z.number().int().positive().optional(),
  /** Most upstream requests in flight at once across the run's trials. */
  llmConcurrency: z.number().int().positive().optional(),
  /** USD per million tokens of `model` (`--price-table`), instead of the price library's. */
  prices: ModelPrices.optional(),
});
export type ModelProxySpec = z.infer<typeof ModelProxySpec>;

export const AgentSpec = z.discriminatedUnion("kind", [
  z.object({ kind: z.literal("oracle") }),
  z.object({ kind: z.literal("nop") }),
  /** A host directory uploaded to /agent and started by its entrypoint; `modelProxy` gives it a model. */
  z.object({ kind: z.literal("code"), dir: z.string(), modelProxy: ModelProxySpec.optional() }),
  /**
   * The built-in tool loop over an OpenAI-compatible chat-completions endpoint. `apiKeyEnv` is
   * the NAME of the env var holding the key (read in the engine process only); the key itself
   * is never part of a spec, so never of run.json.
   */
  z.object({
    kind: z.literal("llm"),
    model: z.string().min(1),
    baseUrl: z.string().url(),
    apiKeyEnv: z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/, "must be an environment variable name"),
    maxTurns: z.number().int().positive().optional(),
    temperature: z.number().min(0).max(2).optional(),
    maxOutputTokens: z.number().int().positive().optional(),
    /** Most model requests in flight at once across the run's trials (adaptive below it). */
    llmConcurrency: z.number().int().positive().optional(),
    /** USD per million tokens of `model` (`--price-table`), instead of the price library's. */
    prices: ModelPrices.optional(),
  }),
  /**
   * A CLI agent installed once per machine and bound read-only into its sandboxes, talking to
   * its model through Proctor's proxy: a built-in (`name` "codex" or "claude-code", no `dir`) or
   * the agent.toml in `dir`; `version` overrides the definition's.
   */
  z.object({
    kind: z.literal("installed"),
    name: z.string().min(1),
    version: z.string().min(1).optional(),
    dir: z.string().optional(),
    modelProxy: ModelProxySpec,
  }),
  /** An agent packaged as a Docker image: `<dir>/Dockerfile` + `<dir>/agent.toml` (name, start, [env], [build_args]). */
  z.object({ kind: z.literal("image"), dir: z.string() }),
  /** An Agent object a library user passed to the engine; recorded by its name. */
  z.object({ kind: z.literal("custom"), name: z.string() }),
]);
export type AgentSpec = z.infer<typeof AgentSpec>;
