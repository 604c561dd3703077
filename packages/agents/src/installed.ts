import { readFileSync } from "node:fs";
import { open } from "node:fs/promises";
import { join } from "node:path";
import type { SandboxMount, SandboxRuntime } from "@proctor/sandbox";
import type { Logger, ModelProxySpec } from "@proctor/schema";
import { execLogged, toRunResult } from "./capture";
import { AgentConfigError, AgentSetupError } from "./errors";
import { installAgent, type AgentInstall } from "./installed-cache";
import { INSTALL_MOUNT, SESSION_LOGS_DIR, STATE_DIR, fillPlaceholders, type InstalledAgentDefinition } from "./installed-def";
import { withModelProxy, type ModelProxyAgent } from "./model-proxy";
import type { Agent, AgentContext, AgentRunResult } from "./types";

/**
 * Without network, a lookup of a public host waits out the resolver's timeouts (musl's: seconds
 * per lookup; Codex does several at start and exit). A closed loopback port as the proxy for
 * everything but loopback makes such attempts fail at once; the model proxy stays direct.
 */
const NO_INTERNET_ENV: Record<string, string> = Object.fromEntries(
  [
    ...["HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"].flatMap((name) => [name, name.toLowerCase()]).map((name) => [name, "http://127.0.0.1:9"]),
    ["NO_PROXY", "127.0.0.1,localhost,::1"],
    ["no_proxy", "127.0.0.1,localhost,::1"],
  ],
);

/** Linux refuses one argv string above 128 KiB; the instruction goes as an argument. */
const MAX_INSTRUCTION_BYTES = 120 * 1024;

export interface InstalledAgentOptions {
  definition: InstalledAgentDefinition;
  /** Where the model comes from: upstream, model, the key's env var, budgets. */
  modelProxy: ModelProxySpec;
  /** Where the key is read (`env[modelProxy.apiKeyEnv]`); default process.env. Read here only. */
  env?: NodeJS.ProcessEnv;
  /** The install cache root; default agentCacheDir(). */
  cacheDir?: string;
  logger?: Logger;
}

/** An installed CLI agent: an Agent that also installs itself, asks for its read-only mount and owns a model proxy. */
export interface InstalledAgent extends Agent {
  readonly definition: InstalledAgentDefinition;
  /** Installs (once per machine, cached) and returns the install; later calls share the first. */
  install(runtime: SandboxRuntime, signal?: AbortSignal): Promise<AgentInstall>;
  /** Stops the model proxy (every trial token stops working). Safe to call twice. */
  close(): Promise<void>;
}

/** The ELF interpreter (dynamic loader) a binary asks for, e.g. /lib64/ld-linux-x86-64.so.2; null for a static binary or a non-ELF file. */
export async function elfInterpreter(path: string): Promise<string | null> {
  const file = await open(path, "r").catch(() => null);
  if (!file) return null;
  try {
    const header = Buffer.alloc(64);
    await file.read(header, 0, 64, 0);
    // 64-bit little-endian ELF only (every Linux the sandboxes run on).
    if (header.readUInt32BE(0) !== 0x7f454c46 || header[4] !== 2 || header[5] !== 1) return null;
    const phoff = Number(header.readBigUInt64LE(0x20));
    const phentsize = header.readUInt16LE(0x36);
    const phnum = header.readUInt16LE(0x38);
    const table = Buffer.alloc(phentsize * phnum);
    await file.read(table, 0, table.length, phoff);
    for (let i = 0; i < phnum; i++) {
      const at = i * phentsize;
      if (table.readUInt32LE(at) !== 3) continue; // PT_INTERP
      const offset = Number(table.readBigUInt64LE(at + 8));
      const size = Number(table.readBigUInt64LE(at + 32));
      const name = Buffer.alloc(Math.min(size, 256));
      await file.read(name, 0, name.length, offset);
      return name.toString("utf8").replace(/\0.*$/s, "");
    }
    return null;
  } finally {
    await file.close();
  }
}

