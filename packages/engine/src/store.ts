import { existsSync, readFileSync, unlinkSync } from "node:fs";
import { link, mkdir, readFile, rename, rm, rmdir, unlink, writeFile } from "node:fs/promises";
import { randomBytes } from "node:crypto";
import { hostname } from "node:os";
import { dirname, join, resolve } from "node:path";
import { RunConfig } from "@proctor/schema";
import type { StoredRunConfig } from "./config";
import { RunDirectoryError, RunLockedError } from "./errors";

export { writeJsonAtomic } from "@proctor/events";

/** Runs async jobs one after another (file writes from trials finishing at once). */
export class SerialQueue {
  private tail: Promise<unknown> = Promise.resolve();

  run<T>(job: () => Promise<T>): Promise<T> {
    const next = this.tail.then(job, job);
    this.tail = next.catch(() => undefined);
    return next;
  }
}

/** A run directory's run.json, checked against the schema. Throws RunDirectoryError naming what is wrong. */
export async function readRunConfig(runDir: string): Promise<StoredRunConfig> {
  const file = join(runDir, "run.json");
  let text: string;
  try {
    text = await readFile(file, "utf8");
  } catch (error) {
    throw new RunDirectoryError(`${runDir} is not a run directory: cannot read ${file} (${(error as Error).message})`, runDir, { cause: error });
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (error) {
    throw new RunDirectoryError(`${file} is not valid JSON`, runDir, { cause: error });
  }
  const parsed = RunConfig.extend({ configHash: RunConfig.shape.runId }).safeParse(json);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    throw new RunDirectoryError(`${file}: not a run.json this version understands (${issue?.path.join(".") || "(root)"}: ${issue?.message})`, runDir);
  }
  return parsed.data;
}

/** The lock file in a run directory: who writes the directory now (pid, its start time, host). */
export const RUN_LOCK_FILE = "run.lock";

/** What a run directory's lock file records about the process holding it. */
export interface RunLockOwner {
  pid: number;
  /** The kernel's start time of `pid` (clock ticks since boot; null where /proc is not there), so a later process reusing the pid is not taken for it. */
  startTime: string | null;
  host: string;
  /** When the lock was taken (ISO time). */
  since: string;
}

/** A run directory's lock, held while one process writes the directory (a run or a resume). */
export interface RunDirLock {
  readonly runDir: string;
  /**
   * The topmost directory taking the lock created (the run directory, or a runs root above it
   * that did not exist either); null when the run directory was there already.
   */
  readonly created: string | null;
  /**
   * Let the lock go (idempotent). A lock whose process dies, even by kill -9, is not stuck: the
   * next taker sees its owner is gone. With `discardUnstarted`, a run that never started here (no
   * run.json) leaves nothing: the directories taking the lock created are removed first.
   */
  release(options?: { discardUnstarted?: boolean }): Promise<void>;
}

/** Locks held by this process, let go when it exits (process.exit on a second Ctrl-C included). */
const heldLocks = new Map<string, string>();
let exitHookInstalled = false;

function releaseHeldLocksSync(): void {
  for (const [file, content] of heldLocks) {
    try {
      if (readFileSync(file, "utf8") === content) unlinkSync(file);
    } catch {
      // already gone
    }
  }
  heldLocks.clear();
}

/** /proc/<pid>/stat's state and start time; null without /proc or when the process is gone. */
function procStat(pid: number): { state: string; startTime: string } | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    // Field 2 (comm) may hold spaces and parentheses; the fields after the last ")" are fixed.
    const rest = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return { state: rest[0] ?? "", startTime: rest[19] ?? "" };
  } catch {
    return null;
  }
}

function ownStartTime(): string | null {
  return procStat(process.pid)?.startTime ?? null;
}

