import { randomUUID } from "node:crypto";
import { constants } from "node:fs";
import { access, mkdir, readFile, stat } from "node:fs/promises";
import { basename, join, posix } from "node:path";
import type { IncomingMessage } from "node:http";
import { PassThrough, type Duplex, type Readable } from "node:stream";
import type Dockerode from "dockerode";
import * as tar from "tar";
import { packDirectory, packFiles } from "@proctor/archive";
import {
  OutputCollector,
  checkedEntries,
  copyTreeBounded,
  RuntimeUnavailableError,
  SandboxClosedError,
  SandboxStoppedError,
  buildExecResult,
  normalizeSandboxPath,
  SandboxError,
  TransferError,
  type DownloadOptions,
  type DownloadReport,
  type ExecCommand,
  type ExecOptions,
  type ExecResult,
  type FileAudit,
  type FileChange,
  type Sandbox,
  type SandboxCapabilities,
  type SandboxProcess,
} from "@proctor/sandbox";
import type { Logger } from "@proctor/schema";
import { daemonMessage, isConnectionError, statusCode } from "./docker-errors";
import { FrameDemuxer } from "./frames";
import { EXEC_MARKER, KILL_TREE_SCRIPT } from "./kill-tree";
import { MAX_SKIPPED_LISTED, extractBounded } from "./extract-bounded";
import { containerCgroupDir, LIST_PROCESSES_SCRIPT, listProcessesOnHost, parseProcessListing } from "./processes";
import { overlayLayersOf, readOverlayChanges, type OverlayLayers } from "./overlay-changes";
import { ChangesFastPath, type NoFastPath } from "./fast-path";
import { startAndWaitReady } from "./ready";
import { upperOnlyPath } from "./upper-read";
import { dockerCapabilities } from "./capabilities";
import { FileAuditError, fileAuditSupport, startFileAudit } from "./file-audit";
import { TRUSTED_BUSYBOX } from "./toolchain";
import type { ExecChannel } from "./channel";

const DEFAULT_MAX_READ_BYTES = 10 * 1024 * 1024;
/** The channel's commands run as root: it serves images whose USER is root (or unset) only. */
const ROOT_USER = /^(|0|root)(:(0|root))?$/;
function runningInitPid(info: Dockerode.ContainerInspectInfo): number {
  return info.State.Running && info.State.Pid > 0 ? info.State.Pid : 0;
}

/** The container's overlay2 layer dirs when this host can read them, else why not (a reason that holds for every container). */
async function readableLayers(info: Dockerode.ContainerInspectInfo): Promise<OverlayLayers | NoFastPath> {
  const layers = overlayLayersOf(info.GraphDriver);
  if (typeof layers === "string") return { unavailable: layers, fix: "run the Docker daemon with the overlay2 storage driver" };
  return access(layers.upper, constants.R_OK | constants.X_OK).then(
    () => layers,
    () => ({
      unavailable: `${layers.upper} is not readable here (the daemon runs elsewhere, or this process is not root)`,
      fix: "run Proctor as root on the machine the Docker daemon runs on",
    }),
  );
}

/**
 * The container's OOM kill count read from its memory cgroup on this host (its init's
 * /proc/<pid>/cgroup names it; the path must hold the container's id, so a reused pid is never
 * read), or null when this host cannot see it (a remote daemon) and the caller asks inside.
 */
export async function oomKillsOnHost(pid: number, id: string): Promise<number | null> {
  if (!(pid > 0)) return null;
  try {
    const cgroup = await containerCgroupDir(pid, id, "memory");
    if (cgroup === null) return null;
    // cgroup v1 counts kills in memory.oom_control, v2 in memory.events.
    const file = `${cgroup.dir}/${cgroup.v1 ? "memory.oom_control" : "memory.events"}`;
    const match = /^oom_kill (\d+)$/m.exec(await readFile(file, "utf8"));
    return match ? Number(match[1]) : null;
  } catch {
    return null; // not visible from here: the caller reads it inside the container
  }
}

/**
 * Run by the trusted busybox as root with ($1 busybox, $2 source, then entries to keep): says on
 * its first stdout line what the source is (a link is a file here: tar stores it, never follows
 * it), then tars it relative to itself on the rest of stdout: a directory's contents, or only
 * the named entries that exist, in their order (MISSING when none does).
 */
const TAR_SCRIPT = `b="$1"; p="$2"; shift 2
if [ -d "$p" ] && [ ! -L "$p" ]; then
  cd "$p" || exit 1
  if [ "$1" = --all-but ]; then
    shift; x=" $* "; n=$#
    for e in .[!.]* ..?* *; do
      if { [ -e "./$e" ] || [ -L "./$e" ]; } && [ "\${x#* $e }" = "$x" ]; then set -- "$@" "./$e"; fi
    done
    shift $n
    if [ $# -eq 0 ]; then echo MISSING; exit 0; fi
  elif [ $# -gt 0 ]; then
    n=$#
    for e in "$@"; do if [ -e "./$e" ] || [ -L "./$e" ]; then set -- "$@" "./$e"; fi; done
    shift $n
    if [ $# -eq 0 ]; then echo MISSING; exit 0; fi
  else set -- .; fi
  echo DIR && exec "$b" tar -c "$@"
elif [ -e "$p" ] || [ -L "$p" ]; then cd "$("$b" dirname "$p")" && echo FILE && exec "$b" tar -c "./$("$b" basename "$p")"
else echo MISSING; fi`;

/** Run by the trusted busybox as root with ($1 busybox, $2 dir): extracts stdin's tar into dir. */
const UNTAR_SCRIPT = `b="$1"; d="$2"; "$b" mkdir -p "$d" && cd "$d" && exec "$b" tar -x`;

/** How long a removal waits for a restarting daemon. */
const DAEMON_RETURN_MS = 120_000;
/** How long to wait for the output streams to close after the process tree was killed. */
const KILL_GRACE_MS = 5000;
/** What runc says (through the daemon, as an exec's output) when asked to exec in a container that has stopped. */
const STOPPED_EXEC = /cannot exec in a stopped (state|container)/;

