import { closeSync, openSync, readFileSync, readSync } from "node:fs";
import { readdir } from "node:fs/promises";

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
 *
 * Runs at every sandbox stop and reads every process's environ, so it reads them synchronously
 * into one reused buffer, a slice of pids at a time: `readFile` cost ~4 thread-pool round trips
 * and a fresh 64 KiB buffer per process (/proc files report size 0), and those buffers' external
 * memory kept forcing young-generation GCs in a busy worker.
 */
export async function pidsWithEnv(name: string, value: string): Promise<number[]> {
  let entries: string[];
  try {
    entries = await readdir("/proc");
  } catch {
    return [];
  }
  const needle = Buffer.from(`\0${name}=${value}\0`);
  const found: number[] = [];
  for (let i = 0; i < entries.length; i += ENVIRON_SLICE) {
    if (i > 0) await new Promise((resolve) => setImmediate(resolve)); // let other trials run between slices
    for (const entry of entries.slice(i, i + ENVIRON_SLICE)) {
      if (!/^\d+$/.test(entry)) continue;
      const pid = Number(entry);
      if (pid !== process.pid && environHas(pid, needle)) found.push(pid);
    }
  }
  return found;
}

/** Pids read between two turns of the event loop (~10 µs each). */
const ENVIRON_SLICE = 64;
let environBuffer = Buffer.allocUnsafe(64 * 1024);

/** Whether /proc/<pid>/environ holds `needle` (`\0name=value\0`; the first entry has no leading NUL). */
function environHas(pid: number, needle: Buffer): boolean {
  let fd: number;
  try {
    fd = openSync(`/proc/${pid}/environ`, "r");
  } catch {
    return false; // gone, or another user's process: neither can be one of ours
  }
  let length = 0;
  try {
    for (;;) {
      if (length === environBuffer.length) {
        const bigger = Buffer.allocUnsafe(environBuffer.length * 2);
        environBuffer.copy(bigger, 0, 0, length);
        environBuffer = bigger;
      }
      const n = readSync(fd, environBuffer, length, environBuffer.length - length, null);
      if (n === 0) break;
      length += n;
    }
  } catch {
    return false; // exited while being read
  } finally {
    closeSync(fd);
  }
  const environ = environBuffer.subarray(0, length);
  return environ.subarray(0, needle.length - 1).equals(needle.subarray(1)) || environ.includes(needle);
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
