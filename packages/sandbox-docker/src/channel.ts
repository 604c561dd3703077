import { execFile } from "node:child_process";
import { close as closeCallback, constants, open as openCallback, readdirSync, rmdirSync, unlinkSync } from "node:fs";
import { unlink, writeFile } from "node:fs/promises";
import { Socket } from "node:net";
import { join } from "node:path";
import { promisify } from "node:util";
import { OutputCollector, buildExecResult, makeOwnedTempDir, removeTreeWithoutStat, type ExecOptions, type ExecResult } from "@proctor/sandbox";
import type { Logger } from "@proctor/schema";
import { EXEC_MARKER } from "./kill-tree";
import { TRUSTED_BUSYBOX } from "./toolchain";

/**
 * The resident exec channel: the container's keep-alive (the trusted busybox sh, see runtime.ts)
 * also serves exec requests over FIFOs in a host directory bind-mounted read-only at
 * CHANNEL_DIR, so an exec costs a few forks inside the container instead of a `docker exec`
 * (runc exec, ~60 ms). Per request the host writes a script `r.<seq>` (the exec's cwd, env and
 * argv, shell-quoted) and a line `x <seq> <lane>` to `ctl`; the keep-alive forks a wrapper that
 * runs the script with `setsid` (a session and process group of its own) with stdout/stderr on
 * the lane's FIFOs `o<lane>` / `e<lane>`, and writes the command's pid and then its exit status
 * on `w<lane>`. The keep-alive holds `live` open for writing: its end (EOF) tells the host at
 * once that the channel is gone.
 *
 * Trust: the agent is root in the same container. It can read these FIFOs (steal requests),
 * write to them (forge output and exit codes) or stop the keep-alive. It cannot create, replace
 * or remove files in the directory (a read-only mount; remounting needs CAP_SYS_ADMIN), and the
 * host never opens a path there that it did not create, without O_NOFOLLOW. So the channel is
 * only as trustworthy as the agent: DockerSandbox sends an exec through it only when the caller
 * gives no `user`. Proctor's own execs (the verifier, reward reads, process listings, tamper
 * checks) all pass `user` (the sandbox's adminUser) and always go through `docker exec`.
 */
export const CHANNEL_DIR = "/.proctor-channel";
/** Start of a channel directory's name in the host's temp dir (see @proctor/sandbox ownedTempPrefix). */
export const CHANNEL_TEMP_PREFIX = "proctor-channel-";
/** Concurrent channel execs per sandbox; more fall back to `docker exec`. */
const LANES = 32;
/** A request the keep-alive has not picked up within this long means the channel is stuck (stopped, or its requests stolen). */
const DEFAULT_START_TIMEOUT_MS = 10_000;
/** How long to wait for the output FIFOs to close after the process tree was killed. */
const KILL_GRACE_MS = 5000;

const openFd = promisify(openCallback);
const execFileAsync = promisify(execFile);

/**
 * The keep-alive's request loop (POSIX sh for the trusted busybox), sourced by the entrypoint with
 * `$3` = CHANNEL_DIR, fds 3 (ctl, read) and 5 (live, write) open. `x <seq> <lane>` runs a
 * request; `k <pgid>` kills a process group. Anything malformed is ignored. The lifetime ($2) is
 * checked when the loop is idle and every 64 requests; a ctl whose writer is gone (the host
 * died) returns at once, so two empty reads in the same second sleep a second.
 */
export const CHANNEL_LOOP = `D="$3"; B=${TRUSTED_BUSYBOX}; last=0; n=0
while :; do
  if read -t 5 -r op a b <&3; then
    n=$((n + 1))
    case "$op" in
      x) case "$a" in ''|*[!0-9]*) continue ;; esac
         case "$b" in ''|*[!0-9]*) continue ;; esac
         [ -f "$D/r.$a" ] || continue
         { exec 6>"$D/w$b" || exit 1
           $B setsid $B sh "$D/r.$a" >"$D/o$b" 2>"$D/e$b" 6>&- &
           p=$!; echo "$p" >&6; wait "$p"; echo "$?" >&6
         } 3<&- 5>&- </dev/null &
         ;;
      k) case "$a" in ''|*[!0-9]*) continue ;; esac
         kill -KILL -- "-$a" 2>/dev/null; kill -KILL "$a" 2>/dev/null ;;
    esac
    [ $((n % 64)) = 0 ] || continue
  fi
  now=$(date +%s)
  if [ "$2" != 0 ] && [ "$now" -ge "$2" ]; then echo "proctor: the sandbox reached its lifetime; stopping" >&2; exit 0; fi
  [ "$now" = "$last" ] && sleep 1
  last=$now
done`;

