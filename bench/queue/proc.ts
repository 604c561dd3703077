import { readFileSync } from "node:fs";

const TICK_MS = 10; // USER_HZ is 100 on Linux

/** CPU ms a process used, its reaped children included (trial shells), from /proc/<pid>/stat. */
export function procCpuMs(pid: number | "self"): number {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  // After "(comm) ": state is field 0, utime 11, stime 12, cutime 13, cstime 14.
  return [11, 12, 13, 14].reduce((sum, i) => sum + Number(fields[i]), 0) * TICK_MS;
}

/** A process's resident memory in MB (VmRSS): what each of its forks copies page tables for. */
export function procRssMb(pid: number | "self"): number {
  const match = /^VmRSS:\s+(\d+) kB$/m.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
  return match ? Number(match[1]) / 1024 : Number.NaN;
}
