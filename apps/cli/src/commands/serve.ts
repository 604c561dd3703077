import { resolve } from "node:path";
import { KeyLoadError, loadKeypair, type Keypair } from "@proctor/auth";
import type { Logger } from "@proctor/schema";
import { DEFAULT_API_KEY_ENV } from "@proctor/llm";
import type { AuthMode, ServerModelProxy, StartServerOptions } from "@proctor/server";
import { BUILTIN_INSTALLED_AGENTS } from "@proctor/agents";
import { UsageError } from "../errors";
import { installedDefinition } from "./run";
import { DEFAULT_DOCKER_IMAGE, openRuntime, parseRuntimeChoice } from "../runtime";
import { ensureQueue, queuedRuntime } from "./queue";

export interface ServeOptions {
  host: string;
  port: number;
  dataDir: string;
  auth: string;
  runtime: string;
  defaultImage?: string;
  maxActiveBatches: number;
  maxQueuedBatches: number;
  maxConcurrentTasks: number;
  insecure: boolean;
  hotkeysFile?: string;
  retentionDays?: number;
  allowLocalRepos: boolean;
  unsafeLocalRuntime: boolean;
  /** --isolate-verifier / --no-isolate-verifier; undefined: each task decides. */
  isolateVerifier?: boolean;
  /** --grading fresh|shared; undefined: each task's mode. */
  grading?: "fresh" | "shared";
  /** --admin-hotkeys (comma-separated); undefined: $PROCTOR_ADMIN_HOTKEYS. */
  adminHotkeys?: string;
  /** --max-uploads / --max-uploads-per-key: uploads in progress at once. */
  maxUploads?: number;
  maxUploadsPerKey?: number;
  /** --allow-undigested-uploads: accept signed uploads without Content-Digest (staged, checked after). */
  allowUndigestedUploads?: boolean;
  /** --receipt-key: a file holding the sr25519 key that signs batch receipts (the secret never goes on the command line). */
  receiptKey?: string;
  /** --llm-proxy-base-url, --llm-api-key-env, --llm-models, --llm-budget-*: a model for every batch's agent through the proxy. */
  llmProxyBaseUrl?: string;
  llmApiKeyEnv?: string;
  llmModels?: string;
  llmBudgetTokens?: number;
  llmBudgetRequests?: number;
  /** --agents: installed CLI agents (codex[@VER], claude-code[@VER], installed:<dir>[@VER]) batches may name with ?agent=. */
  agents?: string;
  /** --agent-image-build-timeout / --agent-image-max-mb / --agent-image-build-network: limits of an uploaded agent_image/ build. */
  agentImageBuildTimeoutSec?: number;
  agentImageMaxMb?: number;
  agentImageBuildNetwork?: boolean;
  /** --slots and --slots-*: serve /v1/slots with these pool settings. */
  slots?: StartServerOptions["slots"];
  /** --queue redis://HOST:PORT/DB: trials go to `proctor worker`s; this process runs none. */
  queue?: string;
  /** --worker-token, else PROCTOR_WORKER_TOKEN: what workers must send for GET /v1/bundles/:sha and /v1/workers. */
  workerToken?: string;
  /** --public-url: this server's URL as workers reach it (default: the listen URL). */
  publicUrl?: string;
  logger: Logger;
}

