import { hostname } from "node:os";
import type Dockerode from "dockerode";
import { LABELS } from "@proctor/sandbox";
import { describe, expect, it } from "vitest";
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
