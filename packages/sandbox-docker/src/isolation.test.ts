import Dockerode from "dockerode";
import type { Sandbox } from "@proctor/sandbox";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { dockerTestGate } from "./gate";
import { DockerRuntime } from "./runtime";
import { LIST_PROCESSES_SCRIPT, listProcessesOnHost, parseProcessListing } from "./processes";
import type { DockerSandbox } from "./sandbox";
import { BUSYBOX, testContainers, until } from "./test-helpers";
import { isStaticElf, TRUSTED_BUSYBOX } from "./toolchain";

const docker = new Dockerode();
const run = await dockerTestGate(docker);
const BASE = "proctor/base:bookworm";

describe("parseProcessListing", () => {
  it("leaves out PID 1, the keep-alive, its children and the listing itself, whatever they are called", () => {
    const output = [
      "SELF 40",
      "T 1 (docker-init) S 0 1",
      "T 7 (busybox) S 1 7",
      "T 8 (sleep) S 7 7",
      "T 12 (proctor-init) S 1 12",
      "T 13 (python3) S 1 12",
      "T 40 (busybox) R 0 40",
      "T 41 (sh) Z 40 40",
      "P 12 sh -c evil proctor-init",
      "P 13 python3 -m http.server 8000",
      "S 13 555",
      "L 1F40 555",
    ].join("\n");
    expect(parseProcessListing(output, 7)).toEqual([
      { pid: 12, ppid: 1, command: "sh -c evil proctor-init", ports: [] },
      { pid: 13, ppid: 1, command: "python3 -m http.server 8000", ports: [8000] },
    ]);
  });

  it("keeps a process that died between the two passes, under its short name", () => {
    expect(parseProcessListing("SELF 9\nT 5 (hop (x)) S 1 5", 2)).toEqual([{ pid: 5, ppid: 1, command: "[hop (x)]", ports: [] }]);
  });
});

describe("isStaticElf", () => {
  it("tells a static binary from a dynamic one and from non-ELF data", async () => {
    const { readFile } = await import("node:fs/promises");
    expect(isStaticElf(await readFile(process.execPath))).toBe(false);
    expect(isStaticElf(Buffer.from("#!/bin/sh\n"))).toBe(false);
  });
});