/** Whether the lock's owner still runs: same host, its pid alive, not a zombie, and not a later process that reuses the pid. */
function ownerAlive(owner: RunLockOwner): boolean {
  if (owner.host !== hostname()) return true; // cannot be checked from here: the message says so
  const stat = procStat(owner.pid);
  if (stat) return stat.state !== "Z" && stat.state !== "X" && (owner.startTime === null || stat.startTime === owner.startTime);
  // No /proc entry to read (macOS, or /proc hiding other users' processes): whether the pid answers.
  try {
    process.kill(owner.pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === "EPERM";
  }
}

function parseOwner(text: string): RunLockOwner | null {
  try {
    const json = JSON.parse(text) as Partial<RunLockOwner>;
    if (typeof json.pid !== "number" || !Number.isInteger(json.pid) || json.pid <= 0 || typeof json.host !== "string") return null;
    return { pid: json.pid, startTime: typeof json.startTime === "string" ? json.startTime : null, host: json.host, since: typeof json.since === "string" ? json.since : "" };
  } catch {
    return null;
  }
}

/**
 * Lock a run directory for this process, creating it (and its parents) when absent. The lock
 * file holds this process's pid, start time and host; it is made whole before it appears (a
 * hard link, so no taker ever reads half of one). A lock whose process has died (kill -9
 * included) or whose pid now names another process is taken over; a live one makes this throw
 * RunLockedError naming its pid.
 */
export async function lockRunDir(runDir: string): Promise<RunDirLock> {
  const dir = resolve(runDir);
  const created = (await mkdir(dir, { recursive: true })) ?? null;
  const file = join(dir, RUN_LOCK_FILE);
  const owner: RunLockOwner = { pid: process.pid, startTime: ownStartTime(), host: hostname(), since: new Date().toISOString() };
  const content = `${JSON.stringify(owner)}\n`;
  const temp = join(dir, `${RUN_LOCK_FILE}.${process.pid}.${randomBytes(4).toString("hex")}`);
  await writeFile(temp, content, { flag: "wx" });
  try {
    for (let attempt = 0; ; attempt++) {
      try {
        await link(temp, file);
        break;
      } catch (error) {
        const code = (error as NodeJS.ErrnoException).code;
        if (code !== "EEXIST") {
          // A filesystem without hard links: an exclusive create (a reader may briefly see it empty).
          if (code !== "EPERM" && code !== "ENOTSUP" && code !== "EOPNOTSUPP" && code !== "ENOSYS") throw error;
          try {
            await writeFile(file, content, { flag: "wx" });
            break;
          } catch (inner) {
            if ((inner as NodeJS.ErrnoException).code !== "EEXIST") throw inner;
          }
        }
      }
      const text = await readFile(file, "utf8").catch((error: NodeJS.ErrnoException) => {
        if (error.code === "ENOENT") return null; // let go just now: try again
        throw error;
      });
      if (text === null) continue;
      const held = parseOwner(text);
      if (held && ownerAlive(held)) throw new RunLockedError(dir, held, file);
      if (!held && attempt < 3 && text.trim() === "") {
        // An exclusive create being written right now (no hard links here): look again shortly.
        await new Promise((r) => setTimeout(r, 100));
        continue;
      }
      if (attempt >= 5) throw new RunDirectoryError(`cannot lock ${dir}: ${file} keeps changing; is another proctor starting on it? Try again`, dir);
      // Stale: move it aside, and remove it only if what was moved is what was judged dead (another
      // taker may have replaced it in between; then put that one back).
      const aside = join(dir, `${RUN_LOCK_FILE}.stale.${process.pid}.${randomBytes(4).toString("hex")}`);
      try {
        await rename(file, aside);
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code === "ENOENT") continue;
        throw error;
      }
      const moved = await readFile(aside, "utf8").catch(() => null);
      if (moved !== null && moved !== text) await link(aside, file).catch(() => undefined);
      await unlink(aside).catch(() => undefined);
    }
  } finally {
    await unlink(temp).catch(() => undefined);
  }
  heldLocks.set(file, content);
  if (!exitHookInstalled) {
    exitHookInstalled = true;
    process.on("exit", releaseHeldLocksSync);
  }
  let released = false;
  return {
    runDir: dir,
    created,
    release: async (options = {}) => {
      if (released) return;
      released = true;
      heldLocks.delete(file);
      if (options.discardUnstarted && created !== null && !existsSync(join(dir, "run.json"))) {
        // Still held while it goes, so no other run starts in it meanwhile; directories above the
        // run's go only when empty (another run may have started beside it).
        await rm(dir, { recursive: true, force: true });
        for (let parent = dirname(dir); created !== dir && parent.startsWith(created); parent = dirname(parent)) {
          const empty = await rmdir(parent).then(() => true, () => false);
          if (!empty || parent === created) break;
        }
        return;
      }
      // Only our own lock: never one another process took over.
      const now = await readFile(file, "utf8").catch(() => null);
      if (now === content) await unlink(file).catch(() => undefined);
    },
  };
}