function imageOf(ctx: AgentContext): string {
  const env = ctx.task.environment;
  return env.dockerImage ?? (env.buildContext ? `the image built from ${env.buildContext}` : "the task's image");
}

function lastLines(text: string, n = 5): string {
  return text.trim().split("\n").slice(-n).join("\n");
}

/**
 * Runs the CLI once in the task's workdir: its state dir made, stdin closed, its own logs copied
 * into /logs/agent/sessions when it exits (one exec: no extra round trip per trial).
 */
const RUN_SCRIPT = [
  'mkdir -p "$PROCTOR_AGENT_STATE_DIR" 2>/dev/null',
  '"$@" </dev/null',
  "rc=$?",
  'if [ -n "$PROCTOR_AGENT_LOGS" ]; then',
  '  printf "%s\\n" "$PROCTOR_AGENT_LOGS" | while IFS= read -r d; do',
  `    [ -e "$d" ] && mkdir -p ${SESSION_LOGS_DIR} && cp -R "$d" ${SESSION_LOGS_DIR}/ 2>/dev/null`,
  "  done",
  "fi",
  "exit $rc",
].join("\n");

/**
 * A CLI agent (Claude Code, Codex, or any agent.toml): installed once per machine into the
 * content-addressed cache, bound read-only at /opt/proctor/agent in every sandbox, started with
 * agent.toml's command, and given the model only through Proctor's proxy (a per-trial token and
 * a loopback URL; the real key stays in this process). A CLI that exits non-zero is an `agent`
 * error with its output's tail; one that cannot start in the task's image says why (e.g. a glibc
 * binary in a musl image). Throws AgentConfigError at once when the key's variable is not set.
 */
export function installedAgent(options: InstalledAgentOptions): InstalledAgent {
  const def = options.definition;
  const spec = options.modelProxy;
  const env = options.env ?? process.env;
  if (!env[spec.apiKeyEnv]) {
    throw new AgentConfigError(`$${spec.apiKeyEnv} is not set: ${def.name} gets its model through Proctor's proxy, which needs the API key in that variable (or name another with --api-key-env)`, spec.apiKeyEnv);
  }
  const label = `${def.name}@${def.version}`;
  let installing: Promise<AgentInstall> | null = null;
  let installed: AgentInstall | null = null;
  const install = (runtime: SandboxRuntime, signal?: AbortSignal): Promise<AgentInstall> => {
    installing ??= installAgent(def, { runtime, ...(options.cacheDir ? { cacheDir: options.cacheDir } : {}), ...(signal ? { signal } : {}), ...(options.logger ? { logger: options.logger } : {}) }).then(
      (done) => (installed = done),
      (error: unknown) => {
        installing = null; // the next trial tries again
        throw error;
      },
    );
    return installing;
  };

  const cli: Agent = {
    name: label,
    async run(ctx): Promise<AgentRunResult> {
      if (!installed) throw new AgentSetupError(`${label} is not installed: the engine asks for its sandbox mounts before the sandbox starts`, null, false);
      if (Buffer.byteLength(ctx.task.instruction) > MAX_INSTRUCTION_BYTES) {
        return { exitCode: null, timedOut: false, aborted: false, durationMs: 0, outputTruncated: false, error: `${label}: the instruction (${Buffer.byteLength(ctx.task.instruction)} bytes) is too long to pass on a command line (limit ${MAX_INSTRUCTION_BYTES} bytes)` };
      }
      const proxyBase = ctx.env?.PROCTOR_MODEL_BASE_URL ?? "";
      const values: Record<string, string> = {
        instruction: ctx.task.instruction,
        model: spec.model,
        workdir: ctx.sandbox.workdir,
        base_url: proxyBase,
        proxy_url: proxyBase.replace(/\/v1$/, ""),
        install_dir: INSTALL_MOUNT,
        bin: `${INSTALL_MOUNT}/${def.bin}`,
        state_dir: STATE_DIR,
        logs_dir: "/logs/agent",
        version: def.version,
      };
      const argv = def.command.map((part) => fillPlaceholders(part, values));
      const runEnv: Record<string, string> = {
        ...Object.fromEntries(Object.entries(def.env).map(([k, v]) => [k, fillPlaceholders(v, values)])),
        ...ctx.env,
        PROCTOR_DEADLINE_MS: String(ctx.deadlineMs),
        PROCTOR_WORKDIR: ctx.sandbox.workdir,
        PROCTOR_AGENT_STATE_DIR: STATE_DIR,
        PROCTOR_AGENT_LOGS: def.logs.map((path) => fillPlaceholders(path, values)).join("\n"),
        ...(ctx.task.environment.allowInternet ? {} : NO_INTERNET_ENV),
      };
      const result = await execLogged(ctx, ["sh", "-c", RUN_SCRIPT, "sh", ...argv], { env: runEnv });
      const base = toRunResult(result);
      if (result.timedOut || result.aborted || result.exitCode === 0) return base;
      if (result.exitCode === 126 || result.exitCode === 127) {
        const why = await cannotStart(ctx, installed, label);
        if (why) return { ...base, error: why };
      }
      const output = lastLines(result.stderr) || lastLines(result.stdout);
      return { ...base, error: `${label} exited with ${result.exitCode}${output ? `: ${output}` : " and printed nothing"}` };
    },
  };

  let proxied: Promise<ModelProxyAgent> | null = null;
  const proxy = () =>
    (proxied ??= withModelProxy(cli, spec, { env, ...(options.logger ? { logger: options.logger } : {}), trajectoryAgent: { name: def.name, version: def.version } }));
  let closed = false;
  let version: string | null = null;
  return {
    name: label,
    definition: def,
    install,
    version() {
      if (!installed) return def.version;
      return (version ??= installedVersion(def, installed));
    },
    async sandboxMounts(runtime: SandboxRuntime, signal: AbortSignal): Promise<SandboxMount[]> {
      const done = await install(runtime, signal);
      return [{ hostPath: done.root, sandboxPath: INSTALL_MOUNT, readOnly: true }];
    },
    async setup(ctx) {
      await (await proxy()).agent.setup?.(ctx);
    },
    async run(ctx) {
      return (await proxy()).agent.run(ctx);
    },
    async close() {
      if (closed) return;
      closed = true;
      if (proxied) await (await proxied).close();
    },
  };
}

