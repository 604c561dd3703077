import { spawn, type ChildProcess } from "node:child_process";
import { mkdirSync, rmSync, writeFileSync } from "node:fs";
import { constants } from "node:fs";
import { chmod, cp, lstat, mkdir, mkdtemp, open, readdir, readFile, rename, stat, writeFile } from "node:fs/promises";
import { tmpdir, userInfo } from "node:os";
import { basename, dirname, join } from "node:path";
import { silentLogger, type Logger } from "@proctor/schema";
import { SandboxClosedError, SandboxError, SandboxStartError, TransferError } from "./errors";
import { buildExecResult, exitCodeFromSignal, OutputCollector, DEFAULT_MAX_OUTPUT_BYTES } from "./output";
import { checkedEntries, hostPathOf, META_DIR, normalizeSandboxPath, sandboxPathEnv } from "./paths";
import { groupAlive, killGroup, killPids, pidsWithEnv, processStartTime, sameProcessAlive } from "./process";
import { copyTreeBounded } from "./bounded-copy";
import { removeTreeWithoutStat } from "./owned-temp";
import { LABELS, SANDBOX_PATHS } from "./types";
import type { DownloadOptions, DownloadReport, ExecCommand, ExecOptions, ExecResult, ImageRequest, Sandbox, SandboxCreateOptions, SandboxRuntime } from "./types";

/** Prefix of every local sandbox root under rootDir; reap() only looks at these. */
export const LOCAL_ROOT_PREFIX = "proctor-sbx-";

/** Host env vars a local sandbox inherits unless the runtime is given another list. */
export const DEFAULT_ENV_ALLOWLIST = ["PATH", "LANG", "LC_ALL", "TZ", "TERM"] as const;

const DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
const DEFAULT_READ_MAX_BYTES = 10 * 1024 * 1024;
const OWNER_FILE = "owner.json";
const GROUPS_DIR = "groups";
let writeCounter = 0;

export interface LocalRuntimeOptions {
  /** Parent directory of the sandbox roots; default os.tmpdir(). */
  rootDir?: string;
  logger?: Logger;
  /** Host env vars passed through to every exec; default PATH, LANG, LC_ALL, TZ, TERM. */
  envAllowlist?: readonly string[];
  /**
   * How long exec waits for stdout/stderr to close after the command itself exited (a
   * backgrounded child may hold them open). Then exec returns; the child keeps running until
   * the sandbox is killed. Default 1000.
   */
  streamDrainMs?: number;
}

/** What a local root's owner.json records, for reap(). */
interface OwnerRecord {
  id: string;
  ownerPid: number;
  ownerStartTime: string | null;
  image: string;
  workdir: string;
  labels: Record<string, string>;
  createdAt: string;
}

/** What groups/<pgid> records: the leader's start time, to avoid killing a reused pgid. */
interface GroupRecord {
  pgid: number;
  startTime: string | null;
}

function errnoCode(error: unknown): string | undefined {
  return (error as NodeJS.ErrnoException | null)?.code;
}

/*
 * Everything under a sandbox root is the agent's: it may hold FIFOs and sockets. A stat of one
 * that fills Node's shared stat buffer makes this process's later require() and import() stop
 * resolving symlinks (nodejs/node#51142, see removeTreeWithoutStat), so paths here are stat'ed
 * with `bigint: true` (another buffer, which the resolver does not read) and the root is removed
 * without stat calls.
 */

/** Remove a tree even when commands left directories without write permission. */
async function removeTree(path: string): Promise<void> {
  try {
    await removeTreeRetrying(path);
  } catch (error) {
    if (errnoCode(error) !== "EACCES" && errnoCode(error) !== "EPERM") throw error;
    await makeWritable(path);
    await removeTreeRetrying(path);
  }
}

/** A process that escaped the kill may still add files for a moment: retry a dir that refilled. */
async function removeTreeRetrying(path: string): Promise<void> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await removeTreeWithoutStat(path);
    } catch (error) {
      if (errnoCode(error) !== "ENOTEMPTY" || attempt >= 3) throw error;
      await new Promise((resolve) => setTimeout(resolve, 50 * attempt));
    }
  }
}

