import { readFileSync } from "node:fs";
import { readdir, readFile, readlink } from "node:fs/promises";
import type { SandboxProcess } from "@proctor/sandbox";

/**
 * Run by the trusted busybox as root. First three fast passes with shell builtins only (no fork
 * per process): `T <raw /proc/pid/stat>` for every process. A process that re-forks to a new pid
 * every few ms can hop between one pass's glob and its reads; it cannot do so in every pass. Then details for the ones still alive: `P <pid> <command line>`, the socket
 * inodes each holds as `S <pid> <inode>`, and listening TCP sockets as `L <hex port> <inode>`.
 * This script and its children are left out by the caller (ppid or pid = `SELF <pid>`).
 */
export const LIST_PROCESSES_SCRIPT = `
self=$$
echo "SELF $self"
for pass in 1 2 3; do
  for d in /proc/[0-9]*; do
    read -r line < "$d/stat" 2>/dev/null && echo "T $line"
  done
done
for d in /proc/[0-9]*; do
  p=\${d#/proc/}
  [ "$p" = "$self" ] && continue
  cmd=$(tr '\\0' ' ' < "$d/cmdline" 2>/dev/null | head -c 512) || continue
  echo "P $p $cmd"
  for fd in "$d"/fd/*; do
    l=$(readlink "$fd" 2>/dev/null) || continue
    case "$l" in "socket:["*) i=\${l#socket:[}; echo "S $p \${i%]}" ;; esac
  done
done
for f in /proc/net/tcp /proc/net/tcp6; do
  [ -r "$f" ] || continue
  while read -r sl local rem st rest; do
    [ "$st" = 0A ] || continue
    set -- $rest
    echo "L \${local##*:} $6"
  done < "$f"
done
exit 0
`;

/**
 * Processes from LIST_PROCESSES_SCRIPT's output, less the runtime's own: PID 1 (docker-init), the
 * keep-alive whose pid the container reported at start (a process cannot take a live pid, so
 * naming itself like the keep-alive does not hide an agent's process) and the keep-alive's children.
 */
export function parseProcessListing(output: string, keepAlivePid: number): SandboxProcess[] {
  const processes = new Map<number, SandboxProcess>();
  const socketOwners = new Map<string, Set<number>>();
  const listening: { port: number; inode: string }[] = [];
  let self = -1;
  for (const line of output.split("\n")) {
    if (line.startsWith("T ")) {
      // "<pid> (<comm>) <state> <ppid> ...": comm may hold spaces and parentheses.
      const close = line.lastIndexOf(")");
      const open = line.indexOf("(");
      if (open < 0 || close < open) continue;
      const pid = Number(line.slice(2, open).trim());
      const [state, ppid] = line.slice(close + 2).split(" ");
      if (state === "Z" || !Number.isInteger(pid)) continue;
      processes.set(pid, { pid, ppid: Number(ppid), command: `[${line.slice(open + 1, close)}]`, ports: [] });
      continue;
    }
    const [tag, a, b, ...rest] = line.split(" ");
    if (tag === "SELF" && a) self = Number(a);
    else if (tag === "P" && a) {
      const proc = processes.get(Number(a));
      const command = [b, ...rest].join(" ").trim();
      if (proc && command) proc.command = command.slice(0, 512);
    } else if (tag === "S" && a && b) {
      const owners = socketOwners.get(b) ?? new Set<number>();
      owners.add(Number(a));
      socketOwners.set(b, owners);
    } else if (tag === "L" && a && b) {
      listening.push({ port: Number.parseInt(a, 16), inode: b });
    }
  }
  for (const { port, inode } of listening) {
    for (const pid of socketOwners.get(inode) ?? []) {
      const proc = processes.get(pid);
      if (proc && !proc.ports.includes(port)) proc.ports.push(port);
    }
  }
  const own = (p: SandboxProcess) =>
    p.pid === 1 || p.pid === self || p.ppid === self || (keepAlivePid > 0 && (p.pid === keepAlivePid || p.ppid === keepAlivePid));
  return [...processes.values()].filter((p) => !own(p)).sort((x, y) => x.pid - y.pid);
}

/**
 * LIST_PROCESSES_SCRIPT's output (less its SELF line: nothing runs in the container to list
 * them) read from this host: the container's cgroup (found through its init's /proc/<pid>/cgroup,
 * which must name the container) lists every process in it, which the agent cannot leave (its
 * cgroup filesystem is read-only); pids and ppids are translated into the container's pid
 * namespace (NSpid), so the parse and its exclusions are the same. Several passes, like the
 * script's, so a process re-forking to a new pid every few ms is still seen. Null when this host cannot see
 * the container (a daemon elsewhere): the caller runs the script inside.
 */
