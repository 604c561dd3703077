import { execFileSync } from "node:child_process";
import { randomUUID } from "node:crypto";
import { cp, mkdir, mkdtemp, readFile, readdir, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { REGISTRY_BINARY, dockerTestGate, startRegistryServer, type RegistryServer } from "@proctor/sandbox-docker";
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { proctor, repoRoot } from "./test-support";

/** `docker image inspect` / `rmi` by the docker CLI (this package talks to Docker through the runtime only). */
const present = (tag: string) => {
  try {
    execFileSync("docker", ["image", "inspect", tag], { stdio: "ignore" });
    return true;
  } catch {
    return false;
  }
};
const removeImage = (tag: string) => execFileSync("docker", ["rmi", "-f", tag], { stdio: "ignore" });
const haveRegistry = (() => {
  try {
    execFileSync("sh", ["-c", `command -v ${REGISTRY_BINARY}`], { stdio: "ignore" });
    return true;
  } catch {
    if (process.env.CI === "true") throw new Error(`${REGISTRY_BINARY} is missing (CI=true): tools/ci/prepare-machine.sh installs it`);
    return false;
  }
})();
const run = haveRegistry && (await dockerTestGate());

describe.skipIf(!run)("proctor images and --image-registry", () => {
  let root: string;
  let registry: RegistryServer;
  const tags: string[] = [];

  beforeAll(async () => {
    root = await mkdtemp(join(tmpdir(), "proctor-images-cli-"));
    registry = await startRegistryServer();
  }, 30_000);

  afterAll(async () => {
    await registry?.close();
    for (const tag of tags) if (present(tag)) removeImage(tag);
    await rm(root, { recursive: true, force: true });
  }, 120_000);

  test("images build pushes each image once; a run on a host without them pulls them and builds nothing; ls names their tasks; prune --dry-run removes nothing", async () => {
    const tasks = join(root, "tasks");
    for (const id of ["img-one", "img-two"]) {
      await cp(join(repoRoot, "examples/tasks/greeting-file"), join(tasks, id), { recursive: true });
      await mkdir(join(tasks, id, "environment"));
      await writeFile(join(tasks, id, "environment", "Dockerfile"), `FROM proctor/base:bookworm\nRUN echo ${randomUUID()} > /id\nWORKDIR /app\n`);
    }
    const env = { PROCTOR_CACHE_DIR: join(root, "cache") };
    const built = await proctor(["images", "build", tasks, "--image-registry", registry.host, "-n", "2"], { env });
    expect(built.code, built.stderr).toBe(0);
    expect(built.stderr).toContain(`images: 2 image(s) for 2 task(s), 2 at once, shared through ${registry.host}`);
    const lines = built.stdout.trim().split("\n");
    expect(lines.filter((l) => /^\[[12]\/2\] built proctor-build\/[0-9a-f]{64} in \d+s \(img-(one|two)\)$/.test(l))).toHaveLength(2);
    expect(lines.at(-1)).toBe("images: 2 built, 0 reused, 0 pulled, 0 failed");
    for (const line of lines) {
      const tag = /(proctor-build\/[0-9a-f]{64})/.exec(line)?.[1];
      if (tag) tags.push(tag);
    }

    // Another host: the images are not here. The run pulls them from the registry and builds none.
    for (const tag of tags) removeImage(tag);
    const runs = join(root, "runs");
    const ran = await proctor(["run", tasks, "-a", "oracle", "--runtime", "docker", "-o", runs, "--run-id", "pulled", "--image-registry", registry.host], { env });
    expect(ran.code, ran.stderr).toBe(0);
    expect(ran.stderr).not.toMatch(/warning/);
    const events = await readFile(join(runs, "pulled", "events.jsonl"), "utf8");
    expect(events).not.toContain("image_build_started");
    const summary = JSON.parse(await readFile(join(runs, "pulled", "summary.json"), "utf8")) as { trials: { passed: number } };
    expect(summary.trials.passed).toBe(2);
    expect(tags.filter(present)).toEqual(tags);

    const ls = await proctor(["images", "ls", "--json"], { env });
    expect(ls.code, ls.stderr).toBe(0);
    const listed = (JSON.parse(ls.stdout) as { images: { tag: string; tasks: string[]; lastUsedAt: string | null }[] }).images.filter((i) => tags.includes(i.tag));
    expect(listed.map((i) => i.tasks).flat().sort()).toEqual(["img-one", "img-two"]);
    expect(listed.every((i) => i.lastUsedAt !== null)).toBe(true);

    const dry = await proctor(["images", "prune", "--dry-run", "--image-cache-gb", "0.000001"], { env });
    expect(dry.code, dry.stderr).toBe(0);
    expect(dry.stdout.trim().split("\n").at(-1)).toMatch(/^would remove \d+ task image\(s\); .* \(--dry-run: nothing was removed\)$/);
    // Used a moment ago: in use, so not even a dry run names them.
    for (const tag of tags) expect(dry.stdout).not.toContain(tag);
    expect(tags.filter(present)).toEqual(tags);
  }, 400_000);

  test("an unreachable registry or a bad --image-cache-gb is one clear line, before any run directory", async () => {
    const runs = join(root, "bad-runs");
    const task = join(repoRoot, "examples/tasks/greeting-file");
    const closed = `127.0.0.1:${(Number(registry.host.split(":")[1]) % 60000) + 1024}`;
    const unreachable = await proctor(["run", task, "--runtime", "docker", "-o", runs, "--image-registry", closed]);
    expect(unreachable.code).toBe(3);
    // After the line naming the agent, one line saying what is wrong.
    expect(unreachable.stderr.trim().split("\n").at(-1)).toBe(`proctor: image registry ${closed} does not answer (dial tcp ${closed}: connect: connection refused): start it, or fix --image-registry / PROCTOR_IMAGE_REGISTRY`);
    expect(unreachable.stderr.match(/^proctor:/gm)).toHaveLength(1);
    const budget = await proctor(["run", task, "--runtime", "docker", "-o", runs, "--image-cache-gb", "lots"]);
    expect(budget.code).toBe(2);
    expect(budget.stderr).toBe(`proctor: option '--image-cache-gb <n>' argument 'lots' is invalid. --image-cache-gb must be a positive number, got "lots"\n`);
    const fromEnv = await proctor(["images", "build", task], { env: { PROCTOR_IMAGE_CACHE_GB: "0" } });
    expect(fromEnv.code).toBe(2);
    expect(fromEnv.stderr).toBe(`proctor: PROCTOR_IMAGE_CACHE_GB must be a positive number of GB (e.g. 50 or 0.5), got "0"\n`);
    // With --queue the workers keep the images: the flag is refused, not ignored.
    const queued = await proctor(["run", task, "--queue", "redis://127.0.0.1:1/0", "-o", runs, "--image-registry", registry.host]);
    expect(queued.code).toBe(2);
    expect(queued.stderr.trim().split("\n").at(-1)).toBe("proctor: --image-registry: with --queue the workers build, pull and keep the images; give it to proctor worker (or set PROCTOR_IMAGE_REGISTRY where the workers run)");
    expect(await readdir(runs).catch(() => [])).toEqual([]);
  }, 120_000);
});
