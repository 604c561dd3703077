import { execFile } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import { existsSync } from "node:fs";
import { copyFile, mkdir, readFile, rename, rm, writeFile } from "node:fs/promises";
import { homedir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import type { SandboxRuntime } from "@proctor/sandbox";
import { silentLogger, type Logger } from "@proctor/schema";
import lockfile from "proper-lockfile";
import { AgentSetupError } from "./errors";
import { INSTALL_MOUNT, fillPlaceholders, hostArch, type InstalledAgentDefinition } from "./installed-def";

const run = promisify(execFile);
const MARKER = "proctor-install.json";
const NPM_TIMEOUT_MS = 15 * 60_000;
const SCRIPT_TIMEOUT_MS = 30 * 60_000;
const CHECK_TIMEOUT_MS = 60_000;

/** What `installAgent` left in the cache. */
export interface AgentInstall {
  /** Host directory to bind read-only at INSTALL_MOUNT. */
  root: string;
  /** The cache entry (root's parent), named `<name>-<version>-<key>`. */
  dir: string;
  key: string;
  /** The binary's host path. */
  binPath: string;
  /** The first line the check command printed (e.g. "codex-cli 0.171.0"), or null without a check. */
  reported: string | null;
  /** False when this call found the install already in the cache. */
  installed: boolean;
  durationMs: number;
}

export interface InstallOptions {
  /** Runs the install script and the check in containers. */
  runtime: SandboxRuntime;
  /** The cache root; default agentCacheDir(). */
  cacheDir?: string;
  signal?: AbortSignal;
  logger?: Logger;
  /** Told each step ("npm ci @openai/codex@0.171.0", "check: codex-cli 0.171.0"). */
  onProgress?: (line: string) => void;
}

/** `$PROCTOR_CACHE_DIR/agents`, else `$XDG_CACHE_HOME/proctor/agents`, else `~/.cache/proctor/agents`. */
export function agentCacheDir(env: NodeJS.ProcessEnv = process.env): string {
  if (env.PROCTOR_CACHE_DIR) return join(env.PROCTOR_CACHE_DIR, "agents");
  return join(env.XDG_CACHE_HOME || join(homedir(), ".cache"), "proctor", "agents");
}

/** The content address of an install: everything that decides what lands in it. */
export async function installKey(def: InstalledAgentDefinition): Promise<string> {
  const script = def.script ? await readFile(def.script, "utf8") : null;
  const { arch, machine } = hostArch();
  const material = { v: 1, name: def.name, version: def.version, npm: def.npm, lockfile: def.lockfile, script, image: def.builderImage, bin: def.bin, check: def.check, arch, machine };
  return createHash("sha256").update(JSON.stringify(material)).digest("hex").slice(0, 16);
}

/** The env npm runs with: what it needs to reach the registry, nothing else of this process (no keys). */
function npmEnv(env: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  const keep = /^(PATH|HOME|USER|TMPDIR|LANG|LC_[A-Z]+|npm_config_.+|NPM_CONFIG_.+|HTTPS?_PROXY|NO_PROXY|https?_proxy|no_proxy|NODE_EXTRA_CA_CERTS|SSL_CERT_(FILE|DIR))$/;
  return Object.fromEntries(Object.entries(env).filter(([k]) => keep.test(k)));
}

function tail(text: string, lines = 8): string {
  return text.trim().split("\n").slice(-lines).join("\n");
}

/** npm's own words, on one line: its error lines without the log-file pointer. */
function npmReason(stderr: string): string {
  const lines = stderr.split("\n").map((l) => l.replace(/^npm (error|ERR!)\s*/, "").trim()).filter((l) => l !== "" && !/complete log of this run/i.test(l) && !/^code [A-Z]+$/.test(l));
  return lines.slice(0, 2).join(" ").slice(0, 400) || "no output";
}

async function npmInstall(def: InstalledAgentDefinition, root: string, options: InstallOptions): Promise<void> {
  const common = ["--ignore-scripts", "--no-audit", "--no-fund", "--no-update-notifier", "--loglevel=error"];
  let args: string[];
  if (def.lockfile !== null) {
    await copyFile(join(def.dir, "package.json"), join(root, "package.json"));
    await writeFile(join(root, "package-lock.json"), def.lockfile);
    args = ["ci", ...common];
  } else {
    await writeFile(join(root, "package.json"), `${JSON.stringify({ name: `proctor-agent-${def.name}`, private: true }, null, 2)}\n`);
    args = ["install", "--save-exact", ...common, ...def.npm];
  }
  options.onProgress?.(`npm ${args[0]} ${def.npm.join(" ")}`);
  try {
    await run("npm", args, { cwd: root, env: npmEnv(process.env), timeout: NPM_TIMEOUT_MS, maxBuffer: 16 * 1024 * 1024, ...(options.signal ? { signal: options.signal } : {}) });
  } catch (error) {
    const e = error as { stderr?: string; message: string; code?: string };
    const why = e.code === "ENOENT" ? "npm is not on PATH (it comes with Node.js)" : npmReason(e.stderr || e.message);
    throw new AgentSetupError(`installing ${def.name} ${def.version}: npm ${args[0]} ${def.npm.join(" ")} failed: ${why}`, null, false, { cause: error });
  }
}

/** Runs `command` in a fresh container of `image` with the install bound at INSTALL_MOUNT. */
async function inContainer(def: InstalledAgentDefinition, root: string, options: InstallOptions, what: { command: string[]; network: boolean; readOnly: boolean; timeoutMs: number; env?: Record<string, string> }) {
  const { runtime } = options;
  const image = await runtime.resolveImage({ image: def.builderImage, buildContext: null, buildTimeoutMs: 60_000, ...(options.signal ? { signal: options.signal } : {}) });
  const mounts = [{ hostPath: root, sandboxPath: INSTALL_MOUNT, readOnly: what.readOnly }, ...(def.script ? [{ hostPath: def.dir, sandboxPath: `${INSTALL_MOUNT}-source`, readOnly: true }] : [])];
  const sandbox = await runtime.create({ image, network: what.network, mounts, labels: { "proctor.role": "agent-install" }, lifetimeMs: what.timeoutMs + 60_000, ...(options.signal ? { signal: options.signal } : {}) });
  try {
    return await sandbox.exec(what.command, { timeoutMs: what.timeoutMs, ...(what.env ? { env: what.env } : {}), ...(options.signal ? { signal: options.signal } : {}), cwd: "/" });
  } finally {
    await sandbox.kill().catch(() => undefined);
  }
}

/**
 * Installs an agent version once per machine: into `<cache>/<name>-<version>-<key>/root`, where
 * the key hashes everything that decides the install (packages, lockfile, script, image, arch).
 * npm packages install on the host (`npm ci` from the shipped lockfile, else exact versions,
 * lifecycle scripts off); an install script runs in a builder container with network; then the
 * `check` command must pass in a container without network. Built in a temp dir and renamed
 * into place under a lock, so concurrent runs and workers on one machine install it once and
 * never see half an install. Throws AgentSetupError saying which step failed.
 */
export async function installAgent(def: InstalledAgentDefinition, options: InstallOptions): Promise<AgentInstall> {
  const started = Date.now();
  const logger = options.logger ?? silentLogger;
  const cache = options.cacheDir ?? agentCacheDir();
  const key = await installKey(def);
  const dir = join(cache, `${def.name}-${def.version}-${key}`);
  const found = await readMarker(dir);
  if (found) return { ...found, dir, key, installed: false, durationMs: Date.now() - started };
  await mkdir(cache, { recursive: true });
  const lockTarget = join(cache, `${def.name}-${def.version}-${key}.lock`);
  await writeFile(lockTarget, "", { flag: "a" });
  let release: () => Promise<void>;
  try {
    // Another process installing the same thing: wait for it (npm of a 400 MB package takes a while).
    release = await lockfile.lock(lockTarget, { stale: 60_000, update: 10_000, retries: { retries: 3600, minTimeout: 1000, maxTimeout: 1000, factor: 1 }, realpath: false });
  } catch (error) {
    throw new AgentSetupError(`installing ${def.name} ${def.version}: could not lock ${lockTarget}: ${(error as Error).message}`, null, false, { cause: error });
  }
  try {
    const raced = await readMarker(dir);
    if (raced) return { ...raced, dir, key, installed: false, durationMs: Date.now() - started };
    const temp = join(cache, `.tmp-${def.name}-${randomBytes(4).toString("hex")}`);
    const root = join(temp, "root");
    await mkdir(root, { recursive: true });
    try {
      logger.info("installing agent", { name: def.name, version: def.version, cache: dir });
      if (def.npm.length > 0) await npmInstall(def, root, options);
      if (def.script) {
        options.onProgress?.(`install script ${def.script} in ${def.builderImage}`);
        const script = `${INSTALL_MOUNT}-source/${def.script.slice(def.dir.length + 1)}`;
        const result = await inContainer(def, root, options, { command: ["sh", "-c", `cd "${INSTALL_MOUNT}" && exec sh "$0"`, script], network: true, readOnly: false, timeoutMs: SCRIPT_TIMEOUT_MS, env: { PROCTOR_INSTALL_DIR: INSTALL_MOUNT, PROCTOR_AGENT_VERSION: def.version } });
        if (result.exitCode !== 0 || result.timedOut) {
          throw new AgentSetupError(`installing ${def.name} ${def.version}: the install script ${result.timedOut ? "timed out" : `exited with ${result.exitCode}`} in ${def.builderImage}: ${tail(result.stderr || result.stdout)}`, result.exitCode, result.timedOut);
        }
      }
      const binPath = join(root, def.bin);
      if (!existsSync(binPath)) {
        throw new AgentSetupError(`installing ${def.name} ${def.version}: the install has no ${def.bin} (bin in agent.toml); is this version published for linux-${hostArch().arch}?`, null, false);
      }
      let reported: string | null = null;
      if (def.check) {
        const values = { bin: `${INSTALL_MOUNT}/${def.bin}`, install_dir: INSTALL_MOUNT, version: def.version };
        const command = def.check.map((part) => fillPlaceholders(part, values));
        const result = await inContainer(def, root, options, { command, network: false, readOnly: true, timeoutMs: CHECK_TIMEOUT_MS });
        if (result.exitCode !== 0 || result.timedOut) {
          throw new AgentSetupError(`installing ${def.name} ${def.version}: the check \`${def.check.join(" ")}\` ${result.timedOut ? "timed out" : `exited with ${result.exitCode}`} in ${def.builderImage}: ${tail(result.stderr || result.stdout)}`, result.exitCode, result.timedOut);
        }
        reported = result.stdout.trim().split("\n")[0] ?? null;
        options.onProgress?.(`check: ${reported ?? "ok"}`);
      }
      await writeFile(join(temp, MARKER), `${JSON.stringify({ name: def.name, version: def.version, key, bin: def.bin, reported, installedAt: new Date().toISOString() }, null, 2)}\n`);
      await rename(temp, dir);
      return { root: join(dir, "root"), binPath: join(dir, "root", def.bin), reported, dir, key, installed: true, durationMs: Date.now() - started };
    } finally {
      await rm(temp, { recursive: true, force: true });
    }
  } finally {
    await release().catch(() => undefined);
  }
}

async function readMarker(dir: string): Promise<Pick<AgentInstall, "root" | "binPath" | "reported"> | null> {
  try {
    const marker = JSON.parse(await readFile(join(dir, MARKER), "utf8")) as { bin: string; reported: string | null };
    return { root: join(dir, "root"), binPath: join(dir, "root", marker.bin), reported: marker.reported };
  } catch {
    return null;
  }
}