/** A running Docker container driven through the Engine API. Create it with DockerRuntime.create. */
export class DockerSandbox implements Sandbox {
  readonly runtime = "docker";
  readonly capabilities: SandboxCapabilities;
  readonly trustedTools: readonly string[] = [TRUSTED_BUSYBOX];
  readonly adminUser = "0";
  /** Pid of the container's keep-alive (set by the runtime once the container reported ready). */
  keepAlivePid = 0;
  /** See Sandbox.networkFilesShared (set by the runtime for a sandbox joining another's network). */
  networkFilesShared = false;
  private killing: Promise<void> | undefined;
  private closed = false;
  /** Set once halt() confirmed that every process is gone: the files no longer change. */
  private halted = false;
  private killHooks: (() => void)[] = [];
  private layers: Promise<OverlayLayers | NoFastPath | string> | undefined;
  /**
   * The host pid of the container's init as of the last inspect that found it running (0: not
   * known). Host-side reads check the pid's cgroup names this container, so one that has since
   * stopped or restarted only costs a fresh inspect; it saves an inspect per listing otherwise.
   */
  private initPid = 0;

  constructor(
    private readonly container: Dockerode.Container,
    readonly workdir: string,
    /** The image's USER, the default for exec; "" means root. */
    private readonly defaultUser: string,
    private readonly logger: Logger,
    /** Takes over a removal that finishes after kill() resolved (DockerRuntime.drain awaits it). */
    private readonly background: (removal: Promise<void>) => void = (removal) => void removal.catch(() => undefined),
    /** The resident exec channel (channel.ts), or null when execs only use `docker exec`. */
    private readonly channel: ExecChannel | null = null,
    /** The runtime's host-side reading of changes (shared by its sandboxes: one reader, one warning). */
    private readonly fastPath: ChangesFastPath = new ChangesFastPath("auto", logger),
  ) {
    if (channel) this.onKill(() => void channel.close());
    this.capabilities = dockerCapabilities(container.modem);
  }

  /** True while execs without a `user` go through the resident channel rather than `docker exec`. */
  get channelReady(): boolean {
    return this.channel?.ready === true && ROOT_USER.test(this.defaultUser);
  }

  get id(): string {
    return this.container.id;
  }

  async exec(command: ExecCommand, options: ExecOptions = {}): Promise<ExecResult> {
    this.assertOpen("exec");
    const argv = toArgv(command);
    const started = performance.now();
    const stdout = new OutputCollector(options.maxOutputBytes);
    const stderr = new OutputCollector(options.maxOutputBytes);
    let timedOut = false;
    let aborted = false;
    const finish = (exitCode: number): ExecResult =>
      buildExecResult({ exitCode, stdout, stderr, timedOut, aborted, durationMs: performance.now() - started });
    if (options.signal?.aborted) {
      aborted = true;
      return finish(-1);
    }

    const execId = randomUUID();
    // Only execs without a `user` may use the channel: Proctor's own trusted execs (verifier,
    // reward, listings) pass adminUser and must not depend on anything the agent can reach.
    if (options.user === undefined && this.channelReady && this.channel) {
      const cwd = options.cwd === undefined ? this.workdir : this.resolve(options.cwd);
      const result = await this.channel.exec(argv, options, cwd, execId, {
        killTree: (id) => this.killExecTree(id),
        isRunning: () => this.isRunning(),
      });
      if (result) return result;
      if (options.signal?.aborted) {
        aborted = true;
        return finish(-1);
      }
    }
    const hasStdin = options.stdin !== undefined;
    const env = Object.entries(options.env ?? {}).map(([key, value]) => `${key}=${value}`);
    env.push(`${EXEC_MARKER}=${execId}`);
    let exec: Dockerode.Exec;
    let stream: Duplex;
    try {
      exec = await this.container.exec({
        Cmd: argv,
        AttachStdin: hasStdin,
        AttachStdout: true,
        AttachStderr: true,
        Tty: false,
        Env: env,
        WorkingDir: options.cwd === undefined ? this.workdir : this.resolve(options.cwd),
        User: options.user ?? this.defaultUser,
      });
      stream = await exec.start({ hijack: true, stdin: hasStdin });
    } catch (error) {
      throw this.failure(`exec ${describeArgv(argv)}`, error);
    }

    let killed: Promise<void> | undefined;
    let killRequested!: () => void;
    const whenKillRequested = new Promise<void>((resolve) => (killRequested = resolve));
    const killTree = () => {
      if (!killed) {
        killed = this.killExecTree(execId);
        killRequested();
      }
      return killed;
    };
    let callbackError: unknown;
    const demux = new FrameDemuxer((which, chunk) => {
      if (callbackError !== undefined) return;
      try {
        if (which === "stdout") {
          stdout.push(chunk);
          options.onStdout?.(chunk);
        } else {
          stderr.push(chunk);
          options.onStderr?.(chunk);
        }
      } catch (error) {
        // A throwing callback stops the command; the error is rethrown to the caller below.
        callbackError = error;
        void killTree();
      }
    });
    const ended = new Promise<void>((resolve, reject) => {
      stream.on("data", (chunk: Buffer) => demux.push(chunk));
      stream.once("end", resolve);
      stream.once("close", resolve);
      stream.once("error", reject);
    });
    const timer =
      options.timeoutMs === undefined
        ? undefined
        : setTimeout(() => {
            timedOut = true;
            void killTree();
          }, options.timeoutMs);
    const onAbort = () => {
      aborted = true;
      void killTree();
    };
    options.signal?.addEventListener("abort", onAbort, { once: true });

    let graceTimer: NodeJS.Timeout | undefined;
    let waiting = true;
    try {
      const input = options.stdin;
      if (input !== undefined) {
        stream.end(typeof input === "string" ? Buffer.from(input, "utf8") : Buffer.from(input.buffer, input.byteOffset, input.byteLength));
      }
      // After a kill, the output closes once the killed processes are gone; if something keeps it
      // open anyway, stop waiting after KILL_GRACE_MS rather than hang.
      await Promise.race([
        ended,
        whenKillRequested
          .then(() => killed)
          .then(() => new Promise<void>((resolve) => {
            if (waiting) graceTimer = setTimeout(resolve, KILL_GRACE_MS);
          }))
          .then(() => this.logger.warn("exec output still open after its process tree was killed; stopped waiting", { id: this.id })),
      ]);
    } catch (error) {
      throw this.failure(`exec ${describeArgv(argv)}`, error);
    } finally {
      waiting = false;
      clearTimeout(timer);
      clearTimeout(graceTimer);
      options.signal?.removeEventListener("abort", onAbort);
      stream.destroy();
    }
    if (killed) await killed;
    if (callbackError !== undefined) throw callbackError;
    const result = finish(await this.exitCode(exec));
    if (await this.refusedAsStopped(result.exitCode, result.stdout + result.stderr)) {
      throw this.stopped(`exec ${describeArgv(argv)}`);
    }
    return result;
  }

