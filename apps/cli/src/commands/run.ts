import { readFile, stat } from "node:fs/promises";
import { existsSync, statSync } from "node:fs";
import { basename, dirname, join, resolve } from "node:path";
import { randomBytes } from "node:crypto";
import type { AgentSpec, Logger, ModelProxySpec, RunConfig, RunSummary, TaskSpec } from "@proctor/schema";
import { DEFAULT_API_KEY_ENV, DEFAULT_BASE_URL, PRICE_LIBRARY, isPriced } from "@proctor/llm";
import { lockRunDir, readRunConfig, retrySelector, startRun, type RunBudget, type RunDirLock, type RunHandle } from "@proctor/engine";
import { loadTasks, nearestName } from "@proctor/tasks";
import { AgentConfigError, AgentError, BUILTIN_INSTALLED_AGENTS, readPriceTable, builtinInstalledAgent, installAgent, isBuiltinInstalledAgent, patchesAgent, readImageAgent, readInstalledAgent, type InstalledAgentDefinition } from "@proctor/agents";
import { parseContainerConfig, type ContainerConfig } from "@proctor/sandbox-docker";
import { concurrencyWarning, describeLimits, hostCapacity, resolveRunLimits, storedRunLimits, type LimitFlags, type ResolvedLimits } from "../limits";
import { CliError, UsageError, EXIT_INTERRUPTED, EXIT_FATAL_AGENT, EXIT_TRIALS_FAILED, EXIT_BUDGET } from "../errors";
import { DEFAULT_DOCKER_IMAGE, openRuntime, parseRuntimeChoice, type ImageFlags } from "../runtime";
import { createProgress, parseResults, renderRunSummary, type ProgressReporter } from "@proctor/report";
import { VERSION } from "../program";
import { prepareSources } from "../sources";
import { datasetSources, originsOf, resolveRemoteSources } from "../remote-sources";
import { ensureQueue, openQueuedRun } from "./queue";

export interface RunCommandOptions {
  sources: string[];
  /** -d, --dataset NAME[@VERSION]: datasets from the registry, run beside the sources. */
  datasets?: string[];
  /** --registry FILE|URL: where dataset names are looked up (default $PROCTOR_REGISTRY, else Harbor's registry). */
  registry?: string;
  agent?: string;
  runtime: string;
  concurrency: number;
  attempts: number;
  include: string[];
  exclude: string[];
  tasksFile?: string;
  out: string;
  runId?: string;
  resume?: string;
  /** --retry with --resume: finished trials to run again (errors, infra, agent-errors, or task ids/globs). */
  retry?: string[];
  timeoutMultiplier: number;
  defaultImage?: string;
  /** --repos-dir: bare mirrors `<owner>__<name>.git` for SWE-bench rows. */
  reposDir?: string;
  /** --image: image template for SWE-bench rows without image_name (`{repo}`, `{version}`, `{instance_id}`). */
  image?: string;
  /** --env-setup: per-repo, per-version setup for SWE-bench rows (derived image + install commands). */
  envSetup?: string;
  /** --isolate-verifier (true) / --no-isolate-verifier (false); undefined: each task decides. */
  isolateVerifier?: boolean;
  /** --grading fresh|shared; undefined: each task's mode. */
  grading?: "fresh" | "shared";
  /** --agent llm flags (--model, --base-url, ...); only --agent llm may use them. */
  llm?: LlmFlags;
  /** --container-config FILE (JSON: mem_limit, shm_size, nano_cpus, gpus, runtime, privileged). */
  containerConfig?: string;
  /** --memory-mb, --cpus, --pids-limit, --storage-mb: the run's default limits (0 = none). */
  limits?: LimitFlags;
  /** --queue redis://HOST:PORT/DB: trials run on `proctor worker`s; the run dir and progress stay here. */
  queue?: string;
  /** --bundles-dir: a directory every worker sees, for task bundles (default: served over HTTP). */
  bundlesDir?: string;
  /** --bundles-host: the address bundles are served on for the workers (default every interface, given as this host's address). */
  bundlesHost?: string;
  /** --image-registry HOST:PORT[/prefix] and --image-cache-gb N (else PROCTOR_IMAGE_REGISTRY, PROCTOR_IMAGE_CACHE_GB): docs/images.md. */
  images?: ImageFlags;
  /** --compute-price: USD per CPU-hour of the trials' sandboxes (a resume without it keeps the run's). */
  computePrice?: number;
  /** --max-cost, --max-tokens, --trial-max-cost, --on-budget (a resume without them keeps the run's). */
  budget?: RunBudget;
  /** --fail-on: exit EXIT_TRIALS_FAILED when a trial errored (errors) or did not pass (failures); default never. */
  failOn?: FailOn;
  json: boolean;
  logger: Logger;
  /** Where progress and the table go; stdout gets only summary.json with --json. */
  stdout?: NodeJS.WriteStream;
  stderr?: NodeJS.WriteStream;
  signal?: AbortSignal;
}

export interface LlmFlags {
  model?: string;
  baseUrl?: string;
  apiKeyEnv?: string;
  maxTurns?: number;
  temperature?: number;
  maxOutputTokens?: number;
  llmConcurrency?: number;
  /** --llm-proxy: give a code agent the model through Proctor's per-trial proxy (--model, --base-url, --api-key-env). */
  llmProxy?: boolean;
  llmBudgetTokens?: number;
  llmBudgetRequests?: number;
  /** --price-table FILE: JSON {"<model>": {"input", "output", "cache_read"?, "cache_write"?}} in USD per million tokens. */
  priceTable?: string;
  /** The prices a resumed run was started with (its --price-table, already read). */
  storedPrices?: ModelProxySpec["prices"];
}

/** `--price-table FILE`'s prices for `model`; every problem names the file (exit 2). */
function pricesFor(file: string, model: string): NonNullable<ModelProxySpec["prices"]> {
  try {
    return readPriceTable(resolve(file), model);
  } catch (error) {
    if (error instanceof AgentConfigError) throw new UsageError(`--price-table ${error.message}`, { cause: error });
    throw error;
  }
}

