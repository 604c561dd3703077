import { readdirSync, readFileSync, readlinkSync, writeFileSync } from "node:fs";
import { readFile, rm, writeFile } from "node:fs/promises";
import Dockerode from "dockerode";
import type { FileAuditProcess, FileAuditReport } from "@proctor/sandbox";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { fileAuditSupport, parseReport } from "./file-audit";
import { dockerTestGate } from "./gate";
import { DockerRuntime } from "./runtime";
import type { DockerSandbox } from "./sandbox";
import { testContainers, until } from "./test-helpers";

const docker = new Dockerode();
const run = await dockerTestGate(docker);
const BASE = "proctor/base:bookworm";

describe("parseReport", () => {
  it("reads processes, accesses and counts, unescaping paths", () => {
    const text = [
      "P 0 100 1 b 90 - 0 /usr/sbin/docker-init",
      "P 1 120 - g - - 0 -",
      "P 2 130 - n 1 - 0 /usr/bin/dockerd",
      "A o 0 /tmp/a%20b%25c%0Ad",
      "A w 1 /logs/verifier/reward.txt",
      "A o 2 @/m/merged/etc/passwd",
      "A o 1 @/elsewhere/x",
      "A o 0 /m/merged/etc/passwd",
      "C 7 0 1 0",
      "END",
      "",
    ].join("\n");
    expect(parseReport(text, "/m/merged")).toEqual({
      processes: [
        { id: 0, pid: 100, containerPid: 1, origin: "before", ppid: 90, parentId: null, orphaned: false, executable: "/usr/sbin/docker-init" },
        { id: 1, pid: 120, containerPid: null, origin: "gone", ppid: null, parentId: null, orphaned: false, executable: null },
        { id: 2, pid: 130, containerPid: null, origin: "new", ppid: 1, parentId: null, orphaned: false, executable: "/usr/bin/dockerd" },
      ],
      accesses: [
        { path: "/tmp/a b%c\nd", processId: 0, kind: "open" },
        { path: "/logs/verifier/reward.txt", processId: 1, kind: "write" },
        // A host path under the merged dir is a sandbox path; a container's path is its own.
        { path: "/etc/passwd", processId: 2, kind: "open" },
        { path: "/elsewhere/x", processId: 1, kind: "open" },
        { path: "/m/merged/etc/passwd", processId: 0, kind: "open" },
      ],
      counts: { events: 7, unnamed: 0, ambiguous: 1, overflows: 0 },
    });
  });

  it("refuses a report that was cut before its end or holds a line it does not know", () => {
    expect(parseReport("P 0 100 1 b 90 - 0 /x\nA o 0 /y\nC 1 0 0 0\n", "/m")).toBeNull();
    expect(parseReport("A q 0 /y\nC 1 0 0 0\nEND\n", "/m")).toBeNull();
  });
});

describe("fileAuditSupport", () => {
  it("says why a daemon reached over TCP cannot be audited", () => {
    const support = fileAuditSupport({ host: "10.0.0.5", port: 2376 });
    expect(support.helper).toBeUndefined();
    expect(support.reason).toMatch(/daemon on this machine.*10\.0\.0\.5/);
  });
});

/** The one process that did `kind` on `path` (fails when none or several did). */
function actor(report: FileAuditReport, kind: "open" | "exec" | "write", path: string): FileAuditProcess {
  const ids = new Set(report.accesses.filter((a) => a.kind === kind && a.path === path).map((a) => a.processId));
  expect([...ids], `${kind} ${path}`).toHaveLength(1);
  return report.processes.find((p) => p.id === [...ids][0]) as FileAuditProcess;
}

function did(report: FileAuditReport, process: FileAuditProcess, kind: "open" | "exec" | "write", path: string): boolean {
  return report.accesses.some((a) => a.processId === process.id && a.kind === kind && a.path === path);
}

/** Host pids of this process's children running the audit helper. */
function helperPids(): number[] {
  const pids: number[] = [];
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = readFileSync(`/proc/${name}/stat`, "utf8");
      const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
      const argv0 = readFileSync(`/proc/${name}/cmdline`, "utf8").split("\0")[0] ?? "";
      if (ppid === process.pid && /\/file-audit-[0-9a-f]+$/.test(argv0)) pids.push(Number(name));
    } catch {
      // gone meanwhile
    }
  }
  return pids;
}