async function makeWritable(dir: string): Promise<void> {
  try {
    await chmod(dir, 0o700);
  } catch (error) {
    if (errnoCode(error) === "ENOENT") return;
    throw error;
  }
  const entries = await readdir(dir, { withFileTypes: true });
  for (const entry of entries) if (entry.isDirectory()) await makeWritable(join(dir, entry.name));
}

/** Kill the process groups recorded under a root and any process carrying its env marker. */
async function killRecordedProcesses(root: string, logger: Logger): Promise<void> {
  const groupsDir = join(root, META_DIR, GROUPS_DIR);
  let names: string[] = [];
  try {
    names = await readdir(groupsDir);
  } catch (error) {
    if (errnoCode(error) !== "ENOENT") throw error;
  }
  for (const name of names) {
    let record: GroupRecord;
    try {
      record = JSON.parse(await readFile(join(groupsDir, name), "utf8")) as GroupRecord;
    } catch (error) {
      if (errnoCode(error) === "ENOENT") continue; // the group ended and was forgotten meanwhile
      logger.warn("sandbox: unreadable process group record; not killing it", { root, name, error: (error as Error).message });
      continue;
    }
    if (!Number.isInteger(record.pgid) || record.pgid <= 1) continue;
    // A live leader with another start time means the pgid now belongs to someone else. A gone
    // leader is fine: Linux does not reuse a pid while its process group still has members.
    const leaderStart = processStartTime(record.pgid);
    if (record.startTime !== null && leaderStart !== null && leaderStart !== record.startTime) continue;
    killGroup(record.pgid);
  }
  killPids(await pidsWithEnv("PROCTOR_SANDBOX_ROOT", root));
}

/**
 * Sandboxes as host processes in a temp root per sandbox. Sandbox path P maps to `<root>/P`;
 * commands find the standard dirs through the PROCTOR_* env vars. No isolation: commands run
 * as the current user and can reach the whole host. Resource limits and `network: false` are
 * not enforced (a warning says so once per runtime).
 */
export class LocalRuntime implements SandboxRuntime {
  readonly name = "local";
  readonly capabilities = LOCAL_CAPABILITIES;
  readonly rootDir: string;
  private readonly logger: Logger;
  private readonly envAllowlist: readonly string[];
  private readonly streamDrainMs: number;
  private warnedLimits = false;

  constructor(options: LocalRuntimeOptions = {}) {
    this.rootDir = options.rootDir ?? tmpdir();
    this.logger = options.logger ?? silentLogger;
    this.envAllowlist = options.envAllowlist ?? DEFAULT_ENV_ALLOWLIST;
    this.streamDrainMs = options.streamDrainMs ?? 1000;
  }

  /**
   * There are no images locally: returns the requested image (recorded, not used), or "local"
   * when the task only has a build context. Never builds; whether a task that needs its
   * Dockerfile can run on the host is the engine's call.
   */
  async resolveImage(request: ImageRequest): Promise<string> {
    if (request.signal?.aborted) throw new SandboxError("resolveImage aborted", { cause: request.signal.reason });
    if (request.image === null && request.buildContext !== null) {
      request.onProgress?.(`local runtime: not building ${request.buildContext}; commands run on the host`);
    }
    return request.image ?? "local";
  }