/**
 * `--model provider/name` of a provider whose OpenAI-compatible endpoint and key variable are
 * known, as Inspect names them: with no --base-url (nor $OPENAI_BASE_URL) the model goes to that
 * provider as `name` (`openai/gpt-4o` -> gpt-4o at OpenAI's API, key in $OPENAI_API_KEY). Today
 * such a name would go to OpenAI as it is, which knows no name with a slash, so no working
 * command changes meaning; with a --base-url the name is sent as given (OpenRouter, vLLM).
 */
const MODEL_PROVIDERS: Readonly<Record<string, { label: string; baseUrl: string; apiKeyEnv: string }>> = {
  openai: { label: "OpenAI", baseUrl: "https://api.openai.com/v1", apiKeyEnv: "OPENAI_API_KEY" },
  anthropic: { label: "Anthropic's OpenAI-compatible endpoint", baseUrl: "https://api.anthropic.com/v1", apiKeyEnv: "ANTHROPIC_API_KEY" },
  openrouter: { label: "OpenRouter", baseUrl: "https://openrouter.ai/api/v1", apiKeyEnv: "OPENROUTER_API_KEY" },
  google: { label: "Google's OpenAI-compatible Gemini endpoint", baseUrl: "https://generativelanguage.googleapis.com/v1beta/openai", apiKeyEnv: "GOOGLE_API_KEY" },
  mistral: { label: "Mistral", baseUrl: "https://api.mistral.ai/v1", apiKeyEnv: "MISTRAL_API_KEY" },
  groq: { label: "Groq", baseUrl: "https://api.groq.com/openai/v1", apiKeyEnv: "GROQ_API_KEY" },
  together: { label: "Together", baseUrl: "https://api.together.xyz/v1", apiKeyEnv: "TOGETHER_API_KEY" },
};

/** Where `--model provider/name` goes (MODEL_PROVIDERS), or null: a plain name, a --base-url or $OPENAI_BASE_URL given, or another prefix. */
function modelRoute(flags: Pick<LlmFlags, "model" | "baseUrl" | "apiKeyEnv">, env: NodeJS.ProcessEnv = process.env): { provider: string; label: string; model: string; baseUrl: string; apiKeyEnv: string } | null {
  const slash = flags.model?.indexOf("/") ?? -1;
  if (!flags.model || slash < 1 || flags.baseUrl !== undefined || env.OPENAI_BASE_URL) return null;
  const provider = flags.model.slice(0, slash);
  const model = flags.model.slice(slash + 1);
  const known = Object.hasOwn(MODEL_PROVIDERS, provider) ? MODEL_PROVIDERS[provider] : undefined;
  if (!known || model === "") return null;
  return { provider, label: known.label, model, baseUrl: known.baseUrl, apiKeyEnv: flags.apiKeyEnv ?? known.apiKeyEnv };
}

/** The hosted APIs that always take a key (MODEL_PROVIDERS' hosts). */
const KEYED_HOSTS = new Set(Object.values(MODEL_PROVIDERS).map((p) => new URL(p.baseUrl).host));

/**
 * The llm AgentSpec from flags: base URL from --base-url, else $OPENAI_BASE_URL, else OpenAI
 * (or the provider of `--model provider/name`, modelRoute); the key's env var NAME from
 * --api-key-env (default OPENAI_API_KEY, or the provider's). The key is not read here, only
 * checked to be set where one is needed.
 */
export function llmSpec(flags: LlmFlags, env: NodeJS.ProcessEnv = process.env): AgentSpec {
  if (!flags.model) throw new UsageError("--agent llm needs --model NAME (e.g. --model gpt-4.1-mini, --model openai/gpt-4o, or the name your vLLM server serves)");
  const route = modelRoute(flags, env);
  const baseUrl = route?.baseUrl ?? flags.baseUrl ?? (env.OPENAI_BASE_URL || DEFAULT_BASE_URL);
  let host: string;
  try {
    const url = new URL(baseUrl);
    if (url.protocol !== "http:" && url.protocol !== "https:") throw new Error("not http(s)");
    host = url.host;
  } catch {
    throw new UsageError(`--base-url must be an http(s) URL such as http://127.0.0.1:8000/v1, got "${baseUrl}"${flags.baseUrl === undefined ? " (from $OPENAI_BASE_URL)" : ""}`);
  }
  const apiKeyEnv = route?.apiKeyEnv ?? flags.apiKeyEnv ?? DEFAULT_API_KEY_ENV;
  if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(apiKeyEnv)) {
    throw new UsageError(`--api-key-env takes the NAME of an environment variable (e.g. OPENROUTER_API_KEY), not the key itself; got a value that is not a variable name`);
  }
  // A variable named on purpose must hold the key: requests without it would all fail.
  if (flags.apiKeyEnv !== undefined && flags.apiKeyEnv !== DEFAULT_API_KEY_ENV && !env[apiKeyEnv]) {
    throw new UsageError(`$${apiKeyEnv} is not set (--api-key-env ${apiKeyEnv}): export it with the API key, or leave --api-key-env out for an endpoint that takes no key`);
  }
  // So must the default one when the requests go to a hosted API (OpenAI's, or --model
  // provider/name's); only a server of your own (--base-url, $OPENAI_BASE_URL) may take none.
  if (!env[apiKeyEnv] && (route !== null || KEYED_HOSTS.has(host))) {
    const where = route ? `--model ${flags.model} goes to ${route.label} at ${baseUrl}` : `the model requests go to ${baseUrl}`;
    throw new UsageError(`$${apiKeyEnv} is not set, and ${where}, which needs a key: export ${apiKeyEnv}, name the variable holding it with --api-key-env VAR, or point --base-url at a server that takes none (e.g. vLLM)`);
  }
  return {
    kind: "llm",
    model: route?.model ?? flags.model,
    baseUrl,
    apiKeyEnv,
    ...(flags.maxTurns !== undefined ? { maxTurns: flags.maxTurns } : {}),
    ...(flags.temperature !== undefined ? { temperature: flags.temperature } : {}),
    ...(flags.maxOutputTokens !== undefined ? { maxOutputTokens: flags.maxOutputTokens } : {}),
    ...(flags.llmConcurrency !== undefined ? { llmConcurrency: flags.llmConcurrency } : {}),
  };
}

