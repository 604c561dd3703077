import { mkdir, readFile, rename, rm, stat, writeFile } from "node:fs/promises";
import { hostname } from "node:os";
import { dirname, join } from "node:path";
import { randomBytes } from "node:crypto";
import { DatasetError } from "./errors";

interface Owner {
  pid: number;
  host: string;
}

/** Whether a process with this pid exists on this host. */
export function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === "EPERM";
  }
}

async function readOwner(dir: string): Promise<Owner | null> {
  try {
    return JSON.parse(await readFile(join(dir, "owner.json"), "utf8")) as Owner;
  } catch {
    return null;
  }
}

/**
 * Removes the lock `dir` of a dead `owner`, one process at a time: under `<dir>.takeover` (made
 * with mkdir, so only one holds it) the owner is read again and the lock removed only if it is
 * still the dead one, so a waiter that judged the lock dead never removes the lock another waiter
 * has just taken over. False when another process is taking over (the caller polls again).
 */
async function takeOver(dir: string, owner: Owner | null): Promise<boolean> {
  const guard = `${dir}.takeover`;
  try {
    await mkdir(guard);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== "EEXIST") throw error;
    // A guard left by a process killed while taking over: gone after 10 s.
    const made = await stat(guard).then((s) => s.mtimeMs, () => null);
    if (made !== null && Date.now() - made > 10_000) await rm(guard, { recursive: true, force: true });
    return false;
  }
  try {
    const now = await readOwner(dir);
    const same = owner === null ? now === null : now !== null && now.pid === owner.pid && now.host === owner.host;
    if (same) {
      const aside = `${dir}.stale-${process.pid}-${randomBytes(4).toString("hex")}`;
      if (await rename(dir, aside).then(() => true, () => false)) await rm(aside, { recursive: true, force: true });
    }
    return true;
  } finally {
    await rm(guard, { recursive: true, force: true });
  }
}

export interface LockOptions {
  /** Give up after this long while a live process holds the lock. Default 30 min (a large fetch). */
  waitMs?: number;
  /** Poll interval. Default 100 ms. */
  pollMs?: number;
  /** Called once when the lock is held by another process and this one starts waiting. */
  onWait?: (owner: Owner | null) => void;
}

/**
 * Hold the lock directory `dir` (mkdir is atomic) while `work` runs. A lock whose owner died (same
 * host, pid gone; or no owner file after a few polls) is taken over. Correctness does not rest on
 * it: cache entries are installed by rename, so two writers at once only fetch twice; the lock
 * saves that work.
 */
export async function withLock<T>(dir: string, work: () => Promise<T>, options: LockOptions = {}): Promise<T> {
  const waitMs = options.waitMs ?? 30 * 60_000;
  const pollMs = options.pollMs ?? 100;
  const started = Date.now();
  let waited = false;
  let ownerless = 0;
  await mkdir(dirname(dir), { recursive: true });
  for (;;) {
    try {
      await mkdir(dir);
      await writeFile(join(dir, "owner.json"), JSON.stringify({ pid: process.pid, host: hostname() } satisfies Owner));
      break;
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code;
      // ENOENT: the lock this process had just made was taken for a stuck one and removed.
      if (code === "ENOENT") continue;
      if (code !== "EEXIST") throw error;
    }
    const owner = await readOwner(dir);
    // No owner file: being created right now, or left by a kill between mkdir and write.
    ownerless = owner === null ? ownerless + 1 : 0;
    const dead = owner !== null ? owner.host === hostname() && !alive(owner.pid) : ownerless > 20;
    if (dead && (await takeOver(dir, owner))) continue;
    if (!waited) {
      waited = true;
      options.onWait?.(owner);
    }
    if (Date.now() - started > waitMs) {
      throw new DatasetError(`${dir} is still locked by ${owner ? `pid ${owner.pid} on ${owner.host}` : "another process"} after ${Math.round(waitMs / 1000)} s: wait for that fetch to finish, or remove the lock directory if no proctor is running`, 1);
    }
    await new Promise((r) => setTimeout(r, pollMs));
  }
  try {
    return await work();
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}