  async create(options: SandboxCreateOptions): Promise<Sandbox> {
    if (options.signal?.aborted) throw new SandboxStartError("sandbox creation aborted", { cause: options.signal.reason });
    // Never ignore a mount or container setting: the caller relies on it (read-only data, GPUs).
    if ((options.mounts?.length ?? 0) > 0 || (options.container && Object.keys(options.container).length > 0)) {
      throw new SandboxStartError("the local runtime cannot apply mounts or container settings (--container-config, gpus): use the docker runtime");
    }
    if (!this.warnedLimits) {
      this.warnedLimits = true;
      this.logger.warn("local runtime: cpus, memory, pids and network limits are not enforced; commands run as host processes", {
        rootDir: this.rootDir,
      });
    }
    const workdir = normalizeSandboxPath(options.workdir ?? SANDBOX_PATHS.workdir);
    let root: string;
    try {
      await mkdir(this.rootDir, { recursive: true });
      root = await mkdtemp(join(this.rootDir, LOCAL_ROOT_PREFIX));
    } catch (error) {
      throw new SandboxStartError(`cannot create a sandbox root under ${this.rootDir}: ${(error as Error).message}`, { cause: error });
    }
    const id = `local-${basename(root).slice(LOCAL_ROOT_PREFIX.length)}`;
    const labels = { [LABELS.managed]: "true", ...options.labels, [LABELS.owner]: String(process.pid) };
    const owner: OwnerRecord = {
      id,
      ownerPid: process.pid,
      ownerStartTime: processStartTime(process.pid),
      image: options.image,
      workdir,
      labels,
      createdAt: new Date().toISOString(),
    };
    try {
      await mkdir(join(root, META_DIR, GROUPS_DIR), { recursive: true });
      await writeFile(join(root, META_DIR, OWNER_FILE), `${JSON.stringify(owner, null, 2)}\n`);
      for (const dir of [workdir, SANDBOX_PATHS.agentLogs, SANDBOX_PATHS.verifierLogs, "/root-home", "/tmp"]) {
        await mkdir(hostPathOf(root, dir), { recursive: true });
      }
    } catch (error) {
      await removeTree(root);
      throw new SandboxStartError(`cannot prepare sandbox root ${root}: ${(error as Error).message}`, { cause: error });
    }
    const hostEnv: Record<string, string> = {};
    for (const name of this.envAllowlist) {
      const value = process.env[name];
      if (value !== undefined) hostEnv[name] = value;
    }
    hostEnv.PATH ??= DEFAULT_PATH;
    this.logger.debug("local sandbox created", { id, root, image: options.image });
    return new LocalSandbox({
      id,
      root,
      workdir,
      hostEnv,
      createEnv: options.env ?? {},
      logger: this.logger,
      streamDrainMs: this.streamDrainMs,
    });
  }

  /**
   * The roots under rootDir whose owner process is gone, as reap() would remove them (nothing is
   * removed or killed). Roots without an owner record are not listed (and are logged): they may
   * be in the middle of being created.
   */
  async orphans(): Promise<{ root: string; id: string; ownerPid: number }[]> {
    let names: string[];
    try {
      names = await readdir(this.rootDir);
    } catch (error) {
      if (errnoCode(error) === "ENOENT") return [];
      throw error;
    }
    const found: { root: string; id: string; ownerPid: number }[] = [];
    for (const name of names) {
      if (!name.startsWith(LOCAL_ROOT_PREFIX)) continue;
      const root = join(this.rootDir, name);
      let owner: OwnerRecord;
      try {
        owner = JSON.parse(await readFile(join(root, META_DIR, OWNER_FILE), "utf8")) as OwnerRecord;
      } catch (error) {
        if (errnoCode(error) === "ENOTDIR") continue;
        this.logger.warn("reap: sandbox root has no readable owner record; left alone", { root, error: (error as Error).message });
        continue;
      }
      if (sameProcessAlive(owner.ownerPid, owner.ownerStartTime)) continue;
      found.push({ root, id: owner.id, ownerPid: owner.ownerPid });
    }
    return found;
  }

  /**
   * Remove roots under rootDir whose owner process is gone (orphans()), after killing the process
   * groups they recorded.
   */
  async reap(): Promise<number> {
    let removed = 0;
    for (const { root, id, ownerPid } of await this.orphans()) {
      await killRecordedProcesses(root, this.logger);
      await removeTree(root);
      this.logger.info("reap: removed sandbox root of a dead owner", { root, id, ownerPid });
      removed++;
    }
    return removed;
  }
}

interface LocalSandboxInit {
  id: string;
  root: string;
  workdir: string;
  hostEnv: Record<string, string>;
  createEnv: Record<string, string>;
  logger: Logger;
  streamDrainMs: number;
}

/** A running exec, so kill() can stop it and wait for it. */
interface RunningExec {
  pgid: number;
  killedBySandbox: boolean;
  done: Promise<unknown>;
}