/** Default API root per wire protocol when --base-url is not given. */
function defaultBaseUrl(protocol: InstalledAgentDefinition["protocol"], env: NodeJS.ProcessEnv): { url: string; from: string | null } {
  if (protocol === "anthropic-messages") return env.ANTHROPIC_BASE_URL ? { url: env.ANTHROPIC_BASE_URL, from: "$ANTHROPIC_BASE_URL" } : { url: "https://api.anthropic.com/v1", from: null };
  return env.OPENAI_BASE_URL ? { url: env.OPENAI_BASE_URL, from: "$OPENAI_BASE_URL" } : { url: DEFAULT_BASE_URL, from: null };
}

/** `claude-code[@VER]`, `codex[@VER]` or `installed:<dir>[@VER]` as a definition, or null when `value` is none of these. */
export function installedDefinition(value: string): InstalledAgentDefinition | null {
  const at = value.lastIndexOf("@");
  const [head, version] = at > 0 && !value.slice(at + 1).includes("/") ? [value.slice(0, at), value.slice(at + 1)] : [value, undefined];
  if (version === "") throw new UsageError(`--agent ${value}: nothing after @ (write ${head}@VERSION, e.g. ${head}@1.2.3, or leave @ out for the default)`);
  try {
    if (isBuiltinInstalledAgent(head)) return builtinInstalledAgent(head, version);
    if (value.startsWith("installed:")) {
      // A directory name may hold an @: prefer the whole value when it is a directory.
      const whole = value.slice("installed:".length);
      if (existsSync(resolve(whole))) return readInstalledAgent(resolve(whole));
      return readInstalledAgent(resolve(head.slice("installed:".length)), version !== undefined ? { version } : {});
    }
  } catch (error) {
    if (error instanceof AgentConfigError) throw new UsageError(`--agent ${value}: ${error.message}`, { cause: error });
    throw error;
  }
  return null;
}

/**
 * The installed-agent spec from flags: --model required; the base URL and the key's variable
 * default by the agent's wire protocol (Anthropic: https://api.anthropic.com/v1 and
 * ANTHROPIC_API_KEY; OpenAI: $OPENAI_BASE_URL or OpenAI's, and OPENAI_API_KEY). The key must
 * be set now: a run whose every trial would fail on it does not start.
 */
function installedSpec(value: string, def: InstalledAgentDefinition, flags: LlmFlags, env: NodeJS.ProcessEnv = process.env): AgentSpec {
  const flagName = (k: string) => `--${k.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)}`;
  const loopOnly = Object.entries(flags).filter(([k, v]) => v !== undefined && v !== false && ["maxTurns", "temperature", "maxOutputTokens", "llmProxy"].includes(k)).map(([k]) => flagName(k));
  if (loopOnly.length > 0) throw new UsageError(`${flagsVerb(loopOnly, "does not go", "do not go")} with --agent ${value} (the CLI runs its own loop; its model comes through Proctor's proxy already)`);
  if (!flags.model) throw new UsageError(`--agent ${value} needs --model NAME (the model the CLI is evaluated with, e.g. ${def.protocol === "anthropic-messages" ? "claude-sonnet-4-5" : "gpt-5"})`);
  const fallback = defaultBaseUrl(def.protocol, env);
  const baseUrl = flags.baseUrl ?? fallback.url;
  try {
    const url = new URL(baseUrl);
    if (url.protocol !== "http:" && url.protocol !== "https:") throw new Error("not http(s)");
  } catch {
    throw new UsageError(`--base-url must be an http(s) URL such as ${def.protocol === "anthropic-messages" ? "https://api.anthropic.com/v1" : "https://api.openai.com/v1"}, got "${baseUrl}"${flags.baseUrl === undefined && fallback.from ? ` (from ${fallback.from})` : ""}`);
  }
  const apiKeyEnv = flags.apiKeyEnv ?? (def.protocol === "anthropic-messages" ? "ANTHROPIC_API_KEY" : DEFAULT_API_KEY_ENV);
  if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(apiKeyEnv)) throw new UsageError("--api-key-env takes the NAME of an environment variable (e.g. ANTHROPIC_API_KEY), not the key itself; got a value that is not a variable name");
  if (!env[apiKeyEnv]) throw new UsageError(`$${apiKeyEnv} is not set: --agent ${value} sends its model requests through Proctor's proxy, which needs the API key in that variable (export it, or name another with --api-key-env)`);
  const builtin = (BUILTIN_INSTALLED_AGENTS as readonly string[]).includes(def.source);
  return {
    kind: "installed",
    name: def.name,
    version: def.version,
    ...(builtin ? {} : { dir: def.dir }),
    modelProxy: {
      model: flags.model,
      baseUrl,
      apiKeyEnv,
      ...(flags.llmConcurrency !== undefined ? { llmConcurrency: flags.llmConcurrency } : {}),
      ...(flags.llmBudgetTokens !== undefined ? { budgetTokens: flags.llmBudgetTokens } : {}),
      ...(flags.llmBudgetRequests !== undefined ? { budgetRequests: flags.llmBudgetRequests } : {}),
      ...(flags.priceTable !== undefined ? { prices: pricesFor(flags.priceTable, flags.model) } : flags.storedPrices ? { prices: flags.storedPrices } : {}),
    },
  };
}

/** Every kind of --agent, for messages that list them. */
const AGENT_KINDS = "oracle, nop, llm, claude-code[@VER], codex[@VER], installed:<dir>[@VER], patches:<file>, image:<dir>, or a code agent's directory";
/** The agents a --model goes with. */
const MODEL_AGENTS = "--agent llm, claude-code, codex, installed:<dir>, or a code agent's directory with --llm-proxy";
/** The agents --llm-budget-tokens, --llm-budget-requests and --price-table go with (through the model proxy). */
const PROXY_AGENTS = "--agent claude-code, codex, installed:<dir>, or a code agent's directory with --llm-proxy";

/** `--a goes` / `--a and --b go` / `--a, --b and --c go`: flags and the verb that agrees with them. */
function flagsVerb(flags: string[], singular: string, plural: string): string {
  const list = flags.length <= 1 ? flags.join("") : `${flags.slice(0, -1).join(", ")} and ${flags.at(-1)}`;
  return `${list} ${flags.length === 1 ? singular : plural}`;
}