/** The server's model proxy from flags; the key is only named (its env var), never read here. */
function serverModelProxy(options: ServeOptions): ServerModelProxy | undefined {
  const given = ([["--llm-api-key-env", options.llmApiKeyEnv], ["--llm-models", options.llmModels], ["--llm-budget-tokens", options.llmBudgetTokens], ["--llm-budget-requests", options.llmBudgetRequests], ["--agents", options.agents]] as const).filter(([, v]) => v !== undefined);
  if (options.llmProxyBaseUrl === undefined) {
    if (given.length > 0) throw new UsageError(`${given.map(([n]) => n).join(", ")} need --llm-proxy-base-url URL`);
    return undefined;
  }
  try {
    const url = new URL(options.llmProxyBaseUrl);
    if (url.protocol !== "http:" && url.protocol !== "https:") throw new Error("not http(s)");
  } catch {
    throw new UsageError(`--llm-proxy-base-url must be an http(s) URL such as https://api.openai.com/v1, got "${options.llmProxyBaseUrl}"`);
  }
  const apiKeyEnv = options.llmApiKeyEnv ?? DEFAULT_API_KEY_ENV;
  if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(apiKeyEnv)) throw new UsageError("--llm-api-key-env takes the NAME of an environment variable, not the key itself");
  const models = (options.llmModels ?? "").split(",").map((m) => m.trim()).filter((m) => m !== "");
  if (models.length === 0) throw new UsageError("--llm-proxy-base-url needs --llm-models a,b (the models batches may name with ?model=; the first is the default)");
  const agents: NonNullable<ServerModelProxy["agents"]> = {};
  for (const value of (options.agents ?? "").split(",").map((a) => a.trim()).filter((a) => a !== "")) {
    const def = installedDefinition(value);
    if (!def) throw new UsageError(`--agents ${value}: not claude-code, codex or installed:<dir> (each with an optional @VERSION)`);
    // The operator's key stays in this process; without it every batch naming the agent would fail.
    if (!process.env[apiKeyEnv]) throw new UsageError(`--agents ${value}: $${apiKeyEnv} is not set; the agent's model requests go through this server's proxy with that key (--llm-api-key-env names another variable)`);
    const builtin = (BUILTIN_INSTALLED_AGENTS as readonly string[]).includes(def.source);
    agents[def.name] = { name: def.name, version: def.version, ...(builtin ? {} : { dir: def.dir }) };
  }
  return {
    baseUrl: options.llmProxyBaseUrl,
    apiKeyEnv,
    models,
    ...(Object.keys(agents).length > 0 ? { agents } : {}),
    ...(options.llmBudgetTokens !== undefined ? { budgetTokens: options.llmBudgetTokens } : {}),
    ...(options.llmBudgetRequests !== undefined ? { budgetRequests: options.llmBudgetRequests } : {}),
  };
}

/**
 * The server app, loaded only by `proctor serve` (an optional peer dependency of the CLI): the
 * other commands talk to a server through @proctor/client and never load Fastify.
 */
async function loadServer(): Promise<typeof import("@proctor/server")> {
  try {
    return await import("@proctor/server");
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== "ERR_MODULE_NOT_FOUND" || !String(error).includes("@proctor/server")) throw error;
    throw new UsageError("serve needs the server app, which is not installed: install @proctor/server next to @proctor/cli (npm install @proctor/server)", { cause: error });
  }
}

/**
 * Hotkey auth (the default) with no allowlist at all: the other way in is bearer tokens, said
 * in the same line (a newcomer without SS58 hotkeys wants that one).
 */
function noHotkeysHint(options: ServeOptions): string {
  const hotkeyAuth = options.auth === "epistula" || options.auth === "hotkey-header-insecure";
  const listed = options.hotkeysFile !== undefined || process.env.PROCTOR_HOTKEYS !== undefined || process.env.PROCTOR_HOTKEYS_FILE !== undefined;
  return hotkeyAuth && !listed ? "; or serve bearer tokens instead: export PROCTOR_TOKENS=$(openssl rand -hex 32) and pass --auth token" : "";
}