  async upload(hostPath: string, sandboxPath: string): Promise<void> {
    this.assertOpen("upload");
    const target = this.resolve(sandboxPath);
    let info;
    try {
      info = await stat(hostPath);
    } catch (error) {
      throw new TransferError(`upload: host path ${hostPath} does not exist or cannot be read`, hostPath, { cause: error });
    }
    if (info.isDirectory()) {
      await this.putArchive(target, (prefix) => packDirectory(hostPath, prefix === "" ? {} : { prefix }), `upload ${hostPath}`);
      return;
    }
    // A file goes into sandboxPath when that is a directory, else it is written as sandboxPath.
    const into = (await this.pathKind(target, "upload")) === "directory";
    const dest = into ? posix.join(target, basename(hostPath)) : target;
    const data = await readFile(hostPath);
    await this.putArchive(
      posix.dirname(dest),
      (prefix) => packFiles([{ path: posix.join(prefix, posix.basename(dest)), data, mode: info.mode & 0o7777 }]),
      `upload ${hostPath}`,
    );
  }

  async writeFile(sandboxPath: string, data: string | Uint8Array, options: { mode?: number } = {}): Promise<void> {
    this.assertOpen("writeFile");
    const target = this.resolve(sandboxPath);
    await this.putArchive(
      posix.dirname(target),
      (prefix) => packFiles([{ path: posix.join(prefix, posix.basename(target)), data, mode: options.mode }]),
      `writeFile ${target}`,
    );
  }

  async readFile(sandboxPath: string, options: { maxBytes?: number } = {}): Promise<Buffer | null> {
    this.assertOpen("readFile");
    const maxBytes = options.maxBytes ?? DEFAULT_MAX_READ_BYTES;
    let path = this.resolve(sandboxPath);
    for (let hops = 0; hops < 16; hops++) {
      const archive = await this.getArchive(path, "readFile");
      if (archive === null) return null;
      const entry = await readFirstEntry(archive, maxBytes, path);
      if (entry.kind === "file") return entry.data;
      if (entry.kind === "link") {
        path = posix.resolve(posix.dirname(path), entry.target);
        continue;
      }
      throw new TransferError(`readFile: ${path} is a ${entry.type}, not a file`, path);
    }
    throw new TransferError(`readFile: ${sandboxPath} has too many levels of symbolic links`, sandboxPath);
  }

  async download(sandboxPath: string, hostDir: string, options: DownloadOptions = {}): Promise<DownloadReport> {
    this.assertOpen("download");
    const source = this.resolve(sandboxPath);
    const maxBytes = options.maxBytes ?? Number.POSITIVE_INFINITY;
    // A running container: the trusted busybox's tar through an exec (~15 ms of daemon work),
    // not the archive API (the daemon re-executes itself to chroot: ~65 ms of CPU per call).
    const entries = options.entries === undefined ? [] : checkedEntries(options.entries);
    if (options.entries !== undefined && entries.length === 0) return { files: 0, bytes: 0, truncated: false, skipped: [] };
    if (this.halted) {
      const fromUpper = await this.downloadFromUpper(source, entries, hostDir, maxBytes, options).catch((error: unknown) => {
        throw new TransferError(`download ${source} -> ${hostDir} failed: ${daemonMessage(error)}`, source, { cause: error });
      });
      if (fromUpper) return fromUpper;
    }
    // Excluded top-level names (e.g. a repository's .git) are not even read: the tar is told the rest.
    const exclude = entries.length === 0 && options.exclude && options.exclude.length > 0 ? ["--all-but", ...checkedEntries(options.exclude)] : [];
    const streamed = this.halted ? "stopped" : await this.tarThroughExec(source, entries, exclude);
    if (streamed === "missing") return { files: 0, bytes: 0, truncated: false, skipped: [] };
    if (streamed !== "stopped") {
      await mkdir(hostDir, { recursive: true });
      try {
        return await streamed.extract(hostDir, maxBytes, options);
      } catch (error) {
        throw new TransferError(`download ${source} -> ${hostDir} failed: ${daemonMessage(error)}`, source, { cause: error });
      }
    }
    if (entries.length > 0) return this.downloadEntries(source, entries, hostDir, maxBytes, options);
    // One round trip: the archive response carries the source's stat in a header.
    const archive = await this.getArchive(source, "download");
    if (archive === null) return { files: 0, bytes: 0, truncated: false, skipped: [] };
    let kind: "directory" | "other";
    try {
      kind = statKind(archive, source, "download");
    } catch (error) {
      (archive as Readable).destroy();
      throw error;
    }
    await mkdir(hostDir, { recursive: true });
    try {
      // The archive's top entry is the source itself: for a directory keep only its contents;
      // a file lands in hostDir under its own name.
      return await extractBounded(archive as Readable, hostDir, { strip: kind === "directory" ? 1 : 0, maxBytes: options.maxBytes ?? Number.POSITIVE_INFINITY, links: options.links === true, exclude: kind === "directory" ? (options.exclude ?? []) : [] });
    } catch (error) {
      throw new TransferError(`download ${source} -> ${hostDir} failed: ${daemonMessage(error)}`, source, { cause: error });
    }
  }