export function parseAgent(value: string | undefined, archiveAgentDir: string | null, llm: LlmFlags = {}): AgentSpec {
  if (value !== undefined) {
    const installed = installedDefinition(value);
    if (installed) return installedSpec(value, installed, llm);
  }
  const flagName = (k: string) => `--${k.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)}`;
  const given = (keys: string[]) => Object.entries(llm).filter(([k, v]) => v !== undefined && v !== false && k !== "storedPrices" && keys.includes(k)).map(([k]) => flagName(k));
  const proxyOnly = given(["llmProxy", "llmBudgetTokens", "llmBudgetRequests", "priceTable"]);
  const loopOnly = given(["maxTurns", "temperature", "maxOutputTokens"]);
  const llmFlags = given(Object.keys(llm));
  if (value === "llm") {
    const notLoop = proxyOnly.filter((f) => f !== "--price-table");
    if (notLoop.length > 0) throw new UsageError(`${flagsVerb(notLoop, "goes", "go")} with a code agent (--agent <dir> --llm-proxy), not --agent llm`);
    const spec = llmSpec(llm);
    const prices = llm.priceTable !== undefined && llm.model ? pricesFor(llm.priceTable, spec.kind === "llm" ? spec.model : llm.model) : llm.storedPrices;
    return prices ? { ...spec, prices } as AgentSpec : spec;
  }
  if (llm.llmProxy) {
    if (loopOnly.length > 0) throw new UsageError(`${flagsVerb(loopOnly, "only goes", "only go")} with --agent llm (with --llm-proxy the agent sends its own requests)`);
    const code = value === undefined || value === "oracle" || value === "nop" ? null : parseAgent(value, archiveAgentDir);
    const dir = value === undefined ? archiveAgentDir : code?.kind === "code" ? code.dir : null;
    if (!dir) throw new UsageError("--llm-proxy gives a code agent a model: use it with --agent <agent-dir> (or an archive with agent_code/)");
    const { kind: _kind, maxTurns: _t, temperature: _temp, maxOutputTokens: _m, ...model } = llmSpec(llm) as Extract<AgentSpec, { kind: "llm" }>;
    return {
      kind: "code",
      dir,
      modelProxy: {
        ...model,
        ...(llm.llmBudgetTokens !== undefined ? { budgetTokens: llm.llmBudgetTokens } : {}),
        ...(llm.llmBudgetRequests !== undefined ? { budgetRequests: llm.llmBudgetRequests } : {}),
        ...(llm.priceTable !== undefined && llm.model ? { prices: pricesFor(llm.priceTable, llm.model) } : llm.storedPrices ? { prices: llm.storedPrices } : {}),
      },
    };
  }
  const agent = parsePlainAgent(value, archiveAgentDir);
  if (llmFlags.length > 0) {
    // Which agents take these flags, and why this one does not.
    const why = agent.kind === "code" ? "a code agent takes one only with --llm-proxy: add it" : `${value === undefined ? `the default agent, ${agent.kind},` : `--agent ${value}`} takes no model`;
    if (loopOnly.length > 0) throw new UsageError(`${flagsVerb(loopOnly, "only goes", "only go")} with --agent llm; ${why}`);
    if (proxyOnly.length === llmFlags.length) throw new UsageError(`${flagsVerb(proxyOnly, "goes", "go")} with an agent that takes a model through the model proxy (${PROXY_AGENTS}); ${why}`);
    throw new UsageError(`${flagsVerb(llmFlags, "goes", "go")} with an agent that takes a model (${MODEL_AGENTS}); ${why}`);
  }
  return agent;
}

/** An --agent that takes no model flags: oracle, nop, image:<dir>, a code agent's directory (default: the archive's agent_code/, else oracle). */
function parsePlainAgent(value: string | undefined, archiveAgentDir: string | null): AgentSpec {
  if (value === undefined) {
    if (archiveAgentDir) return { kind: "code", dir: archiveAgentDir };
    return { kind: "oracle" };
  }
  if (value === "oracle" || value === "nop") return { kind: value };
  if (value.startsWith("image:")) return imageAgentSpec(value.slice("image:".length));
  const dir = resolve(value);
  const info = statSync(dir, { throwIfNoEntry: false });
  if (!info) {
    // A typo of an agent's name (not a path) gets the nearest name first.
    const near = /[/\\]/.test(value) ? undefined : nearestName(value, ["oracle", "nop", "llm", ...BUILTIN_INSTALLED_AGENTS]);
    throw new UsageError(`--agent ${value}: no such agent, and no such directory${near ? `; did you mean --agent ${near}?` : ""} (--agent takes ${AGENT_KINDS})`);
  }
  if (!info.isDirectory()) {
    throw new UsageError(`--agent ${value} is a file: name the directory holding it (--agent ${dirname(value)}); a code agent is a directory with run.sh (or agent.toml for an installed agent: --agent installed:<dir>)`);
  }
  return { kind: "code", dir };
}

/** The agent in a few words: what it is, and the model it talks to. */
function describeAgent(agent: AgentSpec | { name: string }, arg: string | undefined): string {
  if (!("kind" in agent)) return arg ?? agent.name;
  switch (agent.kind) {
    case "oracle":
      return "oracle (each task's reference solution)";
    case "nop":
      return "nop (does nothing)";
    case "llm":
      return `llm, model ${agent.model} at ${agent.baseUrl}`;
    case "code":
      return `code agent ${agent.dir}${agent.modelProxy ? `, model ${agent.modelProxy.model} through the model proxy to ${agent.modelProxy.baseUrl}` : ""}`;
    case "installed":
      return `${agent.name}${agent.version ? ` ${agent.version}` : ""}, model ${agent.modelProxy.model} through the model proxy to ${agent.modelProxy.baseUrl}`;
    case "image":
      return `agent image ${agent.dir}`;
    default:
      return arg ?? agent.kind;
  }
}

/** Why the default agent was picked when --agent was not given. */
function describeDefault(archiveAgentDir: string | null): string {
  return archiveAgentDir
    ? " (the archive's agent_code/, because no --agent was given; --agent oracle runs the reference solutions instead)"
    : " (no --agent given; name one with --agent: nop, llm, claude-code, codex, a code agent's directory)";
}

