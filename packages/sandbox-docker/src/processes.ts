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
