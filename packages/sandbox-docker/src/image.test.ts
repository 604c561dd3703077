import { randomUUID } from "node:crypto";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Dockerode from "dockerode";
import { ImageError, type ImageBuildUpdate } from "@proctor/sandbox";
import { afterAll, describe, expect, it } from "vitest";
import { dockerTestGate } from "./gate";
import { BUILD_REPOSITORY } from "./image";
import { DockerRuntime } from "./runtime";
import { BUSYBOX, testContainers, until } from "./test-helpers";

const docker = new Dockerode();
const run = await dockerTestGate(docker);

describe.skipIf(!run)("DockerRuntime.resolveImage", () => {
  const tracked = testContainers(docker, "image");
  const runtime = new DockerRuntime({ docker });
  const dirs: string[] = [];
  const builtTags = new Set<string>();

  afterAll(async () => {
    await tracked.cleanup();
    for (const tag of builtTags) await docker.getImage(tag).remove({ force: true });
    await Promise.all(dirs.map((dir) => rm(dir, { recursive: true, force: true })));
  });

  /** A build context whose Dockerfile is unique to this run, so it really builds once. */
  async function context(dockerfile: string, files: Record<string, string> = {}): Promise<string> {
    const dir = await mkdtemp(join(tmpdir(), "proctor-build-"));
    dirs.push(dir);
    await writeFile(join(dir, "Dockerfile"), `${dockerfile}\n# ${randomUUID()}\n`);
    for (const [name, body] of Object.entries(files)) await writeFile(join(dir, name), body);
    return dir;
  }

  it("uses a present image as it is", async () => {
    const lines: string[] = [];
    expect(await runtime.resolveImage({ image: BUSYBOX, buildContext: null, buildTimeoutMs: 1000, onProgress: (l) => lines.push(l) })).toBe(BUSYBOX);
    expect(lines).toEqual([]);
  });

  it("explains an image it can neither find nor pull nor build", async () => {
    const missing = runtime.resolveImage({ image: "proctor/not-here:nope", buildContext: null, buildTimeoutMs: 1000 });
    await expect(missing).rejects.toBeInstanceOf(ImageError);
    await expect(missing).rejects.toThrow(/"proctor\/not-here:nope" is not present locally and could not be pulled/);
    await expect(runtime.resolveImage({ image: null, buildContext: null, buildTimeoutMs: 1000 })).rejects.toThrow(/no image and has no build context/);
  });

  it("builds from a context when the image cannot be pulled, once, then reuses the build", async () => {
    const dir = await context(`FROM ${BUSYBOX}\nCOPY greeting.txt /greeting.txt\nRUN echo built-step`, { "greeting.txt": "hello from the context\n" });
    const progress: string[] = [];
    const builds: ImageBuildUpdate[] = [];
    const request = { image: "proctor/not-here:nope", buildContext: dir, buildTimeoutMs: 60_000, onProgress: (l: string) => progress.push(l), onBuild: (u: ImageBuildUpdate) => builds.push(u) };
    // Two concurrent requests share one build.
    const [first, second] = await Promise.all([runtime.resolveImage(request), runtime.resolveImage(request)]);
    builtTags.add(first);
    expect(second).toBe(first);
    expect(first).toMatch(new RegExp(`^${BUILD_REPOSITORY}/[0-9a-f]{64}$`));
    expect(progress.filter((l) => l.startsWith("building "))).toHaveLength(1);
    expect(progress.some((l) => l.includes("built-step"))).toBe(true);
    // onBuild: started, the build log's lines (the first at once, then at most once a second), finished; once for the shared build.
    expect(builds[0]).toEqual({ status: "started", image: first, context: dir });
    expect(builds.at(-1)).toMatchObject({ status: "finished", image: first, ok: true });
    expect(builds.filter((u) => u.status === "started")).toHaveLength(1);
    const lines = builds.filter((u) => u.status === "progress");
    expect(lines.length).toBeGreaterThanOrEqual(1);
    expect(lines[0]).toMatchObject({ image: first, line: expect.stringContaining("Step 1/") });

    await using sandbox = await runtime.create({ image: first, labels: tracked.labels });
    expect((await sandbox.exec(["cat", "/greeting.txt"])).stdout).toBe("hello from the context\n");

    progress.length = 0;
    builds.length = 0;
    expect(await runtime.resolveImage({ ...request, image: null })).toBe(first);
    expect(progress).toEqual([`using cached build ${first}`]);
    expect(builds).toEqual([]);
  });

  it("contextExclude leaves entries out of the image's name and of what the builder gets", async () => {
    const dir = await context(`FROM ${BUSYBOX}\nCOPY . /ctx\nRUN ls /ctx > /listing`, { "app.txt": "app\n", "run-tests.sh": "echo test\n" });
    await mkdir(join(dir, "tests"));
    await writeFile(join(dir, "tests", "test_a.py"), "a\n");
    const request = { image: null, buildContext: dir, contextExclude: ["tests", "run-tests.sh"], buildTimeoutMs: 60_000 };
    const image = await runtime.resolveImage(request);
    builtTags.add(image);
    await using sandbox = await runtime.create({ image, labels: tracked.labels });
    expect((await sandbox.exec(["cat", "/listing"])).stdout).toBe("Dockerfile\napp.txt\n");
    // A changed test file: the same image, no build.
    await writeFile(join(dir, "tests", "test_a.py"), "changed\n");
    const builds: ImageBuildUpdate[] = [];
    expect(await runtime.resolveImage({ ...request, onBuild: (u) => builds.push(u) })).toBe(image);
    expect(builds).toEqual([]);
  });

  it("applies the context's .dockerignore as docker build does: ignored files are neither sent nor part of the image's name", async () => {
    const dir = await context(`FROM ${BUSYBOX}\nCOPY . /ctx\nRUN find /ctx -type f | sort > /listing`, {
      "app.txt": "app\n",
      "solution.sh": "echo the answer\n",
      ".dockerignore": "# the task's own\nsolution.sh\ndata\n!data/keep.txt\n*.pyc\nDockerfile\n",
    });
    await mkdir(join(dir, "data", "deep"), { recursive: true });
    await writeFile(join(dir, "data", "keep.txt"), "kept\n");
    await writeFile(join(dir, "data", "drop.txt"), "dropped\n");
    await writeFile(join(dir, "data", "deep", "drop.txt"), "dropped\n");
    await writeFile(join(dir, "cache.pyc"), "bytes\n");
    const request = { image: null, buildContext: dir, buildTimeoutMs: 60_000 };
    const image = await runtime.resolveImage(request);
    builtTags.add(image);
    await using sandbox = await runtime.create({ image, labels: tracked.labels });
    // The Dockerfile is sent (the daemon reads it) and dropped by the daemon, as .dockerignore names it.
    expect((await sandbox.exec(["cat", "/listing"])).stdout).toBe("/ctx/.dockerignore\n/ctx/app.txt\n/ctx/data/keep.txt\n");
    // An ignored file changed: the same image, no build; a file that is sent changed: a new image.
    await writeFile(join(dir, "solution.sh"), "echo another answer\n");
    await writeFile(join(dir, "data", "deep", "drop.txt"), "changed\n");
    const builds: ImageBuildUpdate[] = [];
    expect(await runtime.resolveImage({ ...request, onBuild: (u) => builds.push(u) })).toBe(image);
    expect(builds).toEqual([]);
    await writeFile(join(dir, "data", "keep.txt"), "changed\n");
    const rebuilt = await runtime.resolveImage(request);
    builtTags.add(rebuilt);
    expect(rebuilt).not.toBe(image);
  });

  it("an image with a non-root USER gets log dirs its user can write, and execs run as that user", async () => {
    const dir = await context(`FROM ${BUSYBOX}\nUSER 1000:1000\nENTRYPOINT ["/bin/false"]`);
    const image = await runtime.resolveImage({ image: null, buildContext: dir, buildTimeoutMs: 60_000 });
    builtTags.add(image);
    await using sandbox = await runtime.create({ image, workdir: "/tmp/work", labels: tracked.labels });
    const result = await sandbox.exec({ shell: "id -u; echo log > /logs/agent/out.txt && stat -c '%u' /logs/agent /logs/verifier" });
    expect(result.stdout).toBe("1000\n1000\n0\n");
    expect((await sandbox.exec(["id", "-u"], { user: "0" })).stdout).toBe("0\n");
  });

  it("a failed build raises ImageError with the end of the build log", async () => {
    const dir = await context(`FROM ${BUSYBOX}\nRUN echo "the-marker-line" && exit 3`);
    const builds: ImageBuildUpdate[] = [];
    const error = await runtime.resolveImage({ image: null, buildContext: dir, buildTimeoutMs: 60_000, onBuild: (u) => builds.push(u) }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ImageError);
    expect((error as Error).message).toMatch(/failed/);
    expect((error as Error).message).toMatch(/the-marker-line/);
    expect(builds.at(-1)).toMatchObject({ status: "finished", ok: false, error: expect.stringMatching(/^Building .* failed/) });
  });

  it("a build past buildTimeoutMs is cancelled and explained", async () => {
    // A sleep unique to this test process (4 digits): the container listing below is daemon-wide.
    const sleep = `sleep ${1000 + (process.pid % 9000)}`;
    const dir = await context(`FROM ${BUSYBOX}\nRUN ${sleep}`);
    const started = Date.now();
    const error = await runtime.resolveImage({ image: null, buildContext: dir, buildTimeoutMs: 1500 }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ImageError);
    expect((error as Error).message).toMatch(/took longer than 1500 ms/);
    expect(Date.now() - started).toBeLessThan(30_000);
    // The daemon cancelled the build too: its RUN container goes away well before the sleep ends.
    const building = async () => (await docker.listContainers({ all: true })).filter((c) => c.Command.includes(sleep));
    await until(async () => (await building()).length === 0, 20_000, 200);
    expect(await building()).toEqual([]);
  });

  it("a context without a Dockerfile is refused up front", async () => {
    const dir = await mkdtemp(join(tmpdir(), "proctor-build-"));
    dirs.push(dir);
    await expect(runtime.resolveImage({ image: null, buildContext: dir, buildTimeoutMs: 1000 })).rejects.toThrow(/has no Dockerfile/);
  });
});