// The verifier-like script the audit watches: a short-lived child, a fork that never execs, a
// binary added to the image, a reward written.
const TEST_SH = `#!/bin/bash
set -e
cat /etc/os-release > /dev/null
( : < /etc/issue )
mkfifo /tmp/release
( read -r x < /etc/debian_version; echo "$x" > /tmp/sub-wrote; read -r y < /tmp/release ) &
sub=$!
while [ ! -s /tmp/sub-wrote ]; do :; done
# An exec: the audit has read every earlier event (the subshell's, while it waits) once this returns.
/bin/true
echo go > /tmp/release
wait $sub
/usr/local/bin/added-cat /etc/added-data > /dev/null
echo 1 > /logs/verifier/reward.txt
`;

describe.skipIf(!run)("file audit of a Docker sandbox", () => {
  const tracked = testContainers(docker, "file-audit");
  const runtime = new DockerRuntime({ docker, warmPool: 0, lifetimeStepMs: 1000 });
  let sandbox: DockerSandbox;

  beforeAll(async () => {
    expect(runtime.capabilities.fileAuditUnavailable).toBeUndefined();
    expect(runtime.capabilities.fileAudit).toBe(true);
    sandbox = (await runtime.create({ image: BASE, labels: tracked.labels })) as DockerSandbox;
  });
  afterAll(async () => {
    await sandbox?.kill();
    await runtime.drain();
    await tracked.cleanup();
  });

  it("attributes each access to the process that made it, with its ancestry, and is complete", async () => {
    await sandbox.writeFile("/tests/test.sh", TEST_SH, { mode: 0o755 });
    await sandbox.writeFile("/etc/added-data", "added\n");
    const setup = await sandbox.exec({ shell: "cp /usr/bin/cat /usr/local/bin/added-cat && rm -f /tmp/go /tmp/pre-ready /tmp/pre-wrote /tmp/sub-wrote /tmp/release" }, { user: "0" });
    expect(setup.exitCode, setup.stderr).toBe(0);
    // Alive before the audit: polls for /tmp/go (a new `sleep` each time), then writes a file.
    const started = await sandbox.exec({ shell: "setsid sh -c ': > /tmp/pre-ready; while [ ! -e /tmp/go ]; do sleep 0.05; done; echo pre > /tmp/pre-wrote; exec sleep 60' >/dev/null 2>&1 &" });
    expect(started.exitCode).toBe(0);
    expect(await until(async () => (await sandbox.readFile("/tmp/pre-ready")) !== null, 10_000)).toBe(true);

    const before = new Set(helperPids());
    const audit = await sandbox.auditFiles();
    const [helper] = helperPids().filter((pid) => !before.has(pid));
    expect(helper).toBeGreaterThan(0);
    const verifier = await sandbox.exec(["/tests/test.sh"], { user: "0", timeoutMs: 60_000 });
    expect(verifier.exitCode, verifier.stderr).toBe(0);
    expect((await sandbox.exec({ shell: "touch /tmp/go" })).exitCode).toBe(0);
    expect(await until(async () => (await sandbox.readFile("/tmp/pre-wrote")) !== null, 10_000)).toBe(true);
    const report = await audit.stop();
    expect(await audit.stop()).toBe(report);

    expect(report.problems).toEqual([]);
    expect(report.complete).toBe(true);
    expect(report.counts).toMatchObject({ unnamed: 0, overflows: 0 });

    // The verifier's root: started from outside the container (docker exec), exec'd the script.
    const root = actor(report, "exec", "/tests/test.sh");
    expect(root).toMatchObject({ origin: "new", parentId: null, orphaned: false });
    expect(root.containerPid).toBeGreaterThan(1);
    expect(did(report, root, "exec", "/usr/bin/bash")).toBe(true);
    expect(actor(report, "write", "/logs/verifier/reward.txt")).toBe(root);

    // A child that opened a file and exited at once: read at its exec, so still attributed. The
    // path is the file's own (/etc/os-release is a link to it).
    const cat = actor(report, "open", "/usr/lib/os-release");
    expect(cat).toMatchObject({ origin: "new", parentId: root.id, executable: "/usr/bin/cat", ppid: root.pid });
    expect(did(report, cat, "exec", "/usr/bin/cat")).toBe(true);

    // A fork that never exec'd, read while it waited: its parent's program, its own accesses.
    const sub = actor(report, "write", "/tmp/sub-wrote");
    expect(sub).toMatchObject({ origin: "new", parentId: root.id, executable: "/usr/bin/bash" });
    expect(sub.id).not.toBe(root.id);
    expect(did(report, sub, "open", "/etc/debian_version")).toBe(true);
    expect(report.accesses.some((a) => a.processId === sub.id && a.kind === "exec")).toBe(false);

    // A fork that exited at once: attributed to its own process (whose program is unknown once it
    // exited, even unreaped), or said to be unknown; never to another.
    const quick = actor(report, "open", "/etc/issue");
    if (quick.origin === "gone") expect(quick).toMatchObject({ parentId: null, ppid: null, executable: null });
    else expect(quick).toMatchObject({ origin: "new", parentId: root.id });
    expect([null, "/usr/bin/bash"]).toContain(quick.executable);
    expect(quick.id).not.toBe(root.id);

    // The binary the test added, exec'd by a child of the script, and what it opened.
    const added = actor(report, "exec", "/usr/local/bin/added-cat");
    expect(added).toMatchObject({ origin: "new", parentId: root.id, executable: "/usr/local/bin/added-cat" });
    expect(did(report, added, "open", "/etc/added-data")).toBe(true);

    // Alive before the audit: its write, and the `sleep`s it started are its children.
    const pre = actor(report, "write", "/tmp/pre-wrote");
    expect(pre).toMatchObject({ origin: "before", executable: "/usr/bin/dash", orphaned: false });
    const sleeps = report.processes.filter((p) => p.id !== pre.id && did(report, p, "exec", "/usr/bin/sleep"));
    expect(sleeps.length).toBeGreaterThan(0);
    for (const sleep of sleeps) expect(sleep.parentId).toBe(pre.id);
    // The container's init and the keep-alive were there before too.
    expect(report.processes.filter((p) => p.origin === "before").map((p) => p.containerPid)).toContain(1);

    // The daemon reads files for the API (readFile above) from outside the container; they are
    // told by their sandbox paths too. The helper's own opens are no accesses.
    const daemonRead = report.accesses.filter((a) => a.path === "/tmp/pre-wrote" && a.kind === "open" && a.processId !== pre.id).map((a) => report.processes[a.processId]);
    expect(daemonRead.length).toBeGreaterThan(0);
    for (const reader of daemonRead) expect(reader?.containerPid ?? null).toBeNull();
    expect(report.processes.map((p) => p.pid)).not.toContain(helper);
  });

  it("never hangs the container: a helper killed mid-audit leaves execs working and the report incomplete", async () => {
    const before = new Set(helperPids());
    const audit = await sandbox.auditFiles();
    const helper = helperPids().filter((pid) => !before.has(pid));
    expect(helper).toHaveLength(1);
    // Execs (each one a permission event) are under way when the helper dies.
    const loop = sandbox.exec({ shell: "rm -f /tmp/looping; i=0; while [ $i -lt 1000 ]; do /bin/true; i=$((i+1)); [ $i = 10 ] && : > /tmp/looping; done; echo looped" }, { user: "0", timeoutMs: 120_000 });
    expect(await until(async () => (await sandbox.readFile("/tmp/looping")) !== null, 30_000)).toBe(true);
    process.kill(helper[0] as number, "SIGKILL");
    const looped = await loop;
    expect(looped.stdout.trim()).toBe("looped");
    expect(looped.timedOut).toBe(false);
    const after = await sandbox.exec(["/bin/sh", "-c", "echo alive"], { user: "0", timeoutMs: 30_000 });
    expect(after.stdout.trim()).toBe("alive");

    const report = await audit.stop();
    expect(report.complete).toBe(false);
    expect(report.problems.join("\n")).toMatch(/helper was killed \(SIGKILL\) before its report/);
    expect(report.accesses).toEqual([]);
  });

  it("keeps up with a process hammering the filesystem (20,000 opens)", async () => {
    const script = "import os\nos.makedirs('/tmp/h', exist_ok=True)\nfor i in range(2000): open(f'/tmp/h/{i}', 'w').close()\nfor r in range(10):\n  for i in range(2000): open(f'/tmp/h/{i}').close()\n";
    await sandbox.writeFile("/tmp/hammer.py", script);
    const audit = await sandbox.auditFiles();
    const result = await sandbox.exec(["python3", "/tmp/hammer.py"], { user: "0", timeoutMs: 120_000 });
    expect(result.exitCode, result.stderr).toBe(0);
    const report = await audit.stop();
    // Complete, or says what was lost.
    expect(report.complete).toBe(report.counts.overflows === 0 && report.counts.unnamed === 0);
    if (!report.complete) expect(report.problems.join("\n")).toMatch(/overflowed|could not be named/);
    else {
      const python = actor(report, "write", "/tmp/h/0");
      expect(python).toMatchObject({ origin: "new", parentId: null });
      const opened = new Set(report.accesses.filter((a) => a.processId === python.id && a.kind === "open").map((a) => a.path));
      for (let i = 0; i < 2000; i++) expect(opened.has(`/tmp/h/${i}`)).toBe(true);
      expect(report.accesses.filter((a) => a.processId === python.id && a.kind === "write" && a.path.startsWith("/tmp/h/"))).toHaveLength(2000);
    }
  });

  it("stops, complete, while processes keep opening files", async () => {
    // Distinct files, so the kernel cannot merge their events. (stop() removes the mark before it
    // reads the last events: a queue that never empties cannot hold it up.)
    const spin = "import os\nos.makedirs('/tmp/s', exist_ok=True)\nfor i in range(3000): open(f'/tmp/s/{i}', 'a').close()\nwhile True:\n    for i in range(3000): open(f'/tmp/s/{i}').close()\n";
    await sandbox.writeFile("/tmp/spin.py", spin);
    expect((await sandbox.exec({ shell: "rm -rf /tmp/s; for i in 1 2; do setsid python3 /tmp/spin.py >/dev/null 2>&1 & done" })).exitCode).toBe(0);
    try {
      expect(await until(async () => (await sandbox.exec(["test", "-e", "/tmp/s/2999"], { user: "0" })).exitCode === 0, 30_000)).toBe(true);
      const audit = await sandbox.auditFiles();
      expect((await sandbox.exec(["cat", "/etc/hostname"], { user: "0" })).exitCode).toBe(0);
      const report = await audit.stop();
      expect(report.problems).toEqual([]);
      const spinners = report.processes.filter((p) => did(report, p, "open", "/tmp/s/0"));
      expect(spinners.length).toBeGreaterThan(0);
      for (const spinner of spinners) expect(spinner.origin).toBe("before");
      // Docker bind-mounts /etc/hostname from the host: another filesystem, not audited.
      expect(report.accesses.some((a) => a.path === "/etc/hostname")).toBe(false);
    } finally {
      await sandbox.exec({ shell: "pkill -f /tmp/spin.py; true" }, { user: "0" });
    }
  });

  it("never gives an access to a process whose pid a later process took", async () => {
    // A subshell A opens a file and exits; the host's pid counter is then moved on round the
    // cycle to just below A's pid (root on the host, as CRIU does), so the next fork, a subshell B
    // that opens another file and exits at once, gets A's pid. The counter is moved forward in two
    // steps, the audit seeing the first (an exec in between), as 32,768 forks would move it: the
    // audit relies on it never going back, nor a whole cycle between two of its looks. The host's
    // other processes fork too and may take the pid first: then the attempt runs again.
    const info = await docker.getContainer(sandbox.id).inspect();
    const merged = (info.GraphDriver.Data as unknown as { MergedDir: string }).MergedDir;
    const containerNs = readlinkSync(`/proc/${info.State.Pid}/ns/pid`);
    const hostPidOf = (cpid: number): number => {
      for (const name of readdirSync("/proc").filter((n) => /^\d+$/.test(n))) {
        try {
          if (readlinkSync(`/proc/${name}/ns/pid`) !== containerNs) continue;
          if (/^NSpid:.*\s(\d+)$/m.exec(readFileSync(`/proc/${name}/status`, "utf8"))?.[1] === String(cpid)) return Number(name);
        } catch {
          // gone meanwhile
        }
      }
      throw new Error(`no host pid for container pid ${cpid}`);
    };
    const host = (path: string) => `${merged}${path}`;
    const waitFor = async (path: string) => expect(await until(async () => (await readFile(host(path), "utf8").catch(() => "")) !== "", 30_000)).toBe(true);
    await sandbox.writeFile("/tmp/reuse.sh", `mkfifo /tmp/r1 /tmp/r2 /tmp/r3
( : < /etc/issue; echo $BASHPID > /tmp/a-pid; read -r _ < /tmp/r1 ) &
a=$!
while [ ! -s /tmp/a-pid ]; do :; done
/bin/true
wait $a; echo gone > /tmp/a-gone
read -r _ < /tmp/r2
/bin/true
echo seen > /tmp/half
read -r _ < /tmp/r3
( : < /etc/debian_version )
`);
    for (let attempt = 1; ; attempt++) {
      for (const name of ["r1", "r2", "r3", "a-pid", "a-gone", "half"]) await rm(host(`/tmp/${name}`), { force: true });
      const audit = await sandbox.auditFiles();
      const script = sandbox.exec(["bash", "/tmp/reuse.sh"], { user: "0", timeoutMs: 120_000 });
      await waitFor("/tmp/a-pid");
      const aPid = hostPidOf(Number((await readFile(host("/tmp/a-pid"), "utf8")).trim()));
      await writeFile(host("/tmp/r1"), "go\n"); // A exits
      await waitFor("/tmp/a-gone");
      const pidMax = Number(readFileSync("/proc/sys/kernel/pid_max", "utf8"));
      const counter = Number(readFileSync("/proc/sys/kernel/ns_last_pid", "utf8"));
      writeFileSync("/proc/sys/kernel/ns_last_pid", String((counter + pidMax / 2) % pidMax));
      await writeFile(host("/tmp/r2"), "go\n"); // an exec: the audit reads the counter after it
      await waitFor("/tmp/half");
      writeFileSync("/proc/sys/kernel/ns_last_pid", String(aPid - 1));
      writeFileSync(host("/tmp/r3"), "go\n"); // B forks now
      expect((await script).exitCode).toBe(0);
      const report = await audit.stop();
      expect(report.problems).toEqual([]);
      const a = actor(report, "open", "/etc/issue");
      const b = actor(report, "open", "/etc/debian_version");
      expect(a.pid).toBe(aPid);
      expect(b.id).not.toBe(a.id); // the invariant, whoever got the pid
      if (b.pid === aPid) {
        // A was seen alive; B's event cannot be told from a late one of A's: it is nobody's.
        expect(a).toMatchObject({ origin: "new", executable: "/usr/bin/bash" });
        expect(b).toMatchObject({ origin: "gone", parentId: null, executable: null });
        expect(report.counts.ambiguous).toBeGreaterThan(0);
        break;
      }
      expect(attempt, "another host process took A's pid every time").toBeLessThan(8);
    }
  });

  it("says the report is incomplete when the container restarted during the audit", async () => {
    const audit = await sandbox.auditFiles();
    await sandbox.killAll();
    expect((await sandbox.exec(["cat", "/etc/hostname"], { user: "0" })).exitCode).toBe(0);
    const report = await audit.stop();
    expect(report.complete).toBe(false);
    expect(report.problems).toContain("the container restarted during the audit: its new root filesystem was not watched");
  });

  it("refuses to start on a sandbox that was killed", async () => {
    const other = (await runtime.create({ image: BASE, labels: tracked.labels })) as DockerSandbox;
    await other.kill();
    await expect(other.auditFiles()).rejects.toThrow(/was killed/);
  });
});
