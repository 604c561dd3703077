import { spawn, spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { lstatSync, mkdirSync, readFileSync, renameSync, rmSync } from "node:fs";
import { stat } from "node:fs/promises";
import { homedir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { SandboxError, type FileAccess, type FileAudit, type FileAuditProcess, type FileAuditReport } from "@proctor/sandbox";

/**
 * File audit of a running container, from the host: a small C program (helpers/file-audit.c,
 * whose header explains the mechanism) built once per machine with the host's C compiler into
 * ~/.cache/proctor and run as root next to the daemon. It watches the container's root
 * filesystem (the overlay2 superblock; mounts and volumes are not in scope) with fanotify and
 * reports, when stopped, every process it saw and every (process, open|exec|write, path).
 */

/** Thrown when an audit cannot start (the host cannot run it, the container stopped, the helper failed). */
export class FileAuditError extends SandboxError {
  override name = "FileAuditError";
}

const SOURCE = resolve(dirname(fileURLToPath(import.meta.url)), "..", "helpers", "file-audit.c");
const READY_TIMEOUT_MS = 15_000;
/** The helper writes its report as soon as its stdin ends; past this it is killed and the report is lost. */
const STOP_TIMEOUT_MS = 60_000;

/** Where the helper is, or why this host cannot audit. */
export type FileAuditSupport = { helper: string; reason?: undefined } | { helper?: undefined; reason: string };

let hostSupport: FileAuditSupport | undefined;

/**
 * Whether this host can audit containers of the daemon behind `modem` (a local socket): Linux,
 * root, a C compiler to build the helper (once), and a kernel with fanotify permission events
 * (the helper's --probe). Synchronous and cached for the process: capabilities are plain values.
 */
export function fileAuditSupport(modem: unknown): FileAuditSupport {
  const m = (modem ?? {}) as { socketPath?: unknown; host?: unknown };
  if (m.socketPath === undefined || m.host) {
    return { reason: `file audit needs the Docker daemon on this machine (it reads the containers' processes and files from the host); this one is reached at ${String(m.host ?? "an unknown endpoint")}` };
  }
  hostSupport ??= checkHost();
  return hostSupport;
}

function checkHost(): FileAuditSupport {
  if (process.platform !== "linux") return { reason: `file audit needs Linux (fanotify) on the Docker host; this is ${process.platform}` };
  const uid = process.getuid?.() ?? -1;
  if (uid !== 0) return { reason: `file audit needs root on the Docker host (fanotify); Proctor runs as uid ${uid}` };
  let helper: string;
  try {
    helper = buildHelper();
  } catch (error) {
    return { reason: error instanceof Error ? error.message : String(error) };
  }
  const probe = spawnSync(helper, ["--probe"], { encoding: "utf8", timeout: 10_000 });
  if (probe.status !== 0) return { reason: `file audit cannot run on this host: ${firstLine(probe.stderr) || probe.error?.message || `its helper exited ${probe.status}`}` };
  return { helper };
}

/**
 * The helper binary for this source, compiled on first use into the cache. Root runs it, so the
 * directory and the binary must be ours and writable by nobody else.
 */
function buildHelper(): string {
  const source = readFileSync(SOURCE);
  const dir = join(process.env.XDG_CACHE_HOME || join(homedir(), ".cache"), "proctor");
  const binary = join(dir, `file-audit-${createHash("sha256").update(source).digest("hex").slice(0, 16)}`);
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const unsafe = notPrivate(dir, true);
  if (unsafe) throw new Error(`file audit will not build or run its helper in ${dir}: ${unsafe}`);
  if (notPrivate(binary, false) === null) return binary;
  const cc = process.env.CC || "cc";
  const temp = `${binary}.${process.pid}.tmp`;
  const built = spawnSync(cc, ["-O2", "-o", temp, SOURCE], { encoding: "utf8", timeout: 120_000 });
  if ((built.error as NodeJS.ErrnoException | undefined)?.code === "ENOENT") {
    throw new Error(`file audit needs a C compiler on the Docker host to build its helper once: ${cc} was not found (apt-get install gcc libc6-dev, or set CC)`);
  }
  if (built.status !== 0) {
    rmSync(temp, { force: true });
    const why = built.stderr.split("\n").find((line) => /error/i.test(line))?.trim() ?? firstLine(built.stderr) ?? built.error?.message ?? `it exited ${built.status}`;
    throw new Error(`building the file-audit helper with ${cc} failed: ${why}`);
  }
  renameSync(temp, binary);
  return binary;
}

/** Null when `path` is ours (a directory or a regular file, as asked) and not writable by group or others; else what is wrong. */
function notPrivate(path: string, directory: boolean): string | null {
  let info;
  try {
    info = lstatSync(path);
  } catch {
    return "it does not exist";
  }
  if (directory ? !info.isDirectory() : !info.isFile()) return `it is not a ${directory ? "directory" : "regular file"}`;
  if (info.uid !== process.getuid?.()) return `it belongs to uid ${info.uid}`;
  if ((info.mode & 0o022) !== 0) return "other users can write to it";
  return null;
}

function firstLine(text: string | undefined): string | undefined {
  return text?.split("\n").find((line) => line.trim() !== "")?.trim();
}

export interface AuditTarget {
  /** Host pid of the container's init (its /proc/<pid>/root is the root filesystem to watch). */
  initPid: number;
  /** The overlay's merged dir on this host: the helper must have marked that very filesystem. */
  mergedDir: string;
  /**
   * Null when the container is still the one the audit started on (not restarted; `running`:
   * and running with the same init), else a problem for the report.
   */
  checkContainer(running: boolean): Promise<string | null>;
}

/** Starts the helper on `target`; resolves once it watches (every exec and open from then on is seen). */
export async function startFileAudit(helper: string, target: AuditTarget): Promise<FileAudit & { release(): void }> {
  const started = performance.now();
  const child = spawn(helper, [String(target.initPid)], { stdio: ["pipe", "pipe", "pipe"] });
  const out: Buffer[] = [];
  let outBytes = 0;
  let stderr = "";
  let readyLine: (line: string) => void = () => undefined;
  const ready = new Promise<string>((resolve) => (readyLine = resolve));
  child.stdout.on("data", (chunk: Buffer) => {
    out.push(chunk);
    outBytes += chunk.length;
    const all = outBytes < 4096 ? Buffer.concat(out) : null;
    const newline = all?.indexOf(10) ?? -1;
    if (all && newline >= 0) {
      readyLine(all.subarray(0, newline).toString("utf8"));
      readyLine = () => undefined;
    }
  });
  child.stderr.on("data", (chunk: Buffer) => {
    if (stderr.length < 4096) stderr += chunk.toString("utf8");
  });
  child.stdin.on("error", () => undefined); // EPIPE when the helper is gone: its exit says why
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null; error?: Error }>((resolve) => {
    child.once("error", (error) => resolve({ code: null, signal: null, error }));
    child.once("close", (code, signal) => resolve({ code, signal }));
  });
  const fail = async (message: string): Promise<never> => {
    child.kill("SIGKILL");
    await exited;
    throw new FileAuditError(message);
  };

  let timer: NodeJS.Timeout | undefined;
  const first = await Promise.race([
    ready,
    exited.then((end) => end),
    new Promise<"timeout">((resolve) => (timer = setTimeout(() => resolve("timeout"), READY_TIMEOUT_MS))),
  ]);
  clearTimeout(timer);
  if (first === "timeout") return fail(`the file-audit helper did not start watching within ${READY_TIMEOUT_MS / 1000} s`);
  if (typeof first !== "string") {
    const why = firstLine(stderr) ?? first.error?.message ?? (first.signal ? `killed by ${first.signal}` : `exit ${first.code}`);
    throw new FileAuditError(`the file audit could not start: ${why}`);
  }
  const [word, dev] = first.split(" ");
  if (word !== "ready" || dev === undefined) return fail(`the file-audit helper said ${JSON.stringify(first)} instead of ready`);
  const merged = await stat(target.mergedDir, { bigint: true }).catch(() => null);
  if (merged === null || merged.dev !== BigInt(dev)) {
    return fail(`the file audit watched another filesystem than the container's root (${target.mergedDir}): the container stopped or restarted as the audit began`);
  }
  const wrong = await target.checkContainer(true).catch((error: unknown) => `could not check the container: ${error instanceof Error ? error.message : String(error)}`);
  if (wrong !== null) return fail(`the file audit could not start: ${wrong}`);
  // Drop the ready line: the rest of stdout is the report, written at stop.
  const head = Buffer.concat(out);
  out.length = 0;
  out.push(head.subarray(head.indexOf(10) + 1));

  let stopping: Promise<FileAuditReport> | undefined;
  const release = () => child.stdin.end(); // EOF is the helper's stop signal
  const stop = (): Promise<FileAuditReport> => {
    stopping ??= (async () => {
      release();
      const killer = setTimeout(() => child.kill("SIGKILL"), STOP_TIMEOUT_MS);
      const end = await exited;
      clearTimeout(killer);
      const durationMs = performance.now() - started;
      const parsed = end.code === 0 ? parseReport(Buffer.concat(out).toString("utf8"), target.mergedDir) : null;
      const problems: string[] = [];
      if (parsed === null) {
        const why = end.signal ? `was killed (${end.signal})` : end.code === 0 ? "wrote an unreadable report" : `failed (exit ${end.code}${firstLine(stderr) ? `: ${firstLine(stderr)}` : ""})`;
        problems.push(`the file-audit helper ${why} before its report: nothing it saw is known`);
      }
      const counts = parsed?.counts ?? { events: 0, unnamed: 0, ambiguous: 0, overflows: 0 };
      if (counts.overflows > 0) problems.push(`the kernel's event queue overflowed ${counts.overflows} time(s): events were dropped`);
      if (counts.unnamed > 0) problems.push(`${counts.unnamed} event(s) could not be named: the kernel could not open their file for the audit`);
      const wrong = await target.checkContainer(false).catch((error: unknown) => `could not check whether the container restarted during the audit: ${error instanceof Error ? error.message : String(error)}`);
      if (wrong !== null) problems.push(wrong);
      return {
        processes: parsed?.processes ?? [],
        accesses: parsed?.accesses ?? [],
        complete: problems.length === 0,
        problems,
        counts,
        durationMs,
      };
    })();
    return stopping;
  };
  return {
    stop,
    release,
    async [Symbol.asyncDispose]() {
      await stop();
    },
  };
}

const ORIGINS = { b: "before", n: "new", g: "gone" } as const;
const KINDS = { o: "open", x: "exec", w: "write" } as const;

/**
 * The helper's report (see helpers/file-audit.c), or null when it is cut or malformed. A file
 * opened through a mount the container does not have (a host process: the daemon copying files
 * or resolving an exec's user) is named by its host path, marked "@": under `mergedDir` it
 * becomes the sandbox path it is.
 */
export function parseReport(text: string, mergedDir: string): Pick<FileAuditReport, "processes" | "accesses" | "counts"> | null {
  const processes: FileAuditProcess[] = [];
  const accesses: FileAccess[] = [];
  const merged = `${mergedDir.replace(/\/+$/, "")}/`;
  let counts: FileAuditReport["counts"] | null = null;
  for (const line of text.split("\n")) {
    const f = line.split(" ");
    if (f[0] === "P" && f.length === 9) {
      const origin = ORIGINS[f[4] as keyof typeof ORIGINS];
      if (origin === undefined) return null;
      processes.push({
        id: Number(f[1]),
        pid: Number(f[2]),
        containerPid: optional(f[3]),
        origin,
        ppid: optional(f[5]),
        parentId: optional(f[6]),
        orphaned: f[7] === "1",
        executable: f[8] === "-" ? null : unescapePath(f[8] as string),
      });
    } else if (f[0] === "A" && f.length === 4) {
      const kind = KINDS[f[1] as keyof typeof KINDS];
      if (kind === undefined) return null;
      let path = unescapePath(f[3] as string);
      if (path.startsWith("@")) path = path.startsWith(merged, 1) ? path.slice(merged.length) : path.slice(1);
      accesses.push({ path, processId: Number(f[2]), kind });
    } else if (f[0] === "C" && f.length === 5) {
      const [events, unnamed, ambiguous, overflows] = f.slice(1).map(Number) as [number, number, number, number];
      counts = { events, unnamed, ambiguous, overflows };
    } else if (line === "END") {
      return counts === null ? null : { processes, accesses, counts };
    } else {
      return null;
    }
  }
  return null; // no END: cut
}

function optional(field: string | undefined): number | null {
  return field === undefined || field === "-" ? null : Number(field);
}

/** The helper escapes bytes <= 0x20, 0x7f and '%' as %XX (ASCII only: the rest is UTF-8 as it came). */
function unescapePath(text: string): string {
  return text.replace(/%([0-9A-F]{2})/g, (_, hex: string) => String.fromCharCode(Number.parseInt(hex, 16)));
}
