import { mkdir, mkdtemp, readdir, rm } from "node:fs/promises";
import { hostname, tmpdir } from "node:os";
import { join } from "node:path";
import type Dockerode from "dockerode";
import { LABELS } from "@proctor/sandbox";
import { describe, expect, it } from "vitest";
import { channelDirPrefix } from "./channel";
import { formatOwner, processStartTime } from "./owner";
import { DockerRuntime } from "./runtime";

/** The daemon's answers to a reap, scripted: list one dead owner's container, then fail its removal. */
function daemonRefusingRemoval(status: number, message: string): Dockerode {
  // This host, a pid no process has (near pid_max): an owner that is gone.
  const dead = formatOwner({ host: hostname(), pid: 4_194_000, startTime: null });
  return {
    listContainers: async () => [{ Id: "c1", Labels: { [LABELS.managed]: "true", [LABELS.owner]: dead } }],
    getContainer: () => ({
      remove: async () => {
        throw Object.assign(new Error(`(HTTP code ${status})`), { statusCode: status, json: { message } });
      },
    }),
  } as unknown as Dockerode;
}

describe("reap when the daemon refuses a removal", () => {
  it.each([
    [404, "No such container: c1"],
    [409, "removal of container c1 is already in progress"],
  ])("%i %s: another remover got there first; not counted, not an error", async (status, message) => {
    const runtime = new DockerRuntime({ docker: daemonRefusingRemoval(status, message), watchdog: false, warmPool: 0 });
    await expect(runtime.reap()).resolves.toBe(0);
  });

  it("any other refusal is an error naming the container and the daemon's reason", async () => {
    const runtime = new DockerRuntime({ docker: daemonRefusingRemoval(500, "driver failed to remove root filesystem"), watchdog: false, warmPool: 0 });
    await expect(runtime.reap()).rejects.toThrow(/Reaping container c1 failed: driver failed to remove root filesystem/);
  });
});

describe("reap removes exec-channel directories of dead processes from the temp dir", () => {
  it("a killed process's, whatever removed its containers; a live process's and other names stay", async () => {
    const root = await mkdtemp(join(tmpdir(), "proctor-reap-test-"));
    const saved = process.env.TMPDIR;
    process.env.TMPDIR = root; // os.tmpdir() reads it on every call
    try {
      const make = async (name: string) => mkdir(join(root, name));
      await make(`${channelDirPrefix(4_194_000, "12345")}Ab3dE9`); // no such pid: gone
      await make(`${channelDirPrefix(4_194_001, null)}Xy7kQ2`); // no such pid, start unknown: gone
      await make(`${channelDirPrefix(process.pid, "1")}Pq4rS5`); // this pid, but another start time: a process before this one
      await make(`${channelDirPrefix(process.pid, processStartTime(process.pid))}Lm8nO1`); // this live process
      await make("proctor-channel-Zz9yX8"); // another naming: not ours to judge
      await make("proctor-channel-4194000-12345-too-long"); // not a channel directory name
      const docker = { listContainers: async () => [] } as unknown as Dockerode;
      const runtime = new DockerRuntime({ docker, watchdog: false, warmPool: 0 });
      await expect(runtime.reap()).resolves.toBe(0);
      expect((await readdir(root)).sort()).toEqual(
        [`${channelDirPrefix(process.pid, processStartTime(process.pid))}Lm8nO1`, "proctor-channel-4194000-12345-too-long", "proctor-channel-Zz9yX8"].sort(),
      );
    } finally {
      if (saved === undefined) delete process.env.TMPDIR;
      else process.env.TMPDIR = saved;
      await rm(root, { recursive: true, force: true });
    }
  });
});
