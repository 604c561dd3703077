import { readFileSync } from "node:fs";
import { readdir, readFile } from "node:fs/promises";

function errnoCode(error: unknown): string | undefined {
  return (error as NodeJS.ErrnoException | null)?.code;
}

/** SIGKILL a whole process group. False when the group no longer exists. */
export function killGroup(pgid: number, signal: NodeJS.Signals = "SIGKILL"): boolean {
  try {
    process.kill(-pgid, signal);
    return true;
  } catch (error) {
    if (errnoCode(error) === "ESRCH") return false;
    throw error;
  }
}

/** Whether any process is still in group `pgid` (zombies count). */
export function groupAlive(pgid: number): boolean {
  return signalProbe(-pgid);
}

/** Whether process `pid` exists (EPERM means it exists under another user). */
export function pidAlive(pid: number): boolean {
  return signalProbe(pid);
}

function signalProbe(target: number): boolean {
  try {
    process.kill(target, 0);
    return true;
  } catch (error) {
    return errnoCode(error) === "EPERM";
  }
}

/**
 * The kernel's start time of `pid` (clock ticks since boot, from /proc/<pid>/stat), used to
 * tell a process from a later one that reuses its pid. Null when /proc is not there (macOS) or
 * the process is gone.
 */
export function processStartTime(pid: number): string | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    // Field 2 (comm) may contain spaces and parentheses; fields after the last ")" are fixed.
    const rest = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return rest[19] ?? null; // field 22 overall = index 19 after pid and comm
  } catch {
    return null;
  }
}

/**
 * Whether the process recorded as `pid` with `startTime` is still the same running process.
 * With no start time recorded (or no /proc), falls back to "the pid exists".
 */
export function sameProcessAlive(pid: number, startTime: string | null): boolean {
  if (!pidAlive(pid)) return false;
  if (startTime === null) return true;
  const now = processStartTime(pid);
  return now === null ? true : now === startTime;
}

/**
 * Pids (Linux only; [] elsewhere) whose environment has `name=value`: catches processes that left
 * their process group (setsid, double fork) but kept the env the sandbox gave them.
 */
export async function pidsWithEnv(name: string, value: string): Promise<number[]> {
  let entries: string[];
  try {
    entries = await readdir("/proc");
  } catch {
    return [];
  }
  const needle = Buffer.from(`${name}=${value}\0`);
  const found: number[] = [];
  await Promise.all(
    entries.map(async (entry) => {
      if (!/^\d+$/.test(entry)) return;
      const pid = Number(entry);
      if (pid === process.pid) return;
      try {
        const environ = await readFile(`/proc/${pid}/environ`);
        if (environ.subarray(0, needle.length).equals(needle) || environ.includes(Buffer.concat([Buffer.from([0]), needle]))) {
          found.push(pid);
        }
      } catch {
        // Gone, or another user's process: neither can be one of ours.
      }
    }),
  );
  return found;
}

/** SIGKILL each pid, ignoring ones already gone. */
export function killPids(pids: readonly number[]): void {
  for (const pid of pids) {
    try {
      process.kill(pid, "SIGKILL");
    } catch (error) {
      if (errnoCode(error) !== "ESRCH") throw error;
    }
  }
}