function currentUserNames(): Set<string> {
  const info = userInfo();
  return new Set([info.username, String(info.uid)]);
}

/** One local sandbox: a temp root and the process groups started in it. */
/**
 * Host processes in a temp root: no isolation of processes, files or network, and no trusted
 * toolchain (the host's own tools run the verifier).
 */
export const LOCAL_CAPABILITIES = Object.freeze({
  killAll: false, changes: false, trustedTools: false, files: false, network: false, diskUsage: false, processes: false, joinNetwork: false,
  fileAudit: false, fileAuditUnavailable: "the local runtime runs sandboxes as host processes: it has no file audit",
});

export class LocalSandbox implements Sandbox {
  readonly runtime = "local";
  readonly capabilities = LOCAL_CAPABILITIES;
  /** Host tools, run directly. */
  readonly trustedTools: readonly string[] = [];
  readonly adminUser = undefined;
  readonly id: string;
  readonly workdir: string;
  /** Host directory the sandbox's `/` maps to. */
  readonly root: string;
  private readonly baseEnv: Record<string, string>;
  private readonly createEnv: Record<string, string>;
  private readonly pathEnv: Record<string, string>;
  private readonly logger: Logger;
  private readonly streamDrainMs: number;
  /** Process groups that may still have members (leader running, or children it left). */
  private readonly groups = new Set<number>();
  private readonly running = new Set<RunningExec>();
  private killing: Promise<void> | null = null;

  constructor(init: LocalSandboxInit) {
    this.id = init.id;
    this.root = init.root;
    this.workdir = init.workdir;
    this.logger = init.logger;
    this.streamDrainMs = init.streamDrainMs;
    this.createEnv = init.createEnv;
    this.pathEnv = {
      ...sandboxPathEnv(init.root, init.workdir),
      PROCTOR_SANDBOX_ROOT: init.root,
      PROCTOR_SANDBOX_ID: init.id,
      PROCTOR_RUNTIME: "local",
    };
    this.baseEnv = { ...init.hostEnv, HOME: join(init.root, "root-home"), TMPDIR: join(init.root, "tmp") };
  }

  /** Host path of a sandbox path (relative paths start at the workdir). */
  hostPath(sandboxPath: string): string {
    return hostPathOf(this.root, sandboxPath, this.workdir);
  }

  private ensureOpen(operation: string): void {
    if (this.killing) throw new SandboxClosedError(`${operation}: sandbox ${this.id} is already killed`);
  }

  async exec(command: ExecCommand, options: ExecOptions = {}): Promise<ExecResult> {
    this.ensureOpen("exec");
    let file: string;
    let args: string[];
    if (Array.isArray(command)) {
      if (command.length === 0) throw new SandboxError("exec: the argv array is empty; pass at least the program to run");
      file = command[0] as string;
      args = command.slice(1) as string[];
    } else {
      file = "/bin/sh";
      args = ["-c", (command as { shell: string }).shell];
    }
    if (options.user !== undefined && !currentUserNames().has(options.user)) {
      throw new SandboxError(
        `exec: user "${options.user}" is not supported by the local runtime, which runs commands as the current user (${userInfo().username}); drop the user option or use the docker runtime`,
      );
    }
    const cwd = options.cwd === undefined ? this.hostPath(this.workdir) : this.hostPath(options.cwd);
    const cwdStat = await stat(cwd, { bigint: true }).catch(() => null);
    if (!cwdStat?.isDirectory()) {
      throw new SandboxError(`exec: working directory ${options.cwd ?? this.workdir} does not exist in sandbox ${this.id}`);
    }
    this.ensureOpen("exec");
    const env = { ...this.baseEnv, ...this.createEnv, ...options.env, ...this.pathEnv };
    const stdout = new OutputCollector(options.maxOutputBytes ?? DEFAULT_MAX_OUTPUT_BYTES);
    const stderr = new OutputCollector(options.maxOutputBytes ?? DEFAULT_MAX_OUTPUT_BYTES);
    const started = Date.now();
    if (options.signal?.aborted) {
      return buildExecResult({ exitCode: -1, stdout, stderr, aborted: true, durationMs: 0 });
    }

    let child: ChildProcess;
    try {
      child = spawn(file, args, {
        cwd,
        env,
        detached: true, // own session and process group, so the whole tree can be killed
        stdio: [options.stdin === undefined ? "ignore" : "pipe", "pipe", "pipe"],
      });
    } catch (error) {
      throw new SandboxError(`exec: cannot start ${JSON.stringify(file)}: ${(error as Error).message}`, { cause: error });
    }

    let resolveDone!: () => void;
    const entry: RunningExec = {
      pgid: child.pid ?? -1,
      killedBySandbox: false,
      done: new Promise<void>((resolve) => (resolveDone = resolve)),
    };
    try {
      return await this.runChild(child, entry, { file, options, stdout, stderr, started });
    } finally {
      resolveDone();
    }
  }