/** Lines mode's quietest interval, from $PROCTOR_PROGRESS_INTERVAL_SEC (default 20 s). */
function progressIntervalMs(env: NodeJS.ProcessEnv): number | undefined {
  const raw = env.PROCTOR_PROGRESS_INTERVAL_SEC;
  if (raw === undefined || raw === "") return undefined;
  const sec = Number(raw);
  if (!Number.isFinite(sec) || sec <= 0) throw new UsageError(`PROCTOR_PROGRESS_INTERVAL_SEC must be a positive number of seconds, got "${raw}"`);
  return sec * 1000;
}

/** `--agent image:DIR`: an agent shipped as a Dockerfile + agent.toml (checked now, built by the run). */
function imageAgentSpec(dir: string): AgentSpec {
  try {
    readImageAgent(resolve(dir));
  } catch (error) {
    if (error instanceof AgentConfigError) throw new UsageError(`--agent image:${dir}: ${error.message}`, { cause: error });
    throw error;
  }
  return { kind: "image", dir: resolve(dir) };
}

/** The container settings a stored run was started with (its limits are reused from run.json as they are). */
function containerOf(previous: { container?: ContainerConfig["settings"] }): ContainerConfig | undefined {
  return previous.container ? { settings: previous.container } : undefined;
}

/** `--container-config FILE`, parsed; every problem names the file and field. */
async function readContainerConfig(file: string): Promise<ContainerConfig> {
  const text = await readFile(resolve(file), "utf8").catch((error: unknown) => {
    throw new UsageError(`--container-config ${file}: cannot be read: ${(error as Error).message}`);
  });
  try {
    return parseContainerConfig(text, `--container-config ${file}`);
  } catch (error) {
    throw new UsageError((error as Error).message, { cause: error });
  }
}

/** `--agent patches:FILE`: SWE-bench predictions applied per instance. */
function predictionsAgent(file: string) {
  try {
    return patchesAgent(resolve(file));
  } catch (error) {
    if (error instanceof AgentConfigError) throw new UsageError(`--agent patches:${file}: ${error.message}`, { cause: error });
    throw error;
  }
}

function newRunId(): string {
  const now = new Date().toISOString().replace(/[-:]/g, "").replace("T", "-").slice(0, 15);
  return `${now}-${randomBytes(2).toString("hex")}`;
}