  /**
   * A halted container's `source` (or its `entries`, in order, sharing maxBytes) copied from its
   * overlay upper dir on this host, with no process start and no daemon call; null when the upper
   * dir alone cannot answer for all of them (see upperOnlyPath) and the daemon must.
   */
  private async downloadFromUpper(source: string, entries: string[], hostDir: string, maxBytes: number, options: DownloadOptions): Promise<DownloadReport | null> {
    const layers = await this.overlayLayers();
    if (typeof layers === "string" || "unavailable" in layers) return null;
    const names = entries.length > 0 ? entries : [""];
    const found = await Promise.all(names.map((name) => upperOnlyPath(layers, name === "" ? source : posix.join(source, name))));
    if (found.includes(null)) return null;
    const report: DownloadReport = { files: 0, bytes: 0, truncated: false, skipped: [] };
    for (const [i, name] of names.entries()) {
      const at = found[i];
      if (at === "missing" || at === null || at === undefined) continue;
      await mkdir(hostDir, { recursive: true });
      // A file lands in hostDir under its own name; a directory's contents in hostDir (or hostDir/<entry>).
      const copy = { links: options.links === true, exclude: name === "" ? (options.exclude ?? []) : [] };
      if (!at.directory && name === "") await copyTreeBounded(at.hostPath, join(hostDir, posix.basename(source)), posix.basename(source), maxBytes, report, copy);
      else await copyTreeBounded(at.hostPath, name === "" ? hostDir : join(hostDir, name), name, maxBytes, report, copy);
      if (report.truncated) break;
    }
    return report;
  }

  /** A stopped container's entries of `source` one by one through the archive API, in order, sharing maxBytes. */
  private async downloadEntries(source: string, entries: string[], hostDir: string, maxBytes: number, options: DownloadOptions): Promise<DownloadReport> {
    const report: DownloadReport = { files: 0, bytes: 0, truncated: false, skipped: [] };
    for (const name of entries) {
      if (options.exclude?.includes(name)) continue;
      const part = await this.download(posix.join(source, name), join(hostDir, name), { maxBytes: maxBytes - report.bytes, links: options.links === true });
      report.files += part.files;
      report.bytes += part.bytes;
      report.skipped.push(...part.skipped.slice(0, Math.max(0, MAX_SKIPPED_LISTED - report.skipped.length)));
      if (part.truncated) {
        report.truncated = true;
        report.cutAt = part.cutAt === undefined ? name : `${name}/${part.cutAt}`;
        break;
      }
    }
    return report;
  }

  /**
   * Ends every process in the container by restarting it: its PID namespace is torn down with
   * everything in it, its files stay. Resolves once the keep-alive reported ready again.
   */
  async killAll(): Promise<void> {
    this.assertOpen("killAll");
    this.initPid = 0; // a new init after the restart
    try {
      // Stop (SIGKILL, waits for the exit), then start attached: an attach made before a restart
      // would end with the stop and miss the new READY line.
      await this.container.stop({ t: 0 }).catch((error: unknown) => {
        if (statusCode(error) !== 304) throw error; // 304: already stopped
      });
      await this.channel?.arm();
      const ready = await startAndWaitReady(this.container, () => this.container.start(), undefined);
      this.keepAlivePid = ready.pid;
      await this.channel?.started(ready.channel);
    } catch (error) {
      throw this.failure("restarting the container to end every process in it", error);
    }
  }

  async changes(): Promise<FileChange[]> {
    this.assertOpen("changes");
    // The overlay reader gives the daemon's answer without its walk of the whole image. When it
    // cannot for a reason of this host, the runtime warns once with the cost; a reason of this
    // container's (an opaque directory, a failed inspect) is only logged at debug level.
    const layers = await this.overlayLayers();
    let hostWide: NoFastPath | null = null;
    if (typeof layers === "string") {
      this.logger.debug("listing container changes through the Docker API", { id: this.id, reason: layers });
    } else if ("unavailable" in layers) {
      hostWide = layers;
    } else {
      const reader = await this.fastPath.xattrs();
      if ("unavailable" in reader) hostWide = reader;
      else {
        const read = await readOverlayChanges(layers, reader);
        if ("changes" in read) return read.changes;
        this.logger.debug("listing container changes through the Docker API", { id: this.id, reason: read.unavailable });
      }
    }
    const started = performance.now();
    let list: { Path: string; Kind: number }[] | null;
    try {
      list = (await this.container.changes()) as { Path: string; Kind: number }[] | null;
    } catch (error) {
      throw this.failure("listing the container's changes", error);
    }
    if (hostWide) this.fastPath.slow(hostWide, performance.now() - started);
    const kinds = ["modified", "added", "deleted"] as const;
    return (list ?? []).map((c) => ({ path: c.Path, kind: kinds[c.Kind] ?? "modified" }));
  }

  /** The container's overlay2 layer dirs when this host can read them, else why not (asked once). */
  private overlayLayers(): Promise<OverlayLayers | NoFastPath | string> {
    this.layers ??= this.container.inspect().then(
      (info) => {
        this.initPid = runningInitPid(info);
        return readableLayers(info);
      },
      (error: unknown) => {
        this.layers = undefined; // ask again next time
        return `inspect failed: ${daemonMessage(error)}`;
      },
    );
    return this.layers;
  }

  /** Keeps what an inspect tells that later calls would inspect again for: the init's pid, the overlay layers. */
  private learn(info: Dockerode.ContainerInspectInfo): void {
    this.initPid = runningInitPid(info);
    this.layers ??= readableLayers(info);
  }

  async diskUsageBytes(): Promise<number> {
    this.assertOpen("diskUsageBytes");
    try {
      const info = (await this.container.inspect({ size: true } as Dockerode.ContainerInspectOptions)) as { SizeRw?: number };
      return info.SizeRw ?? 0;
    } catch (error) {
      throw this.failure("measuring the container's disk use", error);
    }
  }