/**
 * The version the sandbox gets: the first npm package's version as installed (its package.json
 * in the install bound into the sandbox), else what the install's check printed, else the
 * definition's version.
 */
function installedVersion(def: InstalledAgentDefinition, install: AgentInstall): string {
  const spec = def.npm[0];
  if (spec !== undefined) {
    const name = spec.slice(0, spec.lastIndexOf("@") > 0 ? spec.lastIndexOf("@") : spec.length);
    try {
      const found = (JSON.parse(readFileSync(join(install.root, "node_modules", name, "package.json"), "utf8")) as { version?: unknown }).version;
      if (typeof found === "string" && found !== "") return found;
    } catch {
      // not an npm install, or not readable: what the check said
    }
  }
  return install.reported?.trim() || def.version;
}

/** Why the CLI could not start in this sandbox (a dynamic loader the image lacks), or null when that is not it. */
async function cannotStart(ctx: AgentContext, install: AgentInstall, label: string): Promise<string | null> {
  const interpreter = await elfInterpreter(install.binPath);
  if (!interpreter) return null;
  const probe = await ctx.sandbox.exec(["sh", "-c", 'test -e "$1"', "sh", interpreter], { timeoutMs: 10_000, signal: ctx.signal }).catch(() => null);
  if (!probe || probe.exitCode === 0) return null;
  const libc = interpreter.includes("musl") ? "musl" : interpreter.includes("ld-linux") ? "glibc" : "its C library";
  return `${label} cannot run in ${imageOf(ctx)}: its binary needs the dynamic loader ${interpreter} (${libc}), which the image does not have; use an image with ${libc} (e.g. Debian or Ubuntu for glibc) for this agent`;
}
