import { existsSync, readFileSync, statSync } from "node:fs";
import { arch } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { WIRE_PROTOCOLS, type WireProtocol } from "@proctor/llm";
import { parse as parseToml } from "smol-toml";
import { z } from "zod";
import { AgentConfigError } from "./errors";

/** The CLI agents Proctor knows by name; each is an agent.toml shipped in this package. */
export const BUILTIN_INSTALLED_AGENTS = ["claude-code", "codex"] as const;
export type BuiltinInstalledAgent = (typeof BUILTIN_INSTALLED_AGENTS)[number];

/** Where an installed agent's files are bound (read-only) in every sandbox. */
export const INSTALL_MOUNT = "/opt/proctor/agent";
/** A scratch dir in the sandbox for the CLI's own state (its config/home dir); `{state_dir}`. */
export const STATE_DIR = "/tmp/proctor-agent-state";
/** Where the CLI's own logs (agent.toml `logs`) are copied, inside /logs/agent, when it exits. */
export const SESSION_LOGS_DIR = "/logs/agent/sessions";

/** Placeholders a command, env value or logs path may use (`{name}`, no spaces). */
const RUN_PLACEHOLDERS = ["instruction", "model", "workdir", "base_url", "proxy_url", "install_dir", "bin", "state_dir", "logs_dir", "version"] as const;
/** Placeholders `bin` and `[install] npm` may use. */
const INSTALL_PLACEHOLDERS = ["arch", "machine", "version"] as const;

const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;
const Scalar = z.union([z.string(), z.number(), z.boolean()]).transform(String);
const AgentToml = z
  .object({
    name: z.string().regex(/^[a-z0-9][a-z0-9._-]*$/, "lower-case letters, digits, '.', '_' and '-'"),
    version: z.string().regex(/^[A-Za-z0-9][A-Za-z0-9._+-]*$/, "a version such as 1.2.3").optional(),
    protocol: z.enum(WIRE_PROTOCOLS as [WireProtocol, ...WireProtocol[]]),
    bin: z.string().min(1).refine((p) => !p.startsWith("/") && !p.split("/").includes(".."), "a path inside the install dir (relative, no ..)"),
    command: z.array(z.string()).min(1),
    check: z.array(z.string()).min(1).optional(),
    logs: z.array(z.string().min(1)).default([]),
    install: z
      .object({
        /** npm package specs installed on the host with `npm install --ignore-scripts`; exact versions only. */
        npm: z.array(z.string().min(1)).default([]),
        /** A shell script (a file in the agent dir) run once in a builder container with network, the install dir at INSTALL_MOUNT. */
        script: z.string().min(1).optional(),
        /** The builder (and check) container's image. Default proctor/base:bookworm. */
        image: z.string().min(1).optional(),
      })
      .strict()
      .refine((i) => i.npm.length > 0 || i.script !== undefined, "[install] needs npm = [...] and/or script = \"...\""),
    env: z.record(z.string().regex(ENV_NAME, "env names are letters, digits and _"), Scalar).default({}),
  })
  .strict();

/** An installed CLI agent as its agent.toml declares it, with the version chosen. */
export interface InstalledAgentDefinition {
  name: string;
  version: string;
  protocol: WireProtocol;
  /** The binary, relative to the install dir, arch placeholders filled. */
  bin: string;
  command: string[];
  check: string[] | null;
  logs: string[];
  npm: string[];
  /** The install script's path on the host, or null. */
  script: string | null;
  builderImage: string;
  env: Record<string, string>;
  /** The directory holding agent.toml. */
  dir: string;
  /** A package-lock.json pinning `npm` exactly (shipped for a built-in's default version), or null. */
  lockfile: string | null;
  /** What the definition came from, for messages: "codex" or "<dir>/agent.toml". */
  source: string;
}

const DEFAULT_BUILDER_IMAGE = "proctor/base:bookworm";

/** Node's arch name and the kernel's (uname -m) for the host, which the sandboxes share. */
export function hostArch(): { arch: string; machine: string } {
  const a = arch();
  return { arch: a, machine: a === "x64" ? "x86_64" : a === "arm64" ? "aarch64" : a };
}

/** Replaces `{name}` placeholders; names not in `values` are left as they are. */
export function fillPlaceholders(template: string, values: Record<string, string>): string {
  return template.replace(/\{([a-z_]+)\}/g, (whole, name: string) => values[name] ?? whole);
}

function unknownPlaceholders(text: string, allowed: readonly string[]): string[] {
  return [...text.matchAll(/\{([a-z_]+)\}/g)].map((m) => m[1] ?? "").filter((name) => !allowed.includes(name));
}

/** The directory of a built-in agent's definition (inside this package, next to src/ or dist/). */
function builtinAgentDir(name: BuiltinInstalledAgent): string {
  return join(dirname(fileURLToPath(import.meta.url)), "..", "installed", name);
}