/** What the channel needs from its sandbox. */
export interface ChannelHost {
  /** Kill every process carrying the exec's marker and their sessions (through `docker exec`). */
  killTree(execId: string): Promise<void>;
  /** Whether the container still runs (to tell a stopped sandbox from a dead channel). */
  isRunning(): Promise<boolean>;
}

interface Lane {
  index: number;
}

type State = "starting" | "ready" | "dead";

/** `'...'` for sh, safe for any string without NUL. */
function quote(value: string): string {
  return `'${value.replace(/'/g, `'\\''`)}'`;
}

const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

/**
 * The script a request runs (by the trusted busybox sh, in a new session): cd, env, then exec
 * of the argv with stdin from a file or /dev/null. Null when the request cannot be expressed
 * safely (a NUL byte, an env name sh cannot export): such an exec goes through `docker exec`.
 */
export function requestScript(argv: readonly string[], cwd: string, env: Record<string, string>, stdinPath: string | null): string | null {
  const all = [...argv, cwd, ...Object.keys(env), ...Object.values(env)];
  if (all.some((s) => s.includes("\0"))) return null;
  if (Object.keys(env).some((name) => !ENV_NAME.test(name))) return null;
  const lines = [`cd -- ${quote(cwd)} || exit 126`];
  for (const [name, value] of Object.entries(env)) lines.push(`export ${name}=${quote(value)}`);
  lines.push(`exec ${argv.map(quote).join(" ")} <${stdinPath === null ? "/dev/null" : quote(stdinPath)}`);
  return `${lines.join("\n")}\n`;
}

/** Reads a FIFO until every writer closed it; the read end is wrapped in a net.Socket (epoll, no threadpool). */
async function openFifoReader(path: string): Promise<Fifo> {
  const fd = await openFd(path, constants.O_RDONLY | constants.O_NONBLOCK | constants.O_NOFOLLOW);
  // A writer of our own until the job's writer is in, so the reader does not see EOF before it.
  let dummy: number;
  try {
    dummy = await openFd(path, constants.O_WRONLY | constants.O_NONBLOCK | constants.O_NOFOLLOW);
  } catch (error) {
    await closeFd(fd);
    throw error;
  }
  return { socket: new Socket({ fd, readable: true, writable: false }), dummy };
}

/** Closes an fd we opened; callers mark it closed (-1) so it is never closed twice. */
function closeFd(fd: number): Promise<void> {
  if (fd < 0) return Promise.resolve();
  return new Promise((resolve) => closeCallback(fd, () => resolve()));
}

/** Resolves once the socket ended or closed (errors count as closed). */
function whenClosed(socket: Socket): Promise<void> {
  return new Promise((resolve) => {
    if (socket.destroyed || socket.readableEnded) return resolve();
    socket.once("end", resolve);
    socket.once("close", resolve);
    socket.once("error", () => resolve());
  });
}

const FIFO_NAMES = ["ctl", "live", ...Array.from({ length: LANES }, (_, i) => [`o${i}`, `e${i}`, `w${i}`]).flat()];
/**
 * Channel directories are made this many at a time: Node has no mkfifo(3), and starting the
 * mkfifo process costs this process ~15 ms of CPU (a fork of all of Node), its FIFOs microseconds.
 */
const CHANNEL_DIR_BATCH = 8;
/** Directories made ahead and not handed out yet; removed when this process exits (the watchdog and `proctor gc` remove those of a killed one). */
const spareDirs: string[] = [];
let restocking: Promise<void> | null = null;
let removingSparesOnExit = false;

/** A fresh channel directory holding its FIFOs (`FIFO_NAMES`, mode 0600), for one sandbox only. */
export async function takeChannelDir(): Promise<string> {
  for (;;) {
    const dir = spareDirs.pop();
    if (dir !== undefined) return dir;
    restocking ??= makeChannelDirs(CHANNEL_DIR_BATCH).finally(() => (restocking = null));
    await restocking;
  }
}

async function makeChannelDirs(count: number): Promise<void> {
  const dirs = await Promise.all(Array.from({ length: count }, () => makeOwnedTempDir(CHANNEL_TEMP_PREFIX)));
  try {
    await execFileAsync("mkfifo", ["-m", "0600", ...dirs.flatMap((dir) => FIFO_NAMES.map((name) => join(dir, name)))]);
  } catch (error) {
    await Promise.all(dirs.map((dir) => removeTreeWithoutStat(dir)));
    throw error;
  }
  if (!removingSparesOnExit) {
    removingSparesOnExit = true;
    process.once("exit", removeSpareDirsSync);
  }
  spareDirs.push(...dirs);
}

function removeSpareDirsSync(): void {
  for (const dir of spareDirs.splice(0)) {
    try {
      // Without stat calls (see removeTreeWithoutStat): the dir holds only the FIFOs made here.
      for (const name of readdirSync(dir)) unlinkSync(join(dir, name));
      rmdirSync(dir);
    } catch {
      // Left for the watchdog or `proctor gc`: this process is exiting.
    }
  }
}

/**
 * The host side of one sandbox's exec channel. `create()` makes the directory and its FIFOs;
 * `arm()` opens the host's ends before the container (re)starts; `started(ok)` is told whether
 * the keep-alive reported the channel in its ready line. `exec()` returns null whenever the
 * channel cannot take a request (not ready, dead, no free lane): the caller uses `docker exec`.
 */
export class ExecChannel {
  private state: State = "starting";
  /** close() was called: nothing may be opened after it (see arm). */
  private closed = false;
  private ctl: Socket | undefined;
  private live: Fifo | undefined;
  private readonly free: Lane[] = [];
  private seq = 0;
  /** Output sockets of lanes a leftover process still writes to (see linger). */
  private readonly lingering = new Set<Socket[]>();
  /** Execs in flight: each is told when the channel dies. */
  private readonly inFlight = new Set<(error: Error) => void>();

  private constructor(
    readonly hostDir: string,
    private readonly logger: Logger,
    private readonly startTimeoutMs: number,
  ) {
    for (let i = LANES - 1; i >= 0; i--) this.free.push({ index: i });
  }

  /** A channel directory with its FIFOs, or null (logged) when FIFOs cannot be made here. */
  static async create(logger: Logger, options: { startTimeoutMs?: number } = {}): Promise<ExecChannel | null> {
    let dir: string;
    try {
      dir = await takeChannelDir();
    } catch (error) {
      logger.warn("the exec channel is off: mkfifo failed on this host; execs use docker exec", { error: error instanceof Error ? error.message : String(error) });
      return null;
    }
    return new ExecChannel(dir, logger, options.startTimeoutMs ?? DEFAULT_START_TIMEOUT_MS);
  }

  /**
   * The bind mount for the container (read-only: a process inside cannot replace the FIFOs);
   * `daemonHostDir` is where the daemon's host has the directory (see DaemonPaths).
   */
  bind(daemonHostDir: string = this.hostDir): string {
    return `${daemonHostDir}:${CHANNEL_DIR}:ro`;
  }

  get ready(): boolean {
    return this.state === "ready";
  }

  /** Opens the host's ends of ctl and live; call before each start of the container. */
  async arm(): Promise<void> {
    this.closeEnds();
    this.state = "starting";
    // O_RDWR: never blocks, and the keep-alive's read of ctl does not see EOF while we hold it.
    const ctlFd = await openFd(join(this.hostDir, "ctl"), constants.O_RDWR | constants.O_NONBLOCK | constants.O_NOFOLLOW);
    this.ctl = new Socket({ fd: ctlFd, readable: false, writable: true });
    this.ctl.on("error", (error) => this.die(`writing a request failed: ${error.message}`));
    let live: Fifo;
    try {
      live = await openFifoReader(join(this.hostDir, "live"));
    } catch (error) {
      this.closeEnds();
      throw error;
    }
    if (this.closed) {
      // Closed while it opened (the sandbox was killed during a restart): a reader kept now would
      // never see EOF (it holds its own writer) and would keep this process alive.
      live.socket.destroy();
      await closeFd(live.dummy);
      this.closeEnds();
      return;
    }
    this.live = live;
    live.socket.resume();
    live.socket.once("end", () => {
      if (this.live === live) this.die("the keep-alive is gone (the container stopped or restarts)");
    });
    live.socket.on("error", () => undefined);
  }

  /** The keep-alive reported READY; `ok` when it opened the channel (the bind mount works). */
  async started(ok: boolean): Promise<void> {
    if (!ok) {
      this.die("the container did not find the channel directory (a remote daemon, or user namespaces)");
      return;
    }
    const live = this.live;
    if (live) {
      // The keep-alive holds live now; EOF means it is gone.
      await closeFd(live.dummy);
      live.dummy = -1;
    }
    if (this.state === "starting") this.state = "ready";
  }

  /** Marks the channel dead: new execs use docker exec; execs in flight are told. */
  die(reason: string): void {
    if (this.state === "dead") return;
    this.state = "dead";
    this.logger.debug("exec channel closed; execs use docker exec", { reason });
    const error = new Error(reason);
    for (const tell of [...this.inFlight]) tell(error);
  }

  /** Closes the host's ends and removes the directory. Safe to call twice. */
  async close(): Promise<void> {
    this.closed = true;
    this.die("the sandbox was killed");
    this.closeEnds();
    // Not fs.rm: it stats each FIFO, which breaks require() in this process (see removeTreeWithoutStat).
    await removeTreeWithoutStat(this.hostDir).catch((error: unknown) =>
      this.logger.warn("could not remove the exec channel's directory; `proctor gc` removes it once this process is gone", { dir: this.hostDir, error: error instanceof Error ? error.message : String(error) }),
    );
  }

  private closeEnds(): void {
    // Their lanes come back through linger's handler (unless the channel is dead).
    for (const sockets of this.lingering) for (const socket of sockets) socket.destroy();
    this.ctl?.destroy();
    this.ctl = undefined;
    if (this.live) {
      const live = this.live;
      this.live = undefined;
      live.socket.destroy();
      void closeFd(live.dummy);
      live.dummy = -1;
    }
  }

  /**
   * Runs `argv` through the channel; null when the channel cannot take it (the caller falls back
   * to `docker exec`, and nothing ran). Mirrors `docker exec`: the result comes once the command
   * exited and every process holding its stdout/stderr closed them.
   */
  async exec(argv: readonly string[], options: ExecOptions, cwd: string, execId: string, host: ChannelHost): Promise<ExecResult | null> {
    if (this.state !== "ready" || !this.ctl) return null;
    const lane = this.free.pop();
    if (!lane) return null;
    const seq = ++this.seq;
    const scriptPath = join(this.hostDir, `r.${seq}`);
    const stdinPath = options.stdin === undefined ? null : join(this.hostDir, `i.${seq}`);
    const script = requestScript(argv, cwd, { ...options.env, [EXEC_MARKER]: execId }, stdinPath === null ? null : `${CHANNEL_DIR}/i.${seq}`);
    if (script === null) {
      this.free.push(lane);
      return null;
    }
    let outcome: "free" | "linger" | "lost" = "lost";
    const files = [scriptPath, ...(stdinPath ? [stdinPath] : [])];
    const opened: Fifo[] = [];
    let ordered: [Fifo, Fifo, Fifo] | undefined;
    try {
      // All at once: each is a threadpool round trip. Settled, not Promise.all: when one fails
      // (the sandbox was killed and its directory removed meanwhile), the opens still in flight
      // must land in `opened` before the cleanup below, or their FIFOs stay open for good and
      // keep this process from exiting.
      const [, , ...fifos] = await Promise.allSettled([
        stdinPath && options.stdin !== undefined ? writeFile(stdinPath, options.stdin, { mode: 0o644 }) : undefined,
        writeFile(scriptPath, script, { mode: 0o644 }),
        ...[`w${lane.index}`, `o${lane.index}`, `e${lane.index}`].map((name) =>
          openFifoReader(join(this.hostDir, name)).then((fifo) => {
            opened.push(fifo);
            return fifo;
          }),
        ),
      ]).then((settled) => {
        const failed = settled.find((s) => s.status === "rejected");
        if (failed) throw failed.reason;
        return settled.map((s) => (s as PromiseFulfilledResult<unknown>).value);
      });
      ordered = fifos as [Fifo, Fifo, Fifo];
      const result = await this.run(seq, lane, ordered, options, execId, host);
      if (result === null) return null;
      outcome = result.reusable ? "free" : "linger";
      return result.result;
    } finally {
      for (const fifo of opened) {
        await closeFd(fifo.dummy);
        fifo.dummy = -1;
      }
      for (const file of files) await unlink(file).catch(() => undefined);
      if (outcome === "linger" && ordered) this.linger(lane, ordered);
      else {
        for (const fifo of opened) fifo.socket.destroy();
        if (outcome === "free") this.free.push(lane);
      }
    }
  }

  /**
   * A process the command left behind still holds the lane's output: the lane is not reused
   * (its writes would land in a later exec) until that output closes; meanwhile it is read and
   * thrown away, so the writer never blocks on a full pipe.
   */
  private linger(lane: Lane, [status, out, err]: [Fifo, Fifo, Fifo]): void {
    status.socket.destroy();
    for (const fifo of [out, err]) {
      fifo.socket.removeAllListeners("data");
      fifo.socket.resume();
    }
    const sockets = [out.socket, err.socket];
    this.lingering.add(sockets);
    void Promise.all(sockets.map(whenClosed)).then(() => {
      for (const socket of sockets) socket.destroy();
      if (this.lingering.delete(sockets) && this.state !== "dead") this.free.push(lane);
    });
  }

  private async run(seq: number, lane: Lane, [status, out, err]: [Fifo, Fifo, Fifo], options: ExecOptions, execId: string, host: ChannelHost): Promise<{ result: ExecResult; reusable: boolean } | null> {
    const started = performance.now();
    const stdout = new OutputCollector(options.maxOutputBytes);
    const stderr = new OutputCollector(options.maxOutputBytes);
    let timedOut = false;
    let aborted = false;
    let callbackError: unknown;
    let pid = 0;
    let exitCode: number | null = null;
    let statusText = "";

    let killed: Promise<void> | undefined;
    let killRequested!: () => void;
    const whenKillRequested = new Promise<void>((resolve) => (killRequested = resolve));
    const killTree = (): Promise<void> => {
      if (!killed) {
        // The keep-alive kills the process group at once; the marker sweep (docker exec) gets
        // whatever left the group or the session.
        if (pid > 0) this.ctl?.write(`k ${pid}\n`);
        killed = host.killTree(execId);
        killRequested();
      }
      return killed;
    };
    let chunks = 0;
    const feed = (collector: OutputCollector, callback: ((chunk: Buffer) => void) | undefined) => (chunk: Buffer) => {
      chunks++;
      if (callbackError !== undefined) return;
      try {
        collector.push(chunk);
        callback?.(chunk);
      } catch (error) {
        callbackError = error; // a throwing callback stops the command; rethrown below
        void killTree();
      }
    };
    out.socket.on("data", feed(stdout, options.onStdout));
    err.socket.on("data", feed(stderr, options.onStderr));
    out.socket.on("error", () => undefined);
    err.socket.on("error", () => undefined);

    // The status FIFO: the pid, then the exit status; its EOF without a status means the wrapper died.
    let onPid!: () => void;
    const pidSeen = new Promise<void>((resolve) => (onPid = resolve));
    const statusEnded = new Promise<void>((resolve) => {
      status.socket.on("data", (chunk: Buffer) => {
        if (statusText.length > 256) return; // garbage from a process in the sandbox
        statusText += chunk.toString("latin1");
        const lines = statusText.split("\n");
        if (pid === 0 && lines.length > 1) {
          pid = Number(lines[0]) || -1;
          onPid();
        }
        if (exitCode === null && lines.length > 2) {
          const code = Number(lines[1]);
          exitCode = Number.isInteger(code) ? code : -1;
          // The command has exited: its output writers are in, drop ours so EOF can come.
          for (const fifo of [out, err]) {
            void closeFd(fifo.dummy);
            fifo.dummy = -1;
          }
        }
      });
      status.socket.once("end", resolve);
      status.socket.once("close", resolve);
      status.socket.on("error", () => resolve());
    });

    let channelError: Error | undefined;
    let onChannelDeath!: () => void;
    const channelDied = new Promise<void>((resolve) => (onChannelDeath = resolve));
    const tell = (error: Error) => {
      channelError = error;
      onChannelDeath();
    };
    this.inFlight.add(tell);
    try {
      if (options.signal?.aborted) {
        aborted = true;
        return { result: buildExecResult({ exitCode: -1, stdout, stderr, timedOut, aborted, durationMs: performance.now() - started }), reusable: true };
      }
      this.ctl?.write(`x ${seq} ${lane.index}\n`);
      // Picked up (pid written), or not within startTimeoutMs: the channel is stuck, and the exec
      // goes to docker exec. The script is removed first, so a late pick-up runs nothing.
      let startTimer: NodeJS.Timeout | undefined;
      const pickedUp = await Promise.race([
        pidSeen.then(() => true),
        channelDied.then(() => false),
        new Promise<boolean>((resolve) => (startTimer = setTimeout(() => resolve(false), this.startTimeoutMs))),
      ]);
      clearTimeout(startTimer);
      if (!pickedUp) {
        await unlink(join(this.hostDir, `r.${seq}`)).catch(() => undefined);
        this.die(channelError?.message ?? `the keep-alive did not pick up a request within ${this.startTimeoutMs} ms (stopped, or its requests were read by another process)`);
        return null;
      }
      // The wrapper holds the status FIFO now.
      if (status.dummy >= 0) {
        void closeFd(status.dummy);
        status.dummy = -1;
      }

      const timer = options.timeoutMs === undefined ? undefined : setTimeout(() => {
        timedOut = true;
        void killTree();
      }, options.timeoutMs);
      const onAbort = () => {
        aborted = true;
        void killTree();
      };
      options.signal?.addEventListener("abort", onAbort, { once: true });
      let graceTimer: NodeJS.Timeout | undefined;
      let reusable = true;
      try {
        const outputsClosed = Promise.all([whenClosed(out.socket), whenClosed(err.socket)]);
        await Promise.race([
          statusEnded,
          channelDied,
          // After a kill, a wrapper that cannot report (stopped by a process in the sandbox) is not waited for.
          whenKillRequested.then(() => killed).then(() => new Promise<void>((resolve) => (graceTimer = setTimeout(resolve, KILL_GRACE_MS)))),
        ]);
        clearTimeout(graceTimer);
        if (exitCode === null) {
          // The wrapper died without a status (the container stopped, or a process killed it):
          // like a docker exec cut off by a stopped container, the exit code is unknown.
          // A daemon that stopped answering fails the exec (RuntimeUnavailableError), as docker exec's inspect would.
          if (await host.isRunning()) void killTree();
          exitCode = -1;
          for (const fifo of [out, err]) if (fifo.dummy >= 0) {
            void closeFd(fifo.dummy);
            fifo.dummy = -1;
          }
        }
        // Like docker exec: the command has exited; its output is complete once every writer closed
        // it, or, when a process it left in the background still holds it, once what the command
        // wrote has been read (nothing new across a timer and a poll phase).
        const quiet = new Promise<boolean>((resolve) => {
          let seen = -1;
          const tick = () => {
            if (chunks === seen) return resolve(false);
            seen = chunks;
            graceTimer = setTimeout(() => setImmediate(tick), 10);
          };
          tick();
        });
        reusable = await Promise.race([outputsClosed.then(() => true), quiet]);
      } finally {
        clearTimeout(timer);
        clearTimeout(graceTimer);
        options.signal?.removeEventListener("abort", onAbort);
      }
      if (killed) await killed;
      if (callbackError !== undefined) throw callbackError;
      return { result: buildExecResult({ exitCode: exitCode ?? -1, stdout, stderr, timedOut, aborted, durationMs: performance.now() - started }), reusable };
    } finally {
      this.inFlight.delete(tell);
    }
  }
}

interface Fifo {
  socket: Socket;
  /** Our own writer fd, -1 once closed. */
  dummy: number;
}
