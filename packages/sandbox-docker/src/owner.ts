import { readFileSync } from "node:fs";
import { hostname } from "node:os";

/** Who started a sandbox: `<host>:<pid>:<process start time>`, stored in the proctor.owner label. */
export interface Owner {
  host: string;
  pid: number;
  /** Start time of the process in clock ticks since boot (/proc/<pid>/stat field 22); null if unknown. */
  startTime: string | null;
}

/**
 * A process's start time, which tells a live owner from a later process that reused its pid.
 * Linux only (/proc); elsewhere null, and the reaper then trusts the pid alone.
 */
export function processStartTime(pid: number): string | null {
  let stat: string;
  try {
    stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  } catch {
    return null;
  }
  // The command name (field 2) may hold spaces and parentheses: count fields after the last ")".
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return fields[19] ?? null;
}

/** The proctor.owner label value of this process. */
export function currentOwnerLabel(): string {
  return formatOwner({ host: hostname(), pid: process.pid, startTime: processStartTime(process.pid) });
}

export function formatOwner(owner: Owner): string {
  return `${owner.host}:${owner.pid}:${owner.startTime ?? "unknown"}`;
}

/** Parses a proctor.owner label; null when it is not in `<host>:<pid>:<start>` form. */
export function parseOwner(label: string | undefined): Owner | null {
  if (!label) return null;
  const match = /^(.+):(\d+):([^:]+)$/.exec(label);
  if (!match) return null;
  const [, host, pid, start] = match as unknown as [string, string, string, string];
  return { host, pid: Number(pid), startTime: start === "unknown" ? null : start };
}

/**
 * Whether the owner is certainly gone: same host, and either no process has its pid or the
 * process with that pid started at another time. An owner on another host is never gone to us.
 */
export function ownerIsGone(owner: Owner, localHost: string = hostname()): boolean {
  if (owner.host !== localHost) return false;
  if (!pidAlive(owner.pid)) return true;
  if (owner.startTime === null) return false;
  const now = processStartTime(owner.pid);
  return now !== null && now !== owner.startTime;
}

function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    // EPERM: the process exists but belongs to someone else.
    return (error as NodeJS.ErrnoException).code === "EPERM";
  }
}