  private runChild(
    child: ChildProcess,
    entry: RunningExec,
    ctx: { file: string; options: ExecOptions; stdout: OutputCollector; stderr: OutputCollector; started: number },
  ): Promise<ExecResult> {
    const { options, stdout, stderr, started } = ctx;
    return new Promise<ExecResult>((resolve, reject) => {
      let timedOut = false;
      let aborted = false;
      let settled = false;
      let callbackError: unknown = null;
      let exitCode: number | null = null;
      let openStreams = 2;
      let timer: NodeJS.Timeout | undefined;
      let drainTimer: NodeJS.Timeout | undefined;
      const pgid = child.pid;

      const killTree = () => {
        if (pgid === undefined) return;
        try {
          killGroup(pgid);
        } catch (error) {
          this.logger.error("exec: could not kill the process group", { id: this.id, pgid, error: (error as Error).message });
        }
      };
      const onAbort = () => {
        aborted = true;
        killTree();
      };
      const cleanupTimers = () => {
        clearTimeout(timer);
        options.signal?.removeEventListener("abort", onAbort);
      };
      const finish = () => {
        if (settled || exitCode === null || openStreams > 0) return;
        settled = true;
        clearTimeout(drainTimer);
        cleanupTimers();
        this.running.delete(entry);
        if (pgid !== undefined) this.forgetGroupIfEmpty(pgid);
        if (callbackError !== null) {
          reject(new SandboxError(`exec: an output callback threw; the command was killed`, { cause: callbackError }));
          return;
        }
        resolve(
          buildExecResult({
            exitCode,
            stdout,
            stderr,
            timedOut,
            aborted: aborted || entry.killedBySandbox,
            durationMs: Date.now() - started,
          }),
        );
      };

      child.once("error", (error: NodeJS.ErrnoException) => {
        if (pgid !== undefined) {
          this.logger.warn("exec: child process error", { id: this.id, error: error.message });
          return;
        }
        // Could not start at all: report it the way a shell would (127 not found, 126 not runnable).
        cleanupTimers();
        settled = true;
        if (error.code === "ENOENT" || error.code === "EACCES") {
          stderr.push(Buffer.from(`proctor: cannot run ${JSON.stringify(ctx.file)}: ${error.message}\n`));
          resolve(
            buildExecResult({ exitCode: error.code === "ENOENT" ? 127 : 126, stdout, stderr, durationMs: Date.now() - started }),
          );
        } else {
          reject(new SandboxError(`exec: cannot start ${JSON.stringify(ctx.file)}: ${error.message}`, { cause: error }));
        }
      });

      if (pgid === undefined) return; // the "error" event follows
      const out = child.stdout;
      const err = child.stderr;
      if (!out || !err) throw new SandboxError("exec: spawn returned no stdout/stderr pipes"); // stdio is "pipe"

      this.groups.add(pgid);
      this.running.add(entry);
      this.recordGroup(pgid);

      const onChunk = (collector: OutputCollector, callback: ((chunk: Buffer) => void) | undefined) => (chunk: Buffer) => {
        collector.push(chunk);
        if (callback && callbackError === null) {
          try {
            callback(chunk);
          } catch (error) {
            callbackError = error;
            killTree();
          }
        }
      };
      const onStreamClosed = () => {
        openStreams--;
        finish();
      };
      out.on("data", onChunk(stdout, options.onStdout));
      err.on("data", onChunk(stderr, options.onStderr));
      out.once("close", onStreamClosed);
      err.once("close", onStreamClosed);

      child.once("exit", (code, signal) => {
        exitCode = code ?? exitCodeFromSignal(signal);
        cleanupTimers();
        if (openStreams > 0) {
          // The command is done but something it started still holds stdout/stderr open.
          drainTimer = setTimeout(() => {
            this.logger.debug("exec: output still open after the command exited; detaching", { id: this.id, pgid });
            out.destroy();
            err.destroy();
          }, this.streamDrainMs);
        }
        finish();
      });

      if (child.stdin) {
        child.stdin.on("error", (error: NodeJS.ErrnoException) => {
          // EPIPE: the command exited without reading all of its input, which is its right.
          if (error.code !== "EPIPE") this.logger.warn("exec: writing stdin failed", { id: this.id, error: error.message });
        });
        child.stdin.end(typeof options.stdin === "string" ? Buffer.from(options.stdin) : options.stdin);
      }
      if (options.timeoutMs !== undefined) {
        timer = setTimeout(() => {
          timedOut = true;
          killTree();
        }, Math.max(0, options.timeoutMs));
      }
      options.signal?.addEventListener("abort", onAbort, { once: true });
      if (this.killing) {
        entry.killedBySandbox = true;
        killTree();
      }
    });
  }