  /**
   * CPU-seconds the container's processes have used so far: its cgroup's CPU accounting read on
   * this host (cpuacct.usage on cgroup v1, cpu.stat usage_usec on v2), else the daemon's one-shot
   * stats; null once it is halted or gone, or when neither answers.
   */
  async cpuSeconds(): Promise<number | null> {
    if (this.closed || this.halted) return null;
    try {
      if (this.initPid === 0) this.learn(await this.container.inspect());
      const cgroup = this.initPid > 0 ? await containerCgroupDir(this.initPid, this.id, "cpuacct") : null;
      if (cgroup?.v1) return Number((await readFile(`${cgroup.dir}/cpuacct.usage`, "utf8")).trim()) / 1e9;
      const usec = cgroup ? /^usage_usec (\d+)$/m.exec(await readFile(`${cgroup.dir}/cpu.stat`, "utf8"))?.[1] : undefined;
      if (usec !== undefined) return Number(usec) / 1e6;
    } catch {
      // not readable from here: ask the daemon
    }
    try {
      const options = { stream: false, "one-shot": true } as { stream: false };
      const stats = (await this.container.stats(options)) as unknown as { cpu_stats?: { cpu_usage?: { total_usage?: number } } };
      const ns = stats.cpu_stats?.cpu_usage?.total_usage;
      return typeof ns === "number" && ns > 0 ? ns / 1e9 : null;
    } catch {
      return null;
    }
  }

  async outOfMemoryKills(): Promise<number> {
    if (this.initPid > 0 && !this.closed) {
      const known = await oomKillsOnHost(this.initPid, this.id);
      if (known !== null) return known;
    }
    const info = await this.container.inspect().catch((error: unknown) => {
      if (statusCode(error) === 404) return null;
      throw this.failure("inspecting the container", error);
    });
    if (info) this.learn(info);
    if (!info?.State.Running || this.closed) return info?.State.OOMKilled ? 1 : 0;
    const fromHost = await oomKillsOnHost(info.State.Pid, info.Id);
    if (fromHost !== null) return fromHost;
    // cgroup v2 memory.events, else v1 memory.oom_control: both count kills as "oom_kill N".
    const result = await this.exec([TRUSTED_BUSYBOX, "sh", "-c", "cat /sys/fs/cgroup/memory.events 2>/dev/null || cat /sys/fs/cgroup/memory/memory.oom_control"], { user: "0", timeoutMs: 30_000 });
    const match = /^oom_kill (\d+)$/m.exec(result.stdout);
    return match ? Number(match[1]) : 0;
  }

  async processes(): Promise<SandboxProcess[]> {
    if (this.initPid > 0) {
      const known = await listProcessesOnHost(this.initPid, this.id);
      if (known !== null) return parseProcessListing(known, this.keepAlivePid);
    }
    const info = await this.container.inspect().catch((error: unknown) => {
      throw this.failure("inspecting the container", error);
    });
    this.learn(info);
    const fromHost = info.State.Running ? await listProcessesOnHost(info.State.Pid, info.Id) : null;
    if (fromHost !== null) return parseProcessListing(fromHost, this.keepAlivePid);
    const result = await this.exec([TRUSTED_BUSYBOX, "sh", "-c", LIST_PROCESSES_SCRIPT], { user: "0", timeoutMs: 30_000, maxOutputBytes: 4 * 1024 * 1024 });
    if (result.exitCode !== 0 || result.truncated) {
      throw new SandboxError(`listing the processes in container ${this.id} failed (exit ${result.exitCode}${result.truncated ? ", output cut" : ""}): ${result.stderr.slice(-300)}`);
    }
    return parseProcessListing(result.stdout, this.keepAlivePid);
  }

  /**
   * Watches the container's root filesystem from the host (see file-audit.ts) until the audit's
   * stop(). A kill() ends it too; stop() it first, as a report whose container stopped and then
   * restarted, or was removed, cannot be complete.
   */
  async auditFiles(): Promise<FileAudit> {
    this.assertOpen("auditFiles");
    const support = fileAuditSupport(this.container.modem);
    if (support.helper === undefined) throw new FileAuditError(`auditFiles: ${support.reason}`);
    const info = await this.container.inspect().catch((error: unknown) => {
      throw this.failure("inspecting the container", error);
    });
    this.learn(info);
    if (!info.State.Running) throw this.stopped("auditFiles");
    const driver = info.GraphDriver as { Name?: string; Data?: Record<string, string> | null };
    const mergedDir = driver.Name === "overlay2" ? driver.Data?.MergedDir : undefined;
    if (mergedDir === undefined) throw new FileAuditError(`auditFiles: container ${this.id} uses the ${info.GraphDriver.Name} storage driver; file audit needs overlay2`);
    if ((await containerCgroupDir(info.State.Pid, info.Id, "pids").catch(() => null)) === null) {
      throw new FileAuditError(`auditFiles: the processes of container ${this.id} are not visible on this host (the daemon runs in a VM or on another machine)`);
    }
    const { Pid: pid, StartedAt: startedAt } = info.State;
    const audit = await startFileAudit(support.helper, {
      initPid: pid,
      mergedDir,
      checkContainer: async (running) => {
        const now = await this.container.inspect().catch((error: unknown) => {
          if (statusCode(error) === 404) return null;
          throw error;
        });
        if (now === null) return "the container was removed before the audit stopped: whether it restarted meanwhile is unknown";
        if (now.State.StartedAt !== startedAt) return "the container restarted during the audit: its new root filesystem was not watched";
        if (running && !(now.State.Running && now.State.Pid === pid)) return "the container stopped as the audit began";
        return null;
      },
    });
    this.onKill(() => audit.release());
    return audit;
  }

  /**
   * Stops every process (SIGKILL to the container, resolved once it is no longer running), then
   * removes the container in the background: DockerRuntime.drain() waits for that removal and
   * reports a failed one. If the stop itself fails, the removal is done before returning instead.
   */
  kill(): Promise<void> {
    this.closed = true;
    for (const hook of this.killHooks.splice(0)) hook();
    this.killing ??= this.stop().catch((error: unknown) => {
      this.killing = undefined;
      throw error;
    });
    return this.killing;
  }

  /** Set by the runtime: starts the forwarder behind forwardHostSocket (see host-socket.ts). */
  hostSocketForwarder: ((hostSocketPath: string, port: number) => Promise<{ close(): Promise<void> }>) | undefined;

  async forwardHostSocket(hostSocketPath: string, port: number): Promise<{ close(): Promise<void> }> {
    this.assertOpen("forwardHostSocket");
    if (!this.hostSocketForwarder) throw new SandboxError("forwardHostSocket: this sandbox was not created by a DockerRuntime");
    const forwarder = await this.hostSocketForwarder(hostSocketPath, port);
    this.onKill(() => void forwarder.close());
    return forwarder;
  }

