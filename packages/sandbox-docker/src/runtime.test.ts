import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import Dockerode from "dockerode";
import { ImageError, LABELS, type Sandbox } from "@proctor/sandbox";
import { afterAll, describe, expect, it } from "vitest";
import { dockerTestGate } from "./gate";
import { DockerRuntime, DROPPED_CAPABILITIES, POOLED_LABEL } from "./runtime";
import { BUSYBOX, TEST_LABEL, channelDirOf, testContainers } from "./test-helpers";

const docker = new Dockerode();
const run = await dockerTestGate(docker);

describe.skipIf(!run)("DockerRuntime.create", () => {
  const tracked = testContainers(docker, "runtime");
  const runtime = new DockerRuntime({ docker });
  afterAll(async () => {
    await runtime.drain();
    await tracked.cleanup();
  });

  it("applies limits, labels and security defaults visible in inspect", async () => {
    await using sandbox = await runtime.create({
      image: BUSYBOX,
      cpus: 0.5,
      memoryMb: 256,
      pidsLimit: 100,
      env: { TASK_FLAG: "yes" },
      labels: { ...tracked.labels, [LABELS.run]: "run-1", [LABELS.trial]: "trial/1" },
    });
    const info = await docker.getContainer(sandbox.id).inspect();
    expect(info.HostConfig).toMatchObject({
      NanoCpus: 500_000_000,
      Memory: 256 * 1024 * 1024,
      PidsLimit: 100,
      NetworkMode: "none",
      Privileged: false,
      Init: true,
    });
    expect(info.HostConfig.SecurityOpt).toContain("no-new-privileges");
    expect(info.HostConfig.CapDrop).toEqual([...DROPPED_CAPABILITIES]);
    expect(info.Config.Labels).toMatchObject({
      [LABELS.managed]: "true",
      [LABELS.run]: "run-1",
      [LABELS.trial]: "trial/1",
      [LABELS.owner]: runtime.ownerId,
      ...tracked.labels,
    });
    expect(info.Config.Env).toEqual(expect.arrayContaining(["TASK_FLAG=yes", "PROCTOR_WORKDIR=/app", "PROCTOR_AGENT_LOGS_DIR=/logs/agent"]));
    // The keep-alive shell runs under docker-init, which reaps zombies.
    const tree = await sandbox.exec({ shell: "cat /proc/1/comm; ls -d /app /logs/agent /logs/verifier" });
    expect(tree.stdout).toBe("docker-init\n/app\n/logs/agent\n/logs/verifier\n");
  });

  it("defaults pids to 1024 and honours a workdir that the image lacks", async () => {
    await using sandbox = await runtime.create({ image: BUSYBOX, workdir: "/srv/task", labels: tracked.labels });
    expect(sandbox.workdir).toBe("/srv/task");
    expect((await docker.getContainer(sandbox.id).inspect()).HostConfig.PidsLimit).toBe(1024);
    expect((await sandbox.exec(["sh", "-c", "pwd; echo $PROCTOR_WORKDIR"])).stdout).toBe("/srv/task\n/srv/task\n");
  });

  it("without network there is no interface but loopback and traffic fails; with it there is", async () => {
    await using closed = await runtime.create({ image: BUSYBOX, labels: tracked.labels });
    const ifaces = await closed.exec({ shell: "ls /sys/class/net" });
    expect(ifaces.stdout.split(/\s+/).filter(Boolean)).toEqual(["lo"]);
    const fetch = await closed.exec(["nc", "-w", "3", "10.255.255.1", "80"], { stdin: "" });
    expect(fetch.exitCode).not.toBe(0);
    expect(fetch.stderr).toMatch(/unreachable/i);

    await using open = await runtime.create({ image: BUSYBOX, network: true, labels: tracked.labels });
    expect((await docker.getContainer(open.id).inspect()).HostConfig.NetworkMode).toBe("bridge");
    expect((await open.exec({ shell: "ls /sys/class/net" })).stdout).toMatch(/eth0/);
  });

  it("runs 16 sandboxes at once", async () => {
    const sandboxes: Sandbox[] = [];
    try {
      await Promise.all(
        Array.from({ length: 16 }, async (_, i) => {
          const sandbox = await runtime.create({ image: BUSYBOX, labels: tracked.labels });
          sandboxes.push(sandbox);
          const result = await sandbox.exec({ shell: `echo sandbox-${i}` });
          expect(result.stdout).toBe(`sandbox-${i}\n`);
        }),
      );
      expect(new Set(sandboxes.map((s) => s.id)).size).toBe(16);
    } finally {
      await Promise.all(sandboxes.map((s) => s.kill()));
      await runtime.drain();
    }
    const left = await docker.listContainers({ all: true, filters: { id: sandboxes.map((s) => s.id) } });
    expect(left).toEqual([]);
  });

  it("pool: from the second create of a kind, sandboxes started ahead of demand; drain leaves none", async () => {
    const pooled = new DockerRuntime({ docker, warmPool: 2 });
    const runLabels = { ...tracked.labels, [LABELS.run]: `pool-${process.pid}` };
    const ofRun = () => docker.listContainers({ all: true, filters: { label: [`${LABELS.run}=pool-${process.pid}`] } });
    try {
      const first = await pooled.create({ image: BUSYBOX, labels: { ...runLabels, [LABELS.trial]: "t/1" } });
      expect((await docker.getContainer(first.id).inspect()).Config.Labels[POOLED_LABEL]).toBeUndefined();
      const second = await pooled.create({ image: BUSYBOX, labels: { ...runLabels, [LABELS.trial]: "t/2" } });
      const info = await docker.getContainer(second.id).inspect();
      expect(info.Config.Labels).toMatchObject({ [POOLED_LABEL]: "true", [LABELS.run]: `pool-${process.pid}`, [LABELS.owner]: pooled.ownerId, [LABELS.managed]: "true" });
      expect(info.Name).toMatch(/^\/proctor-t-2-[0-9a-f]{8}$/);
      expect((await second.exec({ shell: "ls -d /logs/agent /logs/verifier" })).exitCode).toBe(0);
      // Spares are kept for the run: every container of it is findable by its run label.
      await expect.poll(async () => (await ofRun()).length, { timeout: 20_000 }).toBeGreaterThan(2);
      // A different kind (here: env) never gets those spares.
      const other = await pooled.create({ image: BUSYBOX, env: { X: "1" }, labels: { ...runLabels, [LABELS.trial]: "t/3" } });
      expect((await docker.getContainer(other.id).inspect()).Config.Labels[POOLED_LABEL]).toBeUndefined();
      await Promise.all([first.kill(), second.kill(), other.kill()]);
    } finally {
      await pooled.drain();
    }
    expect(await ofRun()).toEqual([]);
  });

  it("refuses an image that is not present", async () => {
    await expect(runtime.create({ image: "proctor/not-here:nope", labels: tracked.labels })).rejects.toBeInstanceOf(ImageError);
  });

  it("reap removes the sandbox of an owner killed with -9 and keeps live owners' ones", async () => {
    await using mine = await runtime.create({ image: BUSYBOX, labels: tracked.labels });
    const fixture = fileURLToPath(new URL("./fixtures/crash-owner.ts", import.meta.url));
    const child = spawn(process.execPath, ["--conditions=@proctor/source", "--import", "tsx", fixture, String(tracked.labels[TEST_LABEL])], {
      stdio: ["ignore", "pipe", "inherit"],
    });
    const exited = new Promise((resolve) => child.once("exit", resolve));
    const line = await new Promise<string>((resolve, reject) => {
      createInterface({ input: child.stdout }).once("line", resolve);
      child.once("exit", (code) => reject(new Error(`fixture exited early with ${code}`)));
    });
    const { id, owner } = JSON.parse(line) as { id: string; owner: string };
    child.kill("SIGKILL");
    await exited;
    const byOwner = () => docker.listContainers({ all: true, filters: { label: [`${LABELS.owner}=${owner}`] } });
    expect((await byOwner()).map((c) => c.Id)).toEqual([id]);
    const channelDir = await channelDirOf(docker, id);
    expect(existsSync(channelDir)).toBe(true);

    expect(await runtime.reap()).toBeGreaterThanOrEqual(1);
    expect(await byOwner()).toEqual([]);
    // The dead owner's exec-channel directory on this host goes with its container.
    expect(existsSync(channelDir)).toBe(false);
    expect((await docker.getContainer(mine.id).inspect()).State.Running).toBe(true);
  });
});
