import Dockerode from "dockerode";
import { afterAll, describe, expect, it } from "vitest";
import { dockerTestGate } from "./gate";
import { DockerRuntime } from "./runtime";
import { oomKillsOnHost } from "./sandbox";
import { TRUSTED_BUSYBOX } from "./toolchain";
import { testContainers } from "./test-helpers";

const docker = new Dockerode();
const run = await dockerTestGate(docker);

describe.skipIf(!run)("the OOM count of a running sandbox", () => {
  const tracked = testContainers(docker, "oom");
  const runtime = new DockerRuntime({ docker, warmPool: 0, lifetimeStepMs: 1000 });
  afterAll(async () => {
    await runtime.drain();
    await tracked.cleanup();
  });

  it("is read from the host's cgroup and equals the container's own count", async () => {
    const sandbox = await runtime.create({ image: "proctor/base:bookworm", memoryMb: 64, labels: tracked.labels });
    const inside = async () => {
      const result = await sandbox.exec([TRUSTED_BUSYBOX, "sh", "-c", "cat /sys/fs/cgroup/memory.events 2>/dev/null || cat /sys/fs/cgroup/memory/memory.oom_control"], { user: "0" });
      return Number(/^oom_kill (\d+)$/m.exec(result.stdout)?.[1]);
    };
    expect(await sandbox.outOfMemoryKills?.()).toBe(0);
    const hog = await sandbox.exec(["python3", "-c", "x = bytearray(1024 * 1024 * 1024)"]);
    expect(hog.exitCode).toBe(137);
    const count = await sandbox.outOfMemoryKills?.();
    expect(count).toBeGreaterThanOrEqual(1);
    expect(count).toBe(await inside());
    const info = await docker.getContainer(sandbox.id).inspect();
    expect(await oomKillsOnHost(info.State.Pid, info.Id)).toBe(count);
    // A pid whose cgroup is not this container's is never read.
    expect(await oomKillsOnHost(process.pid, info.Id)).toBeNull();
    await sandbox.kill();
  });
});

describe.skipIf(!run)("the process listing of a running sandbox", () => {
  const tracked = testContainers(docker, "listing");
  const runtime = new DockerRuntime({ docker, warmPool: 0, lifetimeStepMs: 1000 });
  afterAll(async () => {
    await runtime.drain();
    await tracked.cleanup();
  });

  it("follows the container through a killAll (a new init, so a new host pid)", async () => {
    const sandbox = await runtime.create({ image: "proctor/base:bookworm", labels: tracked.labels });
    const sleeps = async () => ((await sandbox.processes?.()) ?? []).map((p) => p.command).filter((command) => /^sleep 10\d\d$/.test(command));
    // The exec returns once its shell has forked: the sleep may still be `setsid` for a moment.
    const listed = async (expected: string[]) => {
      const end = Date.now() + 10_000;
      while (JSON.stringify(await sleeps()) !== JSON.stringify(expected) && Date.now() < end) await new Promise((r) => setTimeout(r, 50));
      return sleeps();
    };
    expect(await sleeps()).toEqual([]);
    await sandbox.exec({ shell: "setsid sleep 1001 >/dev/null 2>&1 &" });
    expect(await listed(["sleep 1001"])).toEqual(["sleep 1001"]);
    const before = (await docker.getContainer(sandbox.id).inspect()).State.Pid;
    await sandbox.killAll?.();
    expect((await docker.getContainer(sandbox.id).inspect()).State.Pid).not.toBe(before);
    expect(await sleeps()).toEqual([]);
    await sandbox.exec({ shell: "setsid sleep 1002 >/dev/null 2>&1 &" });
    expect(await listed(["sleep 1002"])).toEqual(["sleep 1002"]);
    await sandbox.kill();
  });
});