export async function listProcessesOnHost(initPid: number, containerId: string): Promise<string | null> {
  if (!(initPid > 0)) return null;
  let procsFile: string;
  let level: number;
  try {
    const cgroup = await containerCgroupDir(initPid, containerId, "pids");
    if (cgroup === null) return null;
    procsFile = `${cgroup.dir}/cgroup.procs`;
    // The container's level in the NSpid lists: its init is pid 1 there.
    const nspid = nsPids(await readFile(`/proc/${initPid}/status`, "utf8"));
    level = nspid.lastIndexOf(1);
    if (level < 1) return null;
  } catch {
    return null; // not visible from here
  }

  // Synchronous reads right after each cgroup.procs snapshot: a process re-forking to a new pid
  // every few ms is gone before a read through the thread pool gets to it. A pass in which a
  // listed pid vanished is followed by another (at least 3, at most 20).
  const seen = new Map<number, { pid: number; ppid: number; comm: string; state: string }>();
  for (let pass = 0, vanished = true; pass < 20 && (pass < 3 || vanished); pass++) {
    vanished = false;
    for (const hostPid of readFileSync(procsFile, "utf8").split("\n").filter(Boolean).map(Number)) {
      let stat: string;
      let status: string;
      try {
        stat = readFileSync(`/proc/${hostPid}/stat`, "utf8");
        status = readFileSync(`/proc/${hostPid}/status`, "utf8");
      } catch {
        vanished = true; // gone since the cgroup listed it
        continue;
      }
      const open = stat.indexOf("(");
      const close = stat.lastIndexOf(")");
      const [state = "?", ppid = "0"] = stat.slice(close + 2).split(" ");
      const pid = nsPids(status)[level];
      if (pid !== undefined) seen.set(hostPid, { pid, ppid: Number(ppid), comm: stat.slice(open + 1, close), state });
    }
  }
  const inContainer = new Map([...seen].map(([hostPid, p]) => [hostPid, p.pid]));
  const out: string[] = [];
  for (const p of seen.values()) out.push(`T ${p.pid} (${p.comm}) ${p.state} ${inContainer.get(p.ppid) ?? 0}`);
  const details = await Promise.all(
    [...seen].map(async ([hostPid, p]) => {
      const cmdline = await readFile(`/proc/${hostPid}/cmdline`).catch(() => null);
      if (cmdline === null) return []; // gone: it stays under its short name
      const fds = await readdir(`/proc/${hostPid}/fd`).catch(() => [] as string[]);
      const links = await Promise.all(fds.map((fd) => readlink(`/proc/${hostPid}/fd/${fd}`).catch(() => "")));
      const sockets = links.flatMap((link) => /^socket:\[(\d+)\]$/.exec(link)?.slice(1) ?? []);
      return [`P ${p.pid} ${cmdline.subarray(0, 512).toString("utf8").replace(/\0/g, " ")}`, ...sockets.map((inode) => `S ${p.pid} ${inode}`)];
    }),
  );
  out.push(...details.flat());
  // The sockets of the container's network namespace, read through its init: an agent's process
  // may be exiting (a zombie has no namespace to read), the init lives as long as the container.
  for (const name of ["tcp", "tcp6"]) {
    const table = await readFile(`/proc/${initPid}/net/${name}`, "utf8").catch(() => "");
    for (const row of table.split("\n").slice(1)) {
      const [, local, , st, , , , , , inode] = row.trim().split(/\s+/);
      if (st === "0A" && local && inode) out.push(`L ${local.slice(local.lastIndexOf(":") + 1)} ${inode}`);
    }
  }
  return out.join("\n");
}

/**
 * The host directory of the container's cgroup for `controller` (cgroup v1's hierarchy of that
 * controller, else the v2 unified one), read from its init's /proc/<pid>/cgroup; null when that
 * path does not name the container (a pid reused by another process).
 */
export async function containerCgroupDir(initPid: number, containerId: string, controller: "pids" | "memory" | "cpuacct"): Promise<{ dir: string; v1: boolean } | null> {
  const lines = (await readFile(`/proc/${initPid}/cgroup`, "utf8")).split("\n");
  const v1 = new RegExp(`^\\d+:(?:[^:]*,)?${controller}(?:,[^:]*)?:(.*)$`);
  const v1Path = lines.map((line) => v1.exec(line)?.[1]).find((path) => path !== undefined);
  const v2Path = lines.map((line) => /^0::(.*)$/.exec(line)?.[1]).find((path) => path !== undefined);
  const dir = v1Path !== undefined ? `/sys/fs/cgroup/${controller}${v1Path}` : v2Path !== undefined ? `/sys/fs/cgroup${v2Path}` : null;
  return dir?.includes(containerId) ? { dir, v1: v1Path !== undefined } : null;
}

/** The NSpid line of /proc/<pid>/status: the pid in each pid namespace, outermost first. */
function nsPids(status: string): number[] {
  const line = /^NSpid:\s*(.*)$/m.exec(status)?.[1] ?? "";
  return line.split(/\s+/).filter(Boolean).map(Number);
}
