import { randomBytes } from "node:crypto";
import { mkdir, mkdtemp, rm, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Dockerode from "dockerode";
import { afterAll, describe, expect, it } from "vitest";
import { dockerTestGate } from "./gate";
import { ImageBuildLimitError } from "./image";
import { buildContextBytes, buildImageWithLimits } from "./limited-build";
import { DockerRuntime } from "./runtime";
import { BUSYBOX, until } from "./test-helpers";

const docker = new Dockerode();
const run = await dockerTestGate(docker);
const MB = 1024 * 1024;
const silent = { debug: () => undefined, info: () => undefined, warn: () => undefined, error: () => undefined };

/** Every image (intermediate steps included) made by a step whose command holds `nonce`. */
async function imagesFromNonce(nonce: string): Promise<string[]> {
  const ids = (await docker.listImages({ all: true })).map((i) => i.Id);
  const infos = await Promise.all(ids.map((id) => docker.getImage(id).inspect().catch(() => null)));
  return infos.flatMap((info) => (info !== null && JSON.stringify(info.ContainerConfig?.Cmd ?? []).includes(nonce) ? [info.Id] : []));
}

describe("buildContextBytes", () => {
  it("sums the files under the context, nested ones too, and counts a symlink as a link, never what it points to", async () => {
    const dir = await mkdtemp(join(tmpdir(), "proctor-context-bytes-"));
    try {
      await writeFile(join(dir, "Dockerfile"), "x".repeat(100));
      await mkdir(join(dir, "sub", "deeper"), { recursive: true });
      await writeFile(join(dir, "sub", "deeper", "data"), Buffer.alloc(5000));
      const target = "/etc/hostname";
      await symlink(target, join(dir, "link"));
      await symlink("/", join(dir, "root"));
      expect(await buildContextBytes(dir)).toBe(100 + 5000 + target.length + 1);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});

describe.skipIf(!run)("buildImageWithLimits", () => {
  const runtime = new DockerRuntime({ docker });
  const dirs: string[] = [];
  const tags = new Set<string>();

  afterAll(async () => {
    for (const tag of tags) await docker.getImage(tag).remove({ force: true }).catch(() => undefined);
    await Promise.all(dirs.map((dir) => rm(dir, { recursive: true, force: true })));
  });

  async function context(steps: string): Promise<{ dir: string; nonce: string }> {
    const nonce = randomBytes(8).toString("hex");
    const dir = await mkdtemp(join(tmpdir(), "proctor-limited-build-"));
    dirs.push(dir);
    await writeFile(join(dir, "Dockerfile"), `FROM ${BUSYBOX}\nRUN echo ${nonce}\n${steps}\n`);
    return { dir, nonce };
  }

  it("returns the tag of an image within the limits", async () => {
    const { dir, nonce } = await context("RUN echo small > /small");
    const tag = await buildImageWithLimits(runtime, { buildContext: dir }, { buildTimeoutMs: 300_000, maxBytes: 512 * MB, buildNetwork: false }, { logger: silent });
    tags.add(tag);
    expect((await docker.getImage(tag).inspect()).Config.Labels?.["proctor.build-context"]).toBe(dir);
    // The step images are found by their nonce (so the checks below that none is left can fail).
    expect((await imagesFromNonce(nonce)).length).toBeGreaterThan(0);
  });

  it("removes an image over maxBytes, its steps too, and says which limit with its value", async () => {
    const { dir, nonce } = await context("RUN dd if=/dev/zero of=/big bs=1048576 count=6");
    const base = (await docker.getImage(BUSYBOX).inspect()).Size;
    const maxBytes = base + 2 * MB;
    const error = await buildImageWithLimits(runtime, { buildContext: dir }, { buildTimeoutMs: 300_000, maxBytes, buildNetwork: false }, { logger: silent }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ImageBuildLimitError);
    const limit = error as ImageBuildLimitError;
    expect(limit.limit).toBe("maxBytes");
    expect(limit.value).toBe(maxBytes);
    expect(limit.actual).toBeGreaterThan(maxBytes);
    expect(limit.message).toMatch(/is \d+\.\d MB, over the limit of \d+(\.\d+)? MB; it was removed/);
    expect(await imagesFromNonce(nonce)).toEqual([]);
    // The FROM image is never removed.
    await expect(docker.getImage(BUSYBOX).inspect()).resolves.toBeTruthy();
  });

  it("cancels a build over buildTimeoutMs with one timer and leaves no image or build container", async () => {
    const sleep = `sleep ${1000 + Math.floor(Math.random() * 1000)}`;
    const { dir, nonce } = await context(`RUN ${sleep}`);
    const error = await buildImageWithLimits(runtime, { buildContext: dir }, { buildTimeoutMs: 5_000, maxBytes: 512 * MB, buildNetwork: false }, { logger: silent }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ImageBuildLimitError);
    expect((error as ImageBuildLimitError).limit).toBe("buildTimeoutMs");
    expect((error as ImageBuildLimitError).value).toBe(5_000);
    expect((error as Error).message).toMatch(/took longer than 5000 ms and was cancelled/);
    expect(await imagesFromNonce(nonce)).toEqual([]);
    const sleeping = async () => (await docker.listContainers({ all: true })).filter((c) => c.Command.includes(sleep)).length;
    expect(await until(async () => (await sleeping()) === 0, 120_000)).toBe(true);
  });
});