/** `proctor run`: load tasks, run them on the engine, show progress, print the table. Returns the exit code. */
export async function runCommand(options: RunCommandOptions): Promise<number> {
  const out = options.stdout ?? process.stdout;
  const err = options.stderr ?? process.stderr;
  if (!Number.isInteger(options.concurrency) || options.concurrency < 1) throw new UsageError(`--concurrency must be a whole number >= 1, got ${options.concurrency}`);
  if (!Number.isInteger(options.attempts) || options.attempts < 1) throw new UsageError(`--attempts must be a whole number >= 1, got ${options.attempts}`);
  if (!(options.timeoutMultiplier > 0)) throw new UsageError(`--timeout-multiplier must be a positive number, got ${options.timeoutMultiplier}`);
  const failOn = options.failOn ?? "never";
  if (!FAIL_ON.includes(failOn)) throw new UsageError(`--fail-on must be one of ${FAIL_ON.join(", ")}, got "${failOn}"`);
  const progressInterval = progressIntervalMs(process.env);
  const retry = options.retry ?? [];
  if (retry.length > 0 && !options.resume) throw new UsageError("--retry goes with --resume RUN_DIR: it picks which finished trials of that run to run again");

  let runId = options.runId ?? newRunId();
  let runsRoot = resolve(options.out);
  let sources = [...options.sources, ...(await datasetSources(options.datasets ?? [], options.registry))];
  // A resumed run's pins: its dataset and git sources are fetched at the same commits.
  let pins: RunConfig["origins"];
  let agentArg = options.agent;
  let runtimeArg = options.runtime;
  let attempts = options.attempts;
  let multiplier = options.timeoutMultiplier;
  let defaultImage = options.defaultImage;
  let isolateVerifier = options.isolateVerifier;
  let grading = options.grading;
  let storedContainer: ContainerConfig | undefined;
  let storedLimits: ResolvedLimits | undefined;
  // Where the prices come from: the price library, or --price-table FILE (a resume keeps the run's).
  let priceSource: { name: string; version: string } | undefined;
  let storedBudget: RunBudget | undefined;
  let storedComputePrice: number | undefined;
  let llmFlags: LlmFlags = options.llm ?? {};
  // The task selection, stored in run.json (--tasks-file as an absolute path) and reused by a resume.
  let include = options.include;
  let exclude = options.exclude;
  let tasksFile = options.tasksFile !== undefined ? resolve(options.tasksFile) : undefined;
  // SWE-bench loader flags, as absolute paths: stored in run.json, reused by a resume.
  const dataset: { reposDir?: string; imageTemplate?: string; envSetup?: string } = {
    ...(options.reposDir !== undefined ? { reposDir: resolve(options.reposDir) } : {}),
    ...(options.image !== undefined ? { imageTemplate: options.image } : {}),
    ...(options.envSetup !== undefined ? { envSetup: resolve(options.envSetup) } : {}),
  };

  if (options.resume) {
    const runDir = resolve(options.resume);
    const previous = await readRunConfig(runDir);
    runId = previous.runId;
    runsRoot = dirname(runDir);
    pins = previous.origins;
    if (basename(runDir) !== runId) throw new UsageError(`--resume ${options.resume}: run.json names run ${runId}, but the directory is ${basename(runDir)}`);
    priceSource = previous.pricing?.source;
    storedBudget = previous.budget;
    storedComputePrice = previous.pricing?.computeUsdPerCpuHour;
    // With no sources given, a resume repeats the stored run exactly; given flags must match it.
    if (sources.length === 0) {
      sources = previous.sources;
      agentArg ??= previous.agent.kind === "installed" ? `${previous.agent.dir !== undefined ? `installed:${previous.agent.dir}` : previous.agent.name}@${previous.agent.version ?? ""}` : previous.agent.kind === "image" ? `image:${previous.agent.dir}` : previous.agent.kind === "code" ? previous.agent.dir : previous.agent.kind === "custom" && previous.agent.name.startsWith("patches:") ? previous.agent.name : previous.agent.kind;
      if (previous.agent.kind === "llm" && agentArg === "llm") {
        const { kind: _kind, prices, ...stored } = previous.agent;
        llmFlags = { ...stored, storedPrices: prices, ...Object.fromEntries(Object.entries(llmFlags).filter(([, v]) => v !== undefined)) };
      }
      if (previous.agent.kind === "installed") {
        const { budgetTokens, budgetRequests, prices, ...stored } = previous.agent.modelProxy;
        const storedFlags: LlmFlags = { ...stored, llmBudgetTokens: budgetTokens, llmBudgetRequests: budgetRequests, storedPrices: prices };
        llmFlags = { ...storedFlags, ...Object.fromEntries(Object.entries(llmFlags).filter(([, v]) => v !== undefined)) };
      }
      if (previous.agent.kind === "code" && previous.agent.modelProxy) {
        const { budgetTokens, budgetRequests, prices, ...stored } = previous.agent.modelProxy;
        const storedFlags: LlmFlags = { ...stored, llmProxy: true, llmBudgetTokens: budgetTokens, llmBudgetRequests: budgetRequests, storedPrices: prices };
        llmFlags = { ...storedFlags, ...Object.fromEntries(Object.entries(llmFlags).filter(([, v]) => v !== undefined)) };
      }
      runtimeArg = previous.runtime;
      attempts = previous.attempts;
      multiplier = previous.timeoutMultiplier;
      defaultImage ??= previous.defaultImage ?? undefined;
      isolateVerifier ??= previous.isolateVerifier;
      grading ??= previous.grading;
      storedContainer = containerOf(previous);
      storedLimits = storedRunLimits(previous.limits);
      dataset.reposDir ??= previous.dataset?.reposDir;
      dataset.imageTemplate ??= previous.dataset?.imageTemplate;
      dataset.envSetup ??= previous.dataset?.envSetup;
      // The stored selection, unless a selection flag is given (a different one is then refused as a change).
      if (include.length === 0) include = previous.selection?.include ?? [];
      if (exclude.length === 0) exclude = previous.selection?.exclude ?? [];
      tasksFile ??= previous.selection?.tasksFile;
    }
  } else if (existsSync(join(runsRoot, runId, "run.json"))) {
    // A run still being written is named first (its pid), then any other run there.
    await (await lockRunDir(join(runsRoot, runId))).release();
    throw new UsageError(`run ${runId} already exists in ${runsRoot}; pass --resume ${join(runsRoot, runId)} to continue it, or another --run-id`);
  }
  if (sources.length === 0) throw new UsageError("give at least one task source: proctor run <source>... (a task dir, a dir of tasks, an archive, dataset rows, a dataset by name such as terminal-bench@2.0, or git+URL@COMMIT#PATH)");

  // Everything the flags alone decide is checked before the run directory exists: a refused run leaves none.
  // (An archive's agent_code/ is the default agent, so without --agent the agent waits for the sources.)
  const namedAgent = agentArg === undefined ? null : agentArg.startsWith("patches:") ? predictionsAgent(agentArg.slice("patches:".length)) : parseAgent(agentArg, null, llmFlags);
  if (llmFlags.priceTable !== undefined) priceSource = { name: "price-table", version: resolve(llmFlags.priceTable) };
  // Budgets given now replace the run's (a resume may raise them); none given: the run's own.
  const budgetFlags = Object.fromEntries(Object.entries(options.budget ?? {}).filter(([, v]) => v !== undefined)) as RunBudget;
  const budget: RunBudget | undefined = Object.keys(budgetFlags).length > 0 ? { ...(budgetFlags.onBudget === undefined && storedBudget?.onBudget ? { onBudget: storedBudget.onBudget } : {}), ...budgetFlags } : storedBudget;
  if (budget?.onBudget !== undefined && budget.maxCostUsd === undefined && budget.maxTokens === undefined) throw new UsageError("--on-budget goes with a run budget: --max-cost USD or --max-tokens N");
  const container = options.containerConfig !== undefined ? await readContainerConfig(options.containerConfig) : storedContainer;
  // A resume repeats the stored limits unless a limit flag or a container config is given (a
  // changed value is then refused like any other config change).
  const limitFlags = options.limits ?? {};
  const limitsGiven = options.containerConfig !== undefined || Object.values(limitFlags).some((v) => v !== undefined);
  const resolvedLimits = storedLimits !== undefined && !limitsGiven ? storedLimits : resolveRunLimits(limitFlags, container);

  if (options.queue) {
    const given = (["imageRegistry", "imageCacheGb"] as const).filter((key) => options.images?.[key] !== undefined);
    if (given.length > 0) {
      const flags = given.map((key) => (key === "imageRegistry" ? "--image-registry" : "--image-cache-gb")).join(" and ");
      throw new UsageError(`${flags}: with --queue the workers build, pull and keep the images; give ${given.length > 1 ? "them" : "it"} to proctor worker (or set ${given.map((key) => (key === "imageRegistry" ? "PROCTOR_IMAGE_REGISTRY" : "PROCTOR_IMAGE_CACHE_GB")).join(" / ")} where the workers run)`);
    }
    await ensureQueue(options.queue);
  }

  // The run directory is locked while this command writes it: a resume takes the lock at once (a
  // run still going refuses it, naming its pid); a new run creates the directory and takes it
  // when it first writes there (an archive's extraction, else the run's start).
  const runDir = join(runsRoot, runId);
  const held: { lock: RunDirLock | null } = { lock: null };
  const takeLock = async () => (held.lock ??= await lockRunDir(runDir));
  if (options.resume) await takeLock();
  try {
    return await runLocked();
  } finally {
    // A run refused before it started leaves no run directory behind (nor a runs root it made).
    await held.lock?.release({ discardUnstarted: true });
  }

  async function runLocked(): Promise<number> {
    const remote = await resolveRemoteSources(sources, { registry: options.registry, ...(pins ? { pins } : {}), err });
    const prepared = await prepareSources(remote.localPaths, join(runDir, "input"), options.logger, { beforeExtract: takeLock, replace: Boolean(options.resume) });
    const loaded = await loadTasks(prepared.taskSources, {
      include,
      exclude,
      tasksFile,
      ...(dataset.reposDir !== undefined ? { reposDir: dataset.reposDir } : {}),
      ...(dataset.imageTemplate !== undefined ? { imageTemplate: dataset.imageTemplate } : {}),
      ...(dataset.envSetup !== undefined ? { envSetup: dataset.envSetup } : {}),
    });
    if (loaded.errors.length > 0) {
      throw new UsageError(`${loaded.errors.length} task(s) failed to load:\n${loaded.errors.map((e) => `  ${e.message}`).join("\n")}`);
    }
    const tasks: TaskSpec[] = loaded.tasks;
    if (tasks.length === 0) throw new UsageError(`no tasks matched in ${sources.join(", ")}${include.length || exclude.length || tasksFile ? " after --include/--exclude/--tasks-file" : ""}`);

    const agent = namedAgent ?? parseAgent(undefined, prepared.agentDir, llmFlags);
    if (retry.length > 0) {
      // Which finished trials run again, said before they do (results.jsonl: the last line per trial counts).
      const { results } = parseResults(await readFile(join(runDir, "results.jsonl"), "utf8").catch(() => ""));
      const picked = results.filter(retrySelector(retry)).map((r) => r.trialId);
      err.write(`--retry ${retry.join(" ")}: running ${picked.length} finished trial(s) again${picked.length > 0 ? `: ${picked.slice(0, 10).join(", ")}${picked.length > 10 ? `, ... (${picked.length} in all)` : ""}` : ""}\n`);
    }
    if (budget) checkBudget(budget, agent);
    const computePrice = options.computePrice ?? storedComputePrice;
    // Which agent runs, and why that one: an archive's agent_code/ is used only when --agent is not given.
    err.write(`agent: ${describeAgent(agent, agentArg)}${options.resume && options.agent === undefined ? " (the resumed run's)" : options.agent === undefined ? describeDefault(prepared.agentDir) : ""}\n`);
    // `--model provider/name` picked the endpoint and the key's variable: say so, and which.
    const route = "kind" in agent && (agent.kind === "llm" || (agent.kind === "code" && agent.modelProxy)) ? modelRoute(llmFlags) : null;
    if (route) err.write(`model: --model ${llmFlags.model} picked ${route.label} at ${route.baseUrl}, the key in $${route.apiKeyEnv}, and sends the model as ${route.model} (--base-url and --api-key-env pick others)\n`);
    const queued = options.queue
      ? await openQueuedRun({ url: options.queue, bundlesDir: options.bundlesDir, bundlesHost: options.bundlesHost, out: options.out, runtime: parseRuntimeChoice(runtimeArg), logger: options.logger, err })
      : null;
    try {
      const runtime = queued?.runtime ?? (await openRuntime(parseRuntimeChoice(runtimeArg), options.logger, options.images));
      const image = defaultImage ?? (runtime.name === "docker" ? DEFAULT_DOCKER_IMAGE : null);
      if (runtime.name === "local") {
        const unbuilt = tasks.filter((t) => t.environment.buildContext !== null && t.environment.dockerImage === null);
        if (unbuilt.length > 0) {
          const named = unbuilt.slice(0, 3).map((t) => t.id).join(", ") + (unbuilt.length > 3 ? ", ..." : "");
          err.write(`warning: the local runtime builds no images: ${unbuilt.length} task(s) with an environment/Dockerfile (${named}) run on this host as it is; --runtime docker builds them\n`);
        }
      }
      if ("kind" in agent && agent.kind === "installed" && !queued) await preinstall(agent, runtime, err, options.signal);
      // A run killed with -9 leaves its sandboxes behind; remove those of dead owners before starting.
      const reaped = await runtime.reap();
      if (reaped > 0) err.write(`removed ${reaped} sandbox(es) left behind by runs that died\n`);
      const lock = await takeLock();

      const controller = new AbortController();
      const onSignal = (name: string) => () => {
        if (controller.signal.aborted) {
          err.write(`${name} again: exiting now; sandboxes may be left behind (remove them with proctor gc)\n`);
          process.exit(EXIT_INTERRUPTED);
        }
        err.write(`${name}: stopping; no new trials start, running sandboxes are removed, finished results are kept (Ctrl-C again to force)\n`);
        controller.abort(new Error(`interrupted by ${name}`));
      };
      const sigint = onSignal("SIGINT");
      const sigterm = onSignal("SIGTERM");
      process.on("SIGINT", sigint);
      process.on("SIGTERM", sigterm);
      options.signal?.addEventListener("abort", () => controller.abort(options.signal?.reason), { once: true });

      err.write(`run directory: ${runDir}\n`);
      // Sandboxes without a filesystem of their own are host processes: no limit applies to them.
      err.write(`${describeLimits(resolvedLimits, runtime.capabilities.files)}\n`);
      if (computePrice !== undefined && !runtime.capabilities.files) err.write(`--compute-price: the ${runtime.name} runtime does not measure CPU-seconds; trials get no compute cost (use --runtime docker)\n`);
      // A -n past what the host holds is allowed, but said once (queued trials run on the workers' hosts).
      const crowded = queued ? null : concurrencyWarning(options.concurrency, tasks.length * attempts, resolvedLimits.limits?.defaults ?? {}, hostCapacity());
      if (crowded) err.write(`${crowded}\n`);
      const progress = createProgress(err, { runDir, intervalMs: progressInterval });
      let summary: RunSummary;
      try {
        const selection = { ...(include.length > 0 ? { include } : {}), ...(exclude.length > 0 ? { exclude } : {}), ...(tasksFile !== undefined ? { tasksFile } : {}) };
        const handle = startRun({
          runId,
          runDir,
          lock,
          tasks,
          agent,
          runtime,
          concurrency: options.concurrency,
          attempts,
          timeoutMultiplier: multiplier,
          defaultImage: image,
          ...(isolateVerifier !== undefined ? { isolateVerifier } : {}),
          ...(grading !== undefined ? { grading } : {}),
          resume: Boolean(options.resume),
          ...(retry.length > 0 ? { retry: retrySelector(retry) } : {}),
          proctorVersion: VERSION,
          sources: remote.recorded,
          origins: originsOf(tasks, remote.dirs),
          selection,
          dataset: Object.fromEntries(Object.entries(dataset).filter(([, v]) => v !== undefined)),
          signal: controller.signal,
          logger: options.logger,
          ...(queued ? { dispatch: queued.dispatch } : {}),
          ...(container ? { container: container.settings } : {}),
          ...(resolvedLimits.limits ? { limits: resolvedLimits.limits } : {}),
          ...(budget ? { budget } : {}),
          priceSource: priceSource ?? { ...PRICE_LIBRARY },
          ...(computePrice !== undefined ? { computeUsdPerCpuHour: computePrice } : {}),
        });
        summary = await followRun(handle, progress);
      } finally {
        process.off("SIGINT", sigint);
        process.off("SIGTERM", sigterm);
      }

      const table = renderRunSummary(summary);
      if (options.json) {
        err.write(`${table}\nrun directory: ${runDir}\n`);
        out.write(`${JSON.stringify({ ...summary, runDir }, null, 2)}\n`);
      } else {
        out.write(`\n${table}\nrun directory: ${runDir}\n`);
      }
      if (summary.status === "failed" && summary.error) {
        err.write(`proctor: the run stopped: ${summary.error}\nfinished trials are kept; fix the cause, then continue with  proctor run --resume ${runDir}\n`);
        return EXIT_FATAL_AGENT;
      }
      if (summary.status === "interrupted") {
        err.write(`interrupted: resume with  proctor run --resume ${runDir}\n`);
        return EXIT_INTERRUPTED;
      }
      if (summary.status === "budget_exhausted") {
        const spent = summary.budget;
        const raise = spent?.exhausted?.startsWith("--max-tokens") ? "--max-tokens N" : "--max-cost USD";
        err.write(`proctor: budget spent (${spent?.exhausted ?? "a run budget"}); ${spent?.notRun ?? summary.trials.planned - summary.trials.total} trial(s) not run (exit ${EXIT_BUDGET}); finish with a higher budget:  proctor run --resume ${runDir} ${raise}\n`);
        return EXIT_BUDGET;
      }
      const failed = failOnReason(failOn, summary);
      if (failed) {
        err.write(`proctor: --fail-on ${failOn}: ${failed} (exit ${EXIT_TRIALS_FAILED}); results in ${runDir}\n`);
        return EXIT_TRIALS_FAILED;
      }
      return 0;
    } finally {
      await queued?.close();
    }
  }
}