  /**
   * Written synchronously right after spawn so a crash of this process a moment later still
   * leaves a record for reap().
   */
  private recordGroup(pgid: number): void {
    const record: GroupRecord = { pgid, startTime: processStartTime(pgid) };
    try {
      writeFileSync(join(this.root, META_DIR, GROUPS_DIR, String(pgid)), JSON.stringify(record));
    } catch (error) {
      if (errnoCode(error) !== "ENOENT") throw error;
      // The meta dir was removed by a command; recreate it so reap() still finds the group.
      mkdirSync(join(this.root, META_DIR, GROUPS_DIR), { recursive: true });
      writeFileSync(join(this.root, META_DIR, GROUPS_DIR, String(pgid)), JSON.stringify(record));
    }
  }

  /** Stop tracking a group once nothing is left in it (a background child keeps it tracked). */
  private forgetGroupIfEmpty(pgid: number): void {
    if (groupAlive(pgid)) return;
    this.groups.delete(pgid);
    rmSync(join(this.root, META_DIR, GROUPS_DIR, String(pgid)), { force: true });
  }

  async upload(hostPath: string, sandboxPath: string): Promise<void> {
    this.ensureOpen("upload");
    const dest = this.hostPath(sandboxPath);
    const source = await stat(hostPath).catch((error: unknown) => {
      throw new TransferError(`upload: cannot read host path ${hostPath}: ${(error as Error).message}`, hostPath, { cause: error });
    });
    try {
      if (source.isDirectory()) {
        await mkdir(dest, { recursive: true });
        await cp(hostPath, dest, { recursive: true, verbatimSymlinks: true, force: true, preserveTimestamps: true });
      } else {
        const destStat = await stat(dest, { bigint: true }).catch(() => null);
        const target = destStat?.isDirectory() ? join(dest, basename(hostPath)) : dest;
        await mkdir(dirname(target), { recursive: true });
        await cp(hostPath, target, { verbatimSymlinks: true, force: true, preserveTimestamps: true });
      }
    } catch (error) {
      throw new TransferError(`upload: copying ${hostPath} to ${sandboxPath} failed: ${(error as Error).message}`, sandboxPath, {
        cause: error,
      });
    }
  }

  async writeFile(sandboxPath: string, data: string | Uint8Array, options: { mode?: number } = {}): Promise<void> {
    this.ensureOpen("writeFile");
    const dest = this.hostPath(sandboxPath);
    try {
      await mkdir(dirname(dest), { recursive: true });
      // Write to a temp name and rename, so a reader never sees half a file.
      const temp = `${dest}.proctor-tmp-${process.pid}-${++writeCounter}`;
      await writeFile(temp, data, { mode: options.mode });
      if (options.mode !== undefined) await chmod(temp, options.mode); // the umask applied on create
      await rename(temp, dest);
    } catch (error) {
      throw new TransferError(`writeFile: writing ${sandboxPath} failed: ${(error as Error).message}`, sandboxPath, { cause: error });
    }
  }