/** `proctor serve`: the batch server until SIGINT/SIGTERM, then a graceful stop (running batches resume on the next start). */
export async function serveCommand(options: ServeOptions): Promise<number> {
  const { AUTH_MODES, ServerConfigError, startServer } = await loadServer();
  if (!(AUTH_MODES as readonly string[]).includes(options.auth)) {
    throw new UsageError(`--auth must be one of ${AUTH_MODES.join(", ")}, got "${options.auth}"`);
  }
  const modelProxy = serverModelProxy(options);
  const workerToken = options.workerToken ?? process.env.PROCTOR_WORKER_TOKEN;
  if (options.queue !== undefined && !workerToken) throw new UsageError("--queue needs a worker token: --worker-token TOKEN or PROCTOR_WORKER_TOKEN (workers send it to fetch task bundles)");
  if (options.queue === undefined && (options.workerToken !== undefined || options.publicUrl !== undefined)) throw new UsageError("--worker-token and --public-url need --queue redis://HOST:PORT/DB");
  if (options.queue !== undefined) await ensureQueue(options.queue);
  const runtime = options.queue !== undefined ? queuedRuntime(parseRuntimeChoice(options.runtime), options.logger) : await openRuntime(parseRuntimeChoice(options.runtime), options.logger);
  if (runtime.name === "local" && !options.unsafeLocalRuntime) {
    throw new UsageError(
      "proctor serve would run uploaded agent code on the local runtime: host processes with no isolation. " +
        "Start a Docker engine (tools/docker/ensure-engine.sh) and use --runtime docker, or pass --unsafe-local-runtime if every upload is trusted.",
    );
  }
  let receiptKey: Keypair | undefined;
  if (options.receiptKey !== undefined) {
    try {
      receiptKey = loadKeypair({ file: options.receiptKey, logger: options.logger });
    } catch (error) {
      // KeyLoadError names the file, never the secret.
      if (error instanceof KeyLoadError) throw new UsageError(`--receipt-key ${error.message}`, { cause: error });
      throw error;
    }
  }
  const server = await startServer({
    host: options.host,
    port: options.port,
    dataDir: resolve(options.dataDir),
    auth: options.auth as AuthMode,
    runtime,
    defaultImage: options.defaultImage ?? (runtime.name === "docker" ? DEFAULT_DOCKER_IMAGE : null),
    maxActiveBatches: options.maxActiveBatches,
    maxQueuedBatches: options.maxQueuedBatches,
    maxConcurrentTasks: options.maxConcurrentTasks,
    insecure: options.insecure,
    hotkeysFile: options.hotkeysFile,
    retentionDays: options.retentionDays ?? null,
    allowLocalRepos: options.allowLocalRepos,
    ...(options.isolateVerifier !== undefined ? { isolateVerifier: options.isolateVerifier } : {}),
    ...(options.grading !== undefined ? { grading: options.grading } : {}),
    ...(options.adminHotkeys !== undefined ? { adminHotkeys: options.adminHotkeys.split(/[\s,]+/).filter((e) => e !== "") } : {}),
    ...(options.maxUploads !== undefined ? { maxConcurrentUploads: options.maxUploads } : {}),
    ...(options.maxUploadsPerKey !== undefined ? { maxConcurrentUploadsPerKey: options.maxUploadsPerKey } : {}),
    allowUndigestedUploads: options.allowUndigestedUploads ?? false,
    agentImage: {
      ...(options.agentImageBuildTimeoutSec !== undefined ? { buildTimeoutMs: Math.round(options.agentImageBuildTimeoutSec * 1000) } : {}),
      ...(options.agentImageMaxMb !== undefined ? { maxBytes: options.agentImageMaxMb * 1024 * 1024 } : {}),
      ...(options.agentImageBuildNetwork !== undefined ? { buildNetwork: options.agentImageBuildNetwork } : {}),
    },
    ...(receiptKey !== undefined ? { receiptKey } : {}),
    // Slot repositories and task files are cached beside the server's data.
    ...(options.slots ? { slots: { cacheDir: resolve(options.dataDir, "slots-cache"), ...options.slots } } : {}),
    ...(modelProxy ? { modelProxy } : {}),
    ...(options.queue !== undefined && workerToken ? { queue: { url: options.queue, workerToken, ...(options.publicUrl ? { publicUrl: options.publicUrl } : {}) } } : {}),
    logger: options.logger,
  }).catch((error: unknown) => {
    // Bad or unsafe server options are bad usage (exit 2), like bad flags.
    if (error instanceof ServerConfigError) throw new UsageError(`${error.message}${noHotkeysHint(options)}`, { cause: error });
    throw error;
  });
  if (receiptKey !== undefined) process.stderr.write(`proctor serve: signing batch receipts as ${receiptKey.address}\n`);
  if (modelProxy) {
    const keyState = process.env[modelProxy.apiKeyEnv] ? "set" : "not set: no key is sent";
    process.stderr.write(`proctor serve: agents get models ${modelProxy.models.join(", ")} through the model proxy to ${modelProxy.baseUrl} (key from $${modelProxy.apiKeyEnv}, ${keyState})\n`);
    if (modelProxy.agents) process.stderr.write(`proctor serve: batches may name ?agent=${Object.values(modelProxy.agents).map((a) => `${a.name}`).join(" | ")} (${Object.values(modelProxy.agents).map((a) => `${a.name} ${a.version ?? ""}`.trim()).join(", ")}; installed on first use)\n`);
  }
  process.stderr.write(`proctor serve: listening on ${server.url} (auth ${options.auth}, runtime ${runtime.name}, data ${resolve(options.dataDir)})\n`);
  if (options.queue !== undefined) process.stderr.write(`proctor serve: trials go to workers on the queue (start them: proctor worker --queue URL --runtime ${runtime.name}); this process runs none\n`);
  await new Promise<void>((done) => {
    const stop = (name: string) => () => {
      process.stderr.write(`${name}: stopping; running batches are checkpointed and resume on the next start\n`);
      done();
    };
    process.once("SIGINT", stop("SIGINT"));
    process.once("SIGTERM", stop("SIGTERM"));
  });
  await server.close();
  return 0;
}