/**
 * Reads `<dir>/agent.toml`. `version` replaces the file's own version (`codex@0.170.0`); a
 * built-in's shipped package-lock.json pins the default version only. Throws AgentConfigError
 * naming the file and field.
 */
export function readInstalledAgent(dir: string, options: { version?: string; source?: string } = {}): InstalledAgentDefinition {
  const abs = resolve(dir);
  const tomlPath = join(abs, "agent.toml");
  if (!existsSync(abs) || !statSync(abs).isDirectory()) throw new AgentConfigError(`installed agent directory ${abs} does not exist or is not a directory`, abs);
  if (!existsSync(tomlPath)) throw new AgentConfigError(`${tomlPath} is missing: an installed agent declares name, protocol, bin, command and [install] there`, tomlPath);
  let raw: unknown;
  try {
    raw = parseToml(readFileSync(tomlPath, "utf8"));
  } catch (error) {
    throw new AgentConfigError(`${tomlPath}: not valid TOML: ${(error as Error).message.split("\n")[0]}`, tomlPath, { cause: error });
  }
  const parsed = AgentToml.safeParse(raw);
  if (!parsed.success) {
    const issues = parsed.error.issues.map((i) => `${i.path.join(".") || "(root)"}: ${i.message}`).join("; ");
    throw new AgentConfigError(`${tomlPath}: ${issues}`, tomlPath);
  }
  const toml = parsed.data;
  const version = options.version ?? toml.version;
  if (version === undefined) throw new AgentConfigError(`${tomlPath}: no version: set version = "..." or name one (installed:<dir>@VERSION)`, tomlPath);
  if (!/^[A-Za-z0-9][A-Za-z0-9._+-]*$/.test(version)) throw new AgentConfigError(`${tomlPath}: version ${JSON.stringify(version)} is not a version such as 1.2.3`, tomlPath);
  const bad: string[] = [];
  for (const [field, texts, allowed] of [
    ["command", toml.command, RUN_PLACEHOLDERS],
    ["check", toml.check ?? [], RUN_PLACEHOLDERS],
    ["logs", toml.logs, RUN_PLACEHOLDERS],
    ["env", Object.values(toml.env), RUN_PLACEHOLDERS],
    ["bin", [toml.bin], INSTALL_PLACEHOLDERS],
    ["install.npm", toml.install.npm, INSTALL_PLACEHOLDERS],
  ] as const) {
    for (const text of texts) for (const name of unknownPlaceholders(text, allowed)) bad.push(`${field}: unknown placeholder {${name}} (allowed: ${allowed.map((a) => `{${a}}`).join(" ")})`);
  }
  if (bad.length > 0) throw new AgentConfigError(`${tomlPath}: ${bad.join("; ")}`, tomlPath);
  const { arch: a, machine } = hostArch();
  const npm = toml.install.npm.map((spec) => fillPlaceholders(spec, { version, arch: a, machine }));
  for (const spec of npm) {
    // name@exact-version: what the cache key promises is what npm installs.
    if (!/^(@[a-z0-9-~][a-z0-9-._~]*\/)?[a-z0-9-~][a-z0-9-._~]*@\d+\.\d+\.\d+([-+][0-9A-Za-z.-]+)?$/.test(spec)) {
      throw new AgentConfigError(`${tomlPath}: [install] npm ${JSON.stringify(spec)} must name an exact version (name@1.2.3), so every machine installs the same thing`, tomlPath);
    }
  }
  const script = toml.install.script !== undefined ? resolve(abs, toml.install.script) : null;
  if (script !== null && (!script.startsWith(`${abs}/`) || !existsSync(script))) throw new AgentConfigError(`${tomlPath}: [install] script ${toml.install.script} is not a file in ${abs}`, tomlPath);
  const lockPath = join(abs, "package-lock.json");
  // The shipped lockfile pins the default version; another version resolves its own.
  const lockfile = existsSync(lockPath) && version === toml.version ? readFileSync(lockPath, "utf8") : null;
  return {
    name: toml.name,
    version,
    protocol: toml.protocol,
    bin: fillPlaceholders(toml.bin, { arch: a, machine, version }),
    command: toml.command,
    check: toml.check ?? null,
    logs: toml.logs,
    npm,
    script,
    builderImage: toml.install.image ?? DEFAULT_BUILDER_IMAGE,
    env: toml.env,
    dir: abs,
    lockfile,
    source: options.source ?? tomlPath,
  };
}

/** A built-in agent (`codex`, `claude-code`) at its default or a given version. */
export function builtinInstalledAgent(name: BuiltinInstalledAgent, version?: string): InstalledAgentDefinition {
  return readInstalledAgent(builtinAgentDir(name), { ...(version !== undefined ? { version } : {}), source: name });
}

export function isBuiltinInstalledAgent(name: string): name is BuiltinInstalledAgent {
  return (BUILTIN_INSTALLED_AGENTS as readonly string[]).includes(name);
}