describe.skipIf(!run)("Docker sandbox isolation primitives", () => {
  const tracked = testContainers(docker, "isolation");
  const runtime = new DockerRuntime({ docker, warmPool: 0, lifetimeStepMs: 1000 });
  let sandbox: Sandbox;

  beforeAll(async () => {
    sandbox = await runtime.create({ image: BASE, labels: tracked.labels });
  });
  afterAll(async () => {
    await sandbox?.kill();
    await runtime.drain();
    await tracked.cleanup();
  });

  it("mounts a trusted busybox that root in the container can neither change nor remount", async () => {
    const result = await sandbox.exec({ shell: "cp /bin/ls /.proctor/busybox 2>&1; echo x >> /.proctor/busybox 2>&1; mount -o remount,rw /.proctor 2>&1; /.proctor/busybox true && echo usable" }, { user: "0" });
    expect(result.stdout).toMatch(/Read-only file system/);
    expect(result.stdout).toMatch(/usable\n$/);
  });

  it("lists the agent's processes with their listening ports, and killAll ends them all while files stay", async () => {
    await sandbox.exec({ shell: "echo kept > /app/file; (setsid env -i python3 -m http.server 8123 >/dev/null 2>&1 &); (setsid bash -c 'exec -a proctor-init sleep 300' &); sleep 1" });
    const before = await sandbox.processes!();
    expect(before.find((p) => p.command.includes("http.server"))?.ports).toEqual([8123]);
    // Named like the keep-alive, still listed: the keep-alive is known by its pid.
    expect(before.some((p) => p.command === "proctor-init 300")).toBe(true);
    await sandbox.killAll!();
    expect(await sandbox.processes!()).toEqual([]);
    expect((await sandbox.exec(["cat", "/app/file"])).stdout).toBe("kept\n");
  });

  it("lists from the host what the listing script lists inside, pids in the container's namespace", async () => {
    await sandbox.exec({ shell: "(setsid env -i python3 -m http.server 8124 >/dev/null 2>&1 &); (setsid bash -c 'exec -a \"odd (name) x\" sleep 300' &); (sleep 301 &); sleep 1" }, { user: "0" });
    const info = await docker.getContainer((sandbox as DockerSandbox).id).inspect();
    const keepAlive = (sandbox as DockerSandbox).keepAlivePid;
    const host = await listProcessesOnHost(info.State.Pid, info.Id);
    if (host === null) throw new Error("this host could not read the container's cgroup");
    const inside = await sandbox.exec([TRUSTED_BUSYBOX, "sh", "-c", LIST_PROCESSES_SCRIPT], { user: "0" });
    const listed = parseProcessListing(host, keepAlive);
    expect(listed.map((p) => p.command)).toEqual(expect.arrayContaining(["python3 -m http.server 8124", "odd (name) x 300", "sleep 301"]));
    expect(listed.find((p) => p.command.includes("8124"))?.ports).toEqual([8124]);
    expect(listed).toEqual(parseProcessListing(inside.stdout, keepAlive));
    // Another container's pid is never read as this one's.
    expect(await listProcessesOnHost(process.pid, info.Id)).toBeNull();
    await sandbox.killAll!();
  });

  it("a listening process's ports are found while other processes exit (an exiting process's /proc/<pid>/net cannot be read)", async () => {
    // Chains of processes that exit every 5 ms beside a server: the listing must not read the
    // namespace's sockets through one of them.
    const hop = "sleep 0.005; exec /bin/sh -c '(/bin/sh /tmp/hop.sh &)'";
    await sandbox.exec({ shell: `(setsid env -i python3 -m http.server 8125 >/dev/null 2>&1 &); printf '%s\\n' "${hop}" > /tmp/hop.sh && for i in 1 2 3 4 5 6 7 8; do setsid env -i /bin/sh -c '(/bin/sh /tmp/hop.sh &)' >/dev/null 2>&1; done; sleep 1` }, { user: "0" });
    const info = await docker.getContainer((sandbox as DockerSandbox).id).inspect();
    const keepAlive = (sandbox as DockerSandbox).keepAlivePid;
    const found: (number[] | undefined)[] = [];
    for (let i = 0; i < 40; i++) {
      const listing = await listProcessesOnHost(info.State.Pid, info.Id);
      if (listing === null) throw new Error("this host could not read the container's cgroup");
      found.push(parseProcessListing(listing, keepAlive).find((p) => p.command.includes("8125"))?.ports);
    }
    expect(found.filter((ports) => ports?.[0] !== 8125)).toEqual([]);
    await sandbox.killAll!();
  });

  it("every host listing sees chains of processes that re-fork to a new pid every 5 ms", async () => {
    const hop = "sleep 0.005; exec /bin/sh -c '(/bin/sh /tmp/hop.sh &)'";
    await sandbox.exec({ shell: `printf '%s\\n' "${hop}" > /tmp/hop.sh && for i in 1 2 3 4 5 6; do setsid env -i /bin/sh -c '(/bin/sh /tmp/hop.sh &)' >/dev/null 2>&1; done` }, { user: "0" });
    const info = await docker.getContainer((sandbox as DockerSandbox).id).inspect();
    const keepAlive = (sandbox as DockerSandbox).keepAlivePid;
    const counts: number[] = [];
    for (let i = 0; i < 20; i++) {
      const listing = await listProcessesOnHost(info.State.Pid, info.Id);
      if (listing === null) throw new Error("this host could not read the container's cgroup");
      counts.push(parseProcessListing(listing, keepAlive).length);
    }
    expect(counts.filter((n) => n === 0)).toEqual([]);
    await sandbox.killAll!();
    expect(await sandbox.processes!()).toEqual([]);
  });

  it("reports files changed against the image, as the daemon sees them", async () => {
    await sandbox.exec({ shell: "echo 'exit 0' > /etc/profile.d/zz.sh && rm /usr/bin/tac" }, { user: "0" });
    const changes = await sandbox.changes!();
    expect(changes).toEqual(expect.arrayContaining([{ path: "/etc/profile.d/zz.sh", kind: "added" }, { path: "/usr/bin/tac", kind: "deleted" }]));
    expect(await sandbox.diskUsageBytes!()).toBeGreaterThan(0);
  });

  it("a sandbox stops by itself at the end of its lifetime, with nobody left to kill it", async () => {
    // 5 s of life: long enough that a loaded machine still sees it running right after create.
    const short = await runtime.create({ image: BUSYBOX, labels: tracked.labels, lifetimeMs: 5000 });
    try {
      expect(await short.isRunning!()).toBe(true);
      expect(await until(async () => !(await short.isRunning!()), 40_000, 200)).toBe(true);
    } finally {
      await short.kill();
    }
  });
});
