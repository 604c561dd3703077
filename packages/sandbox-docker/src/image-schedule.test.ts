import { randomUUID } from "node:crypto";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Dockerode from "dockerode";
import { ImageError, type ImageBuildUpdate } from "@proctor/sandbox";
import { afterAll, describe, expect, it } from "vitest";
import { dockerTestGate } from "./gate";
import { DockerRuntime } from "./runtime";
import { BUSYBOX } from "./test-helpers";

const docker = new Dockerode();
const run = await dockerTestGate(docker);

describe.skipIf(!run)("build scheduling on Docker", () => {
  const dirs: string[] = [];
  const builtTags = new Set<string>();
  let baseLayers = 0;

  afterAll(async () => {
    for (const tag of builtTags) await docker.getImage(tag).remove({ force: true }).catch(() => undefined);
    await Promise.all(dirs.map((dir) => rm(dir, { recursive: true, force: true })));
  }, 60_000);

  async function dataDir(): Promise<string> {
    const dir = await mkdtemp(join(tmpdir(), "proctor-schedule-data-"));
    dirs.push(dir);
    return dir;
  }

  async function context(dockerfile: string, files: Record<string, string>): Promise<string> {
    const dir = await mkdtemp(join(tmpdir(), "proctor-schedule-"));
    dirs.push(dir);
    await writeFile(join(dir, "Dockerfile"), dockerfile);
    for (const [name, body] of Object.entries(files)) await writeFile(join(dir, name), body);
    return dir;
  }

  /**
   * Contexts sharing a slow prefix unique to this test (its RUN writes a random id, so every
   * execution of the step makes a different layer), then a COPY of a file of their own.
   */
  async function sharedPrefix(count: number): Promise<string[]> {
    const prefix = `FROM ${BUSYBOX}\nRUN echo ${randomUUID()} && sleep 2 && cat /proc/sys/kernel/random/uuid > /prefix-run\n`;
    return Promise.all(Array.from({ length: count }, (_, i) => context(`${prefix}COPY own.txt /own.txt\nRUN cat /own.txt\n`, { "own.txt": `task ${i}\n` })));
  }

  /** The layer each image's first step after FROM made: one distinct layer per execution of that step. */
  async function prefixLayers(images: string[]): Promise<Set<string>> {
    if (baseLayers === 0) baseLayers = (await docker.getImage(BUSYBOX).inspect()).RootFS.Layers?.length ?? 0;
    const layers = await Promise.all(images.map(async (image) => (await docker.getImage(image).inspect()).RootFS.Layers?.[baseLayers] ?? ""));
    return new Set(layers);
  }

  /** Counts builds running at once through onBuild's started and finished events. */
  function concurrency() {
    let now = 0;
    let peak = 0;
    return {
      onBuild: (update: ImageBuildUpdate) => {
        if (update.status === "started") peak = Math.max(peak, ++now);
        if (update.status === "finished") now--;
      },
      peak: () => peak,
    };
  }

  it("builds started together run a shared prefix once, and the images are what each Dockerfile says", async () => {
    const runtime = new DockerRuntime({ docker, warmPool: 0, imageDataDir: await dataDir(), buildConcurrency: 4 });
    const contexts = await sharedPrefix(4);
    const images = await Promise.all(contexts.map((buildContext) => runtime.resolveImage({ image: null, buildContext, buildTimeoutMs: 120_000 })));
    for (const image of images) builtTags.add(image);
    expect(new Set(images).size).toBe(4);
    expect((await prefixLayers(images)).size).toBe(1);
    // Each image still has its own file on top of the shared step.
    const tops = await Promise.all(images.map(async (image) => (await docker.getImage(image).inspect()).RootFS.Layers?.[baseLayers + 1]));
    expect(new Set(tops).size).toBe(4);
  }, 180_000);

  it("without prefix sharing the same builds run the prefix each (the effect the test above relies on)", async () => {
    const runtime = new DockerRuntime({ docker, warmPool: 0, imageDataDir: await dataDir(), buildConcurrency: 3, shareBuildPrefixes: false });
    const contexts = await sharedPrefix(3);
    const images = await Promise.all(contexts.map((buildContext) => runtime.resolveImage({ image: null, buildContext, buildTimeoutMs: 120_000 })));
    for (const image of images) builtTags.add(image);
    expect((await prefixLayers(images)).size).toBe(3);
  }, 180_000);

  it("never runs more builds at once than buildConcurrency", async () => {
    const runtime = new DockerRuntime({ docker, warmPool: 0, imageDataDir: await dataDir(), buildConcurrency: 2 });
    const counter = concurrency();
    // No shared prefix: each starts with a COPY of its own file.
    const contexts = await Promise.all(Array.from({ length: 5 }, (_, i) => context(`FROM ${BUSYBOX}\nCOPY own.txt /own.txt\nRUN sleep 1 && cat /own.txt\n`, { "own.txt": `${randomUUID()} ${i}\n` })));
    const images = await Promise.all(contexts.map((buildContext) => runtime.resolveImage({ image: null, buildContext, buildTimeoutMs: 120_000, onBuild: counter.onBuild })));
    for (const image of images) builtTags.add(image);
    expect(new Set(images).size).toBe(5);
    expect(counter.peak()).toBeGreaterThanOrEqual(1);
    expect(counter.peak()).toBeLessThanOrEqual(2);
  }, 180_000);

  it("a first build cancelled in the shared prefix lets the waiting builds go on and succeed", async () => {
    const runtime = new DockerRuntime({ docker, warmPool: 0, imageDataDir: await dataDir(), buildConcurrency: 4 });
    const [first, ...others] = await sharedPrefix(3);
    const controller = new AbortController();
    let started!: () => void;
    const firstStarted = new Promise<void>((resolve) => {
      started = resolve;
    });
    const leading = runtime.resolveImage({
      image: null,
      buildContext: first as string,
      buildTimeoutMs: 120_000,
      signal: controller.signal,
      onBuild: (update) => (update.status === "started" ? started() : undefined),
    });
    const failed = leading.then(
      () => null,
      (error: unknown) => error,
    );
    await firstStarted;
    const waiting = others.map((buildContext) => runtime.resolveImage({ image: null, buildContext, buildTimeoutMs: 120_000 }));
    controller.abort();
    expect(await failed).toBeInstanceOf(ImageError);
    const images = await Promise.all(waiting);
    for (const image of images) builtTags.add(image);
    expect(images).toHaveLength(2);
    expect((await prefixLayers(images)).size).toBe(1);
  }, 180_000);
});