/**
 * Refuses budgets that could never act: a cost budget for a model without a price (it would
 * never be reached), and --trial-max-cost with an agent that takes no model.
 */
function checkBudget(budget: RunBudget, agent: AgentSpec | { name: string }): void {
  const spec = "kind" in agent ? agent : null;
  const model = spec?.kind === "llm" ? { model: spec.model, baseUrl: spec.baseUrl, prices: spec.prices } : spec?.kind === "installed" || (spec?.kind === "code" && spec.modelProxy) ? spec.modelProxy : undefined;
  if (budget.trialMaxCostUsd !== undefined && !model) throw new UsageError("--trial-max-cost goes with an agent that takes a model (--agent llm, claude-code, codex, installed:<dir>, or a code agent's directory with --llm-proxy)");
  if ((budget.maxCostUsd !== undefined || budget.trialMaxCostUsd !== undefined) && model && !isPriced(model.model, { baseUrl: model.baseUrl, ...(model.prices ? { prices: model.prices } : {}) })) {
    throw new UsageError(`--max-cost / --trial-max-cost need a price for model "${model.model}", and ${PRICE_LIBRARY.name} ${PRICE_LIBRARY.version} has none: give one with --price-table FILE, or budget tokens with --max-tokens N`);
  }
}

/** `--fail-on` values: which finished trials make a completed run exit EXIT_TRIALS_FAILED. */
const FAIL_ON = ["errors", "failures", "never"] as const;
type FailOn = (typeof FAIL_ON)[number];