  /** Runs `hook` once, at the first kill(). */
  onKill(hook: () => void): void {
    if (this.closed) hook();
    else this.killHooks.push(hook);
  }

  /** Renames the container (the runtime names a pooled sandbox after the trial it is handed to). */
  async rename(name: string): Promise<void> {
    await this.container.rename({ name });
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.kill();
  }

  /**
   * Stops the container for good (SIGKILL, then the daemon's word that it is not running) and keeps
   * it until kill(): download() then reads what only its upper dir holds (a trial's /logs) on this
   * host, with no exec, and falls back to the archive API for the rest.
   */
  async halt(): Promise<void> {
    this.assertOpen("halt");
    try {
      await this.container.kill({ signal: "SIGKILL" }).catch((error: unknown) => {
        if (statusCode(error) !== 409) throw error; // 409: not running already
      });
      await this.container.wait({ condition: "not-running" });
    } catch (error) {
      throw this.failure("stopping the container", error);
    }
    this.initPid = 0;
    this.halted = true;
  }

  private async stop(): Promise<void> {
    // A daemon shutting down (a restart) still answers for a moment: the removal may need it back.
    if (this.halted) {
      this.background(this.removeWhenBack());
      return;
    }
    try {
      await this.container.kill({ signal: "SIGKILL" });
    } catch (error) {
      const code = statusCode(error);
      if (code === 404) return; // already gone
      if (isConnectionError(error)) {
        // The daemon is down (restarting): remove the container once it answers again.
        this.background(this.removeWhenBack());
        return;
      }
      // 409: not running (exited, or being removed); anything else: let remove --force deal with it.
      if (code !== 409) {
        this.logger.debug("SIGKILL to the container failed; removing it at once", { id: this.id, error: daemonMessage(error) });
        await this.remove();
        return;
      }
    }
    this.background(this.removeWhenBack());
  }

  /** Retries the removal while the daemon does not answer, for up to DAEMON_RETURN_MS. */
  private async removeWhenBack(): Promise<void> {
    const until = Date.now() + DAEMON_RETURN_MS;
    for (;;) {
      try {
        return await this.remove();
      } catch (error) {
        if (!isConnectionError((error as { cause?: unknown }).cause ?? error) || Date.now() > until) throw error;
        await new Promise((resolve) => setTimeout(resolve, 1000));
      }
    }
  }

  /** Whether the container stopped because something outside it stopped it (docker stop, a daemon restart), not its own processes. */
  async stoppedExternally(): Promise<boolean> {
    try {
      const info = await this.container.inspect();
      // The keep-alive exits 0 only on SIGTERM (docker stop, daemon shutdown) or at its lifetime.
      return !info.State.Running && info.State.ExitCode === 0 && !info.State.OOMKilled;
    } catch (error) {
      if (isConnectionError(error)) return true;
      return statusCode(error) === 404; // removed from outside
    }
  }

  private async remove(): Promise<void> {
    try {
      await this.container.remove({ force: true, v: true });
      this.logger.debug("removed sandbox", { id: this.id });
    } catch (error) {
      const code = statusCode(error);
      // 404: already gone; 409: the daemon is already removing it.
      if (code === 404 || (code === 409 && /already in progress/i.test(daemonMessage(error)))) return;
      throw new SandboxError(`Removing container ${this.id} failed: ${daemonMessage(error)}`, { cause: error });
    }
  }

  async isRunning(): Promise<boolean> {
    if (this.closed) return false;
    try {
      const info = await this.container.inspect();
      this.learn(info);
      return info.State.Running === true;
    } catch (error) {
      if ((error as { statusCode?: number }).statusCode === 404) return false;
      throw this.failure("inspecting the container", error);
    }
  }

  private assertOpen(operation: string): void {
    if (this.closed) throw new SandboxClosedError(`${operation}: sandbox ${this.id} was killed`);
  }

  /** Resolves a sandbox path against the workdir (absolute paths stay as they are). */
  private resolve(path: string): string {
    return normalizeSandboxPath(path, this.workdir);
  }

  private failure(operation: string, error: unknown): SandboxError {
    if (error instanceof SandboxError) return error;
    if (this.closed) return new SandboxClosedError(`${operation}: sandbox ${this.id} was killed`, { cause: error });
    if (isConnectionError(error)) {
      return new RuntimeUnavailableError(`${operation}: the Docker daemon stopped answering (${daemonMessage(error)}); the trial is retried once it is back`, { cause: error });
    }
    if ((error as { statusCode?: number }).statusCode === 409 && /is not running/.test(daemonMessage(error))) return this.stopped(operation, error);
    return new SandboxError(`${operation} in container ${this.id} failed: ${daemonMessage(error)}`, { cause: error });
  }

  private stopped(operation: string, cause?: unknown): SandboxStoppedError {
    return new SandboxStoppedError(`${operation}: container ${this.id} is no longer running (a process inside it ended its main process, or it ran out of memory)`, { cause });
  }

  /**
   * Whether an exec that ended with `exitCode` never ran because the container had stopped: an
   * exec created while the container still counted as running fails to start once it is not, and
   * the daemon reports that as exit 126 with its message as output, not as an error.
   */
  private async refusedAsStopped(exitCode: number, output: string): Promise<boolean> {
    if (exitCode !== 126) return false;
    return STOPPED_EXEC.test(output) || !(await this.isRunning());
  }

  private async killExecTree(execId: string): Promise<void> {
    try {
      const exec = await this.container.exec({
        Cmd: [TRUSTED_BUSYBOX, "sh", "-c", KILL_TREE_SCRIPT, "proctor-kill", execId],
        AttachStdout: true,
        AttachStderr: true,
        User: "0",
      });
      const stream = await exec.start({ hijack: true, stdin: false });
      let output = "";
      const demux = new FrameDemuxer((_which, chunk) => {
        if (output.length < 4096) output += chunk.toString();
      });
      stream.on("data", (chunk: Buffer) => demux.push(chunk));
      await new Promise<void>((resolve, reject) => {
        stream.once("end", resolve);
        stream.once("close", resolve);
        stream.once("error", reject);
      });
      stream.destroy();
      const code = await this.exitCode(exec);
      if (code !== 0) this.logger.warn("killing an exec's process tree may have failed", { id: this.id, exitCode: code, output });
    } catch (error) {
      if (this.closed) return;
      this.logger.warn("could not kill an exec's process tree", { id: this.id, error: daemonMessage(error) });
    }
  }

