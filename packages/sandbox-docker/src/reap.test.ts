import { mkdir, mkdtemp, readdir, rm } from "node:fs/promises";
import { hostname, tmpdir } from "node:os";
import { join } from "node:path";
import type Dockerode from "dockerode";
import { LABELS, ownedTempPrefix } from "@proctor/sandbox";
import { describe, expect, it } from "vitest";
import { CHANNEL_TEMP_PREFIX } from "./channel";
import { formatOwner } from "./owner";
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
  it("a killed process's, whatever removed its containers; a live process's stay", async () => {
    const root = await mkdtemp(join(tmpdir(), "proctor-reap-test-"));
    const saved = process.env.TMPDIR;
    process.env.TMPDIR = root; // os.tmpdir() reads it on every call
    try {
      const dead = `${ownedTempPrefix(CHANNEL_TEMP_PREFIX, 4_194_000, "12345")}Ab3dE9`; // no such pid
      const live = `${ownedTempPrefix(CHANNEL_TEMP_PREFIX)}Lm8nO1`; // this process
      for (const name of [dead, live]) await mkdir(join(root, name));
      const docker = { listContainers: async () => [] } as unknown as Dockerode;
      const runtime = new DockerRuntime({ docker, watchdog: false, warmPool: 0 });
      await expect(runtime.reap()).resolves.toBe(0);
      expect(await readdir(root)).toEqual([live]);
    } finally {
      if (saved === undefined) delete process.env.TMPDIR;
      else process.env.TMPDIR = saved;
      await rm(root, { recursive: true, force: true });
    }
  });
});
