import { spawn } from "node:child_process";
import { join } from "node:path";
import Dockerode from "dockerode";
import { afterAll, describe, expect, it } from "vitest";
import { dockerTestGate } from "./gate";
import { TEST_LABEL, testContainers } from "./test-helpers";

const docker = new Dockerode();
const run = await dockerTestGate(docker);

async function containersWith(label: string): Promise<number> {
  return (await docker.listContainers({ all: true, filters: { label: [`${TEST_LABEL}=${label}`] } })).length;
}

describe.skipIf(!run)("the sandbox watchdog", () => {
  const tracked = testContainers(docker, "watchdog");
  afterAll(async () => {
    await tracked.cleanup();
  });

  it("removes the containers of an owner killed with -9, with no later command, and leaves a live owner's alone", async () => {
    const label = tracked.labels[TEST_LABEL] as string;
    const child = spawn(process.execPath, ["--conditions=@proctor/source", "--import", "tsx", join(import.meta.dirname, "fixtures", "owner-child.ts"), label], {
      cwd: join(import.meta.dirname, ".."),
      stdio: ["ignore", "pipe", "inherit"],
    });
    const ready = await new Promise<string>((resolve, reject) => {
      let out = "";
      child.stdout.on("data", (chunk: Buffer) => {
        out += chunk.toString();
        const match = /ready (\w+)/.exec(out);
        if (match) resolve(match[1] as string);
      });
      child.once("exit", (code) => reject(new Error(`the owner exited with ${code} before it was ready: ${out}`)));
    });
    expect(ready).toMatch(/^[0-9a-f]{64}$/);
    // The watchdog looks every 2 s; a live owner keeps its container.
    await new Promise((resolve) => setTimeout(resolve, 5000));
    expect(await containersWith(label)).toBe(1);

    const killedAt = Date.now();
    child.kill("SIGKILL");
    let left = 1;
    while (left > 0 && Date.now() - killedAt < 60_000) {
      await new Promise((resolve) => setTimeout(resolve, 500));
      left = await containersWith(label);
    }
    expect(left).toBe(0);
    console.log(`watchdog: container removed ${Date.now() - killedAt} ms after kill -9 of its owner`);
  }, 90_000);
});