/** Why `--fail-on` fails this run (e.g. "3 of 4 trials errored"), or null when it does not. */
function failOnReason(failOn: FailOn, summary: RunSummary): string | null {
  const { total, passed, errored } = summary.trials;
  if (failOn === "errors" && errored > 0) return `${errored} of ${total} trials errored`;
  if (failOn === "failures" && passed < total) return `${total - passed} of ${total} trials did not pass (failed ${summary.trials.failed}, errored ${errored}${summary.trials.flagged ? `, flagged ${summary.trials.flagged}` : ""})`;
  return null;
}

export async function isDirectory(path: string): Promise<boolean> {
  return (await stat(path).catch(() => null))?.isDirectory() ?? false;
}

/**
 * Installs an installed agent's version before the run (once per machine; a cached one is only
 * checked for), so a failed install is one clear line before any trial and the trials start
 * without installing. Needs a runtime whose sandboxes have files of their own (the install is
 * bound into them read-only).
 */
async function preinstall(spec: Extract<AgentSpec, { kind: "installed" }>, runtime: Awaited<ReturnType<typeof openRuntime>>, err: NodeJS.WritableStream, signal: AbortSignal | undefined): Promise<void> {
  const label = `${spec.name}@${spec.version ?? "default"}`;
  if (!runtime.capabilities.files) throw new UsageError(`--agent ${label} runs in containers: the ${runtime.name} runtime cannot bind its install into a sandbox; use --runtime docker`);
  const def = spec.dir !== undefined ? readInstalledAgent(spec.dir, spec.version !== undefined ? { version: spec.version } : {}) : builtinInstalledAgent(spec.name as (typeof BUILTIN_INSTALLED_AGENTS)[number], spec.version);
  try {
    const done = await installAgent(def, { runtime, ...(signal ? { signal } : {}), onProgress: (line) => err.write(`agent ${def.name} ${def.version}: ${line}\n`) });
    err.write(done.installed ? `agent ${def.name} ${def.version}: installed in ${(done.durationMs / 1000).toFixed(1)} s into ${done.dir}\n` : `agent ${def.name} ${def.version}: cached in ${done.dir}\n`);
  } catch (error) {
    if (error instanceof AgentError) throw new CliError(error.message, 1, { cause: error });
    throw error;
  }
}

/** Shows a run's events as progress lines until it ends; its summary. */
export async function followRun(handle: RunHandle, progress: ProgressReporter): Promise<RunSummary> {
  const unsubscribe = handle.bus.subscribe((event) => progress.onEvent(event));
  try {
    return await handle.done;
  } finally {
    unsubscribe();
    progress.stop();
  }
}