  async readFile(sandboxPath: string, options: { maxBytes?: number } = {}): Promise<Buffer | null> {
    this.ensureOpen("readFile");
    const maxBytes = options.maxBytes ?? DEFAULT_READ_MAX_BYTES;
    const source = this.hostPath(sandboxPath);
    let handle;
    try {
      // Non-blocking, so a FIFO in place of the file cannot hang the open (it is refused below).
      handle = await open(source, constants.O_RDONLY | constants.O_NONBLOCK);
    } catch (error) {
      if (errnoCode(error) === "ENOENT" || errnoCode(error) === "ENOTDIR") return null;
      throw new TransferError(`readFile: cannot open ${sandboxPath}: ${(error as Error).message}`, sandboxPath, { cause: error });
    }
    try {
      const info = await handle.stat({ bigint: true });
      if (!info.isFile()) throw new TransferError(`readFile: ${sandboxPath} is not a regular file`, sandboxPath);
      // Read one byte past the limit, so a file that grew after stat() is still caught.
      const buffer = Buffer.alloc(Math.min(Number(info.size), maxBytes) + 1);
      let length = 0;
      while (length < buffer.length) {
        const { bytesRead } = await handle.read(buffer, length, buffer.length - length, length);
        if (bytesRead === 0) break;
        length += bytesRead;
      }
      if (length > maxBytes) {
        throw new TransferError(
          `readFile: ${sandboxPath} is larger than the ${maxBytes} byte limit; pass a larger maxBytes or download it`,
          sandboxPath,
        );
      }
      return buffer.subarray(0, length);
    } finally {
      await handle.close();
    }
  }

  async download(sandboxPath: string, hostDir: string, options: DownloadOptions = {}): Promise<DownloadReport> {
    this.ensureOpen("download");
    const source = this.hostPath(sandboxPath);
    const report: DownloadReport = { files: 0, bytes: 0, truncated: false, skipped: [] };
    const info = await lstat(source, { bigint: true }).catch((error: unknown) => {
      if (errnoCode(error) === "ENOENT" || errnoCode(error) === "ENOTDIR") return null;
      throw new TransferError(`download: cannot read ${sandboxPath}: ${(error as Error).message}`, sandboxPath, { cause: error });
    });
    if (info === null) return report;
    const maxBytes = options.maxBytes ?? Number.POSITIVE_INFINITY;
    const entries = options.entries === undefined ? undefined : checkedEntries(options.entries);
    try {
      await mkdir(hostDir, { recursive: true });
      const copy = { links: options.links === true };
      if (!info.isDirectory()) await copyTreeBounded(source, join(hostDir, basename(source)), basename(source), maxBytes, report, copy);
      else if (entries === undefined) await copyTreeBounded(source, hostDir, "", maxBytes, report, { ...copy, exclude: options.exclude ?? [] });
      else {
        for (const name of entries) {
          if (options.exclude?.includes(name)) continue;
          const exists = await lstat(join(source, name), { bigint: true }).then(() => true, () => false);
          if (exists) await copyTreeBounded(join(source, name), join(hostDir, name), name, maxBytes, report, copy);
          if (report.truncated) break;
        }
      }
    } catch (error) {
      throw new TransferError(`download: copying ${sandboxPath} to ${hostDir} failed: ${(error as Error).message}`, sandboxPath, {
        cause: error,
      });
    }
    return report;
  }


  kill(): Promise<void> {
    this.killing ??= this.destroy();
    return this.killing;
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.kill();
  }

  private async destroy(): Promise<void> {
    for (const entry of this.running) entry.killedBySandbox = true;
    for (const pgid of this.groups) killGroup(pgid);
    await killRecordedProcesses(this.root, this.logger);
    await Promise.all([...this.running].map((entry) => entry.done));
    this.groups.clear();
    await removeTree(this.root);
    this.logger.debug("local sandbox removed", { id: this.id, root: this.root });
  }
}