  /** The exec's exit code once the daemon reports it finished; -1 when unknown (container gone). */
  private async exitCode(exec: Dockerode.Exec): Promise<number> {
    for (let attempt = 0; attempt < 100; attempt++) {
      let info: Dockerode.ExecInspectInfo;
      try {
        info = await exec.inspect();
      } catch (error) {
        if (statusCode(error) === 404) return -1;
        throw this.failure("inspecting an exec", error);
      }
      if (!info.Running) return typeof info.ExitCode === "number" ? info.ExitCode : -1;
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    this.logger.warn("exec output ended but the daemon still reports it running", { id: this.id });
    return -1;
  }

  /**
   * putArchive into `dir`. When the daemon says `dir` is missing, the same entries go to `/` under
   * `dir`'s path instead (`makeTar(prefix)`): the daemon creates missing parents (root, 0755) like
   * `mkdir -p` as root would, without an exec.
   */
  private async putArchive(dir: string, makeTar: (prefix: string) => Readable, operation: string): Promise<void> {
    // A running container: the trusted busybox's tar through an exec (see tarThroughExec).
    if (await this.untarThroughExec(dir, makeTar, operation)) return;
    try {
      await this.container.putArchive(makeTar(""), { path: dir });
      return;
    } catch (error) {
      if (!isMissingPath(error)) throw this.transferFailure(operation, dir, error);
    }
    const prefix = posix.normalize(dir).replace(/^\/+/, "").replace(/\/+$/, "");
    try {
      await this.container.putArchive(makeTar(prefix), { path: "/" });
    } catch (error) {
      throw this.transferFailure(operation, dir, error);
    }
  }

  /**
   * `source` as a tar stream from the trusted busybox (entries relative to it: a directory's
   * contents, or a file under its own name; links stored, never followed), read with
   * backpressure and cut by extractBounded (which then ends the exec). "missing" when there is no
   * such path, "stopped" when the container cannot run an exec (the caller uses the archive API).
   */
  private async tarThroughExec(source: string, entries: string[], exclude: string[] = []): Promise<"missing" | "stopped" | { extract: (hostDir: string, maxBytes: number, options: DownloadOptions) => Promise<DownloadReport> }> {
    const started = await this.trustedScript(TAR_SCRIPT, [source, ...(exclude.length > 0 ? exclude : entries)], false).catch((error: unknown) => {
      throw this.failure(`download ${source}`, error);
    });
    if (started === "stopped") return "stopped";
    const { exec, stream, execId } = started;
    const archive = new PassThrough();
    let ended = false;
    let kind: Promise<string>;
    let stderr = "";
    {
      let found: (kind: string) => void;
      kind = new Promise((resolve) => (found = resolve));
      // The kind comes first on stdout (stderr is another pipe: no order with it).
      let head: Buffer | null = Buffer.alloc(0);
      let draining = false;
      const demux = new FrameDemuxer((which, chunk) => {
        if (which === "stderr") {
          stderr += chunk.toString("utf8");
          return;
        }
        if (head !== null) {
          head = Buffer.concat([head, chunk]);
          const newline = head.indexOf(10);
          if (newline < 0) {
            if (head.length > 16) found("ENDED");
            return;
          }
          found(head.subarray(0, newline).toString("latin1"));
          chunk = head.subarray(newline + 1);
          head = null;
        }
        // One stream chunk can hold many frames: wait for one drain, not one per frame.
        if (chunk.length > 0 && !archive.write(chunk) && !draining) {
          draining = true;
          stream.pause();
          archive.once("drain", () => {
            draining = false;
            stream.resume();
          });
        }
      });
      stream.on("data", (chunk: Buffer) => demux.push(chunk));
      stream.once("end", () => {
        ended = true;
        archive.end();
        found("ENDED");
      });
      stream.once("error", (error) => archive.destroy(error));
    }
    const stop = () => {
      stream.destroy();
      void this.killExecTree(execId);
    };
    const seen = await kind;
    if (seen !== "DIR" && seen !== "FILE") {
      if (STOPPED_EXEC.test(`${seen}\n${stderr}`) && (await this.refusedAsStopped(await this.exitCode(exec), seen))) return "stopped";
      stop();
      if (seen === "MISSING") return "missing";
      throw new TransferError(`download ${source} failed: ${stderr.trim().slice(-300) || "the trusted tar sent no archive"}`, source);
    }
    return {
      extract: async (hostDir, maxBytes, options) => {
        // extractBounded destroys the archive once its budget is spent: end the tar then.
        archive.once("close", () => {
          if (!ended) stop();
        });
        const report = await extractBounded(archive, hostDir, { strip: 0, maxBytes, links: options.links === true, exclude: entries.length === 0 ? (options.exclude ?? []) : [] });
        if (report.truncated) return report;
        const exitCode = await this.exitCode(exec);
        if (exitCode !== 0) throw new Error(`the trusted tar exited ${exitCode}: ${stderr.trim().slice(-300)}`);
        return report;
      },
    };
  }

  /**
   * Starts `script` under the trusted busybox's sh as root with ($1 busybox, then `args`),
   * attached (stdin too when asked); "stopped" when the container cannot run an exec.
   */
  private async trustedScript(script: string, args: string[], stdin: boolean): Promise<"stopped" | { exec: Dockerode.Exec; stream: Duplex; execId: string }> {
    const execId = randomUUID();
    try {
      const exec = await this.container.exec({
        Cmd: [TRUSTED_BUSYBOX, "sh", "-c", script, "sh", TRUSTED_BUSYBOX, ...args],
        AttachStdin: stdin,
        AttachStdout: true,
        AttachStderr: true,
        Env: [`${EXEC_MARKER}=${execId}`],
        WorkingDir: "/",
        User: "0",
      });
      return { exec, stream: await exec.start({ hijack: true, stdin }), execId };
    } catch (error) {
      if (statusCode(error) === 409) return "stopped"; // "container ... is not running"
      throw error;
    }
  }

  /**
   * Extracts `makeTar("")` into `dir` (made like `mkdir -p` by root) with the trusted busybox's tar
   * fed through an exec's stdin. False when the container cannot run an exec (not running).
   */
  private async untarThroughExec(dir: string, makeTar: (prefix: string) => Readable, operation: string): Promise<boolean> {
    const started = await this.trustedScript(UNTAR_SCRIPT, [dir], true).catch((error: unknown) => {
      throw this.transferFailure(operation, dir, error);
    });
    if (started === "stopped") return false;
    const { exec, stream } = started;
    let output = "";
    const demux = new FrameDemuxer((_, chunk) => {
      if (output.length < 4096) output += chunk.toString("utf8");
    });
    const source = makeTar("");
    try {
      await new Promise<void>((resolve, reject) => {
        stream.on("data", (chunk: Buffer) => demux.push(chunk));
        stream.once("end", resolve);
        stream.once("close", resolve);
        stream.once("error", reject);
        source.once("error", reject);
        source.pipe(stream); // ends our side at the end of the archive: tar sees EOF
      });
    } catch (error) {
      source.destroy();
      stream.destroy();
      throw this.transferFailure(operation, dir, error);
    }
    const exitCode = await this.exitCode(exec);
    if (await this.refusedAsStopped(exitCode, output)) return false;
    if (exitCode !== 0) throw new TransferError(`${operation} (${dir}) failed: the trusted tar exited ${exitCode}: ${output.trim().slice(-300)}`, dir);
    return true;
  }

  private async getArchive(path: string, operation: string): Promise<NodeJS.ReadableStream | null> {
    try {
      return await this.container.getArchive({ path });
    } catch (error) {
      if (isMissingPath(error)) return null;
      throw this.transferFailure(operation, path, error);
    }
  }

  /** "directory", "other" (file, link, ...) or null when the path does not exist. */
  private async pathKind(path: string, operation: string): Promise<"directory" | "other" | null> {
    let response: IncomingMessage;
    try {
      response = (await this.container.infoArchive({ path })) as IncomingMessage;
    } catch (error) {
      if (isMissingPath(error)) return null;
      throw this.transferFailure(operation, path, error);
    }
    response.resume();
    return statKind(response, path, operation);
  }

  private transferFailure(operation: string, path: string, error: unknown): SandboxError {
    if (this.closed || isMissingContainer(error)) return new SandboxClosedError(`${operation}: sandbox ${this.id} is gone`, { cause: error });
    return new TransferError(`${operation} (${path}) failed: ${daemonMessage(error)}`, path, { cause: error });
  }
}

/** "directory" or "other", from the X-Docker-Container-Path-Stat header of an archive response. */
function statKind(response: NodeJS.ReadableStream | IncomingMessage, path: string, operation: string): "directory" | "other" {
  const header = (response as IncomingMessage).headers?.["x-docker-container-path-stat"];
  if (typeof header !== "string") throw new TransferError(`${operation}: the daemon sent no stat for ${path}`, path);
  const stat = JSON.parse(Buffer.from(header, "base64").toString("utf8")) as { mode: number };
  // Go's os.FileMode: the directory bit is 1 << 31.
  return Math.floor(stat.mode / 2 ** 31) % 2 === 1 ? "directory" : "other";
}

type FirstEntry = { kind: "file"; data: Buffer } | { kind: "link"; target: string } | { kind: "other"; type: string };

/** Reads the first entry of a tar stream (the requested path), refusing files above maxBytes. */
function readFirstEntry(archive: NodeJS.ReadableStream, maxBytes: number, path: string): Promise<FirstEntry> {
  return new Promise((resolve, reject) => {
    let done = false;
    const settle = (error: unknown, value?: FirstEntry) => {
      if (done) return;
      done = true;
      (archive as Readable).destroy();
      if (value) resolve(value);
      else reject(error);
    };
    const parser = new tar.Parser({
      onReadEntry: (entry) => {
        if (done) {
          entry.resume();
          return;
        }
        if (entry.type === "SymbolicLink") return settle(null, { kind: "link", target: entry.linkpath ?? "" });
        if (entry.type !== "File" && entry.type !== "OldFile" && entry.type !== "ContiguousFile") {
          return settle(null, { kind: "other", type: entry.type === "Directory" ? "directory" : entry.type });
        }
        if (entry.size > maxBytes) {
          return settle(new TransferError(`readFile: ${path} is ${entry.size} bytes, above the ${maxBytes} byte limit (maxBytes)`, path));
        }
        const chunks: Buffer[] = [];
        entry.on("data", (chunk: Buffer) => chunks.push(chunk));
        entry.on("end", () => settle(null, { kind: "file", data: Buffer.concat(chunks) }));
      },
    });
    parser.on("error", (error: unknown) => settle(new TransferError(`readFile: unreadable archive for ${path}`, path, { cause: error })));
    archive.on("error", (error: unknown) => settle(new TransferError(`readFile ${path} failed: ${daemonMessage(error)}`, path, { cause: error })));
    parser.on("end", () => settle(new TransferError(`readFile: the daemon sent an empty archive for ${path}`, path)));
    archive.pipe(parser as unknown as NodeJS.WritableStream);
  });
}

function toArgv(command: ExecCommand): string[] {
  if ("shell" in command) return ["/bin/sh", "-c", command.shell];
  if (command.length === 0) throw new SandboxError("exec: the command is empty; pass an argv array or { shell: \"...\" }");
  return [...command];
}

function isMissingContainer(error: unknown): boolean {
  return statusCode(error) === 404 && /no such container:/i.test(daemonMessage(error));
}

/** 404 for a path inside a live container ("Could not find the file ..."). */
function isMissingPath(error: unknown): boolean {
  return statusCode(error) === 404 && !isMissingContainer(error);
}

/** An exec's argv for error messages: long scripts are cut, the start says which one it was. */
function describeArgv(argv: readonly string[]): string {
  const text = JSON.stringify(argv);
  return text.length <= 160 ? text : `${text.slice(0, 157)}...`;
}
