// deploy/compose.yaml end to end: the images built offline, the stack up with the compose tool
// Debian packages (with its registry profile), one batch submitted with `proctor submit`, graded
// by two workers, one of them restarted mid-batch, then everything torn down with nothing left.
import { execFile, execFileSync, spawn, spawnSync } from "node:child_process";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, test } from "vitest";

const repoRoot = resolve(import.meta.dirname, "../..");
const project = `proctor-deploy-test-${process.pid}`;
const userToken = "deploy-test-user-token-0123456789";
const workerToken = "deploy-test-worker-token-0123456789";
const TASKS = 8;

function dockerAnswers(): boolean {
  return spawnSync("docker", ["version", "--format", "{{.Server.Version}}"], { stdio: "ignore" }).status === 0;
}
const haveDocker = dockerAnswers();
if (!haveDocker && process.env.CI === "true") throw new Error("deploy/compose.test.ts: no Docker engine answers, and CI=true allows no skip (tools/docker/ensure-engine.sh starts one)");
if (!haveDocker) process.stderr.write("SKIPPED deploy/compose.test.ts: no Docker engine answers\n");

/** `docker compose` when the plugin is there, else Debian's docker-compose. */
function composeCommand(): string[] {
  if (spawnSync("docker", ["compose", "version"], { stdio: "ignore" }).status === 0) return ["docker", "compose"];
  return ["docker-compose"];
}

let work: string;
let port: number;
let compose: (args: string[]) => Promise<string>;
/**
 * Long commands (image builds, compose up/down, a draining restart) run asynchronously: a
 * synchronous one blocks this worker's event loop for minutes, and vitest's own calls from it
 * then time out ("Timeout calling onTaskUpdate", an unhandled error that fails the run).
 */
const run = (file: string, args: string[], options: { cwd?: string; env?: NodeJS.ProcessEnv } = {}) =>
  promisify(execFile)(file, args, { ...options, encoding: "utf8", maxBuffer: 256 * 1024 * 1024 });
let base: string;
let registry: string;

async function freePort(): Promise<number> {
  return new Promise((done, fail) => {
    const server = createServer();
    server.once("error", fail);
    server.listen(0, "127.0.0.1", () => {
      const { port: p } = server.address() as { port: number };
      server.close(() => done(p));
    });
  });
}

async function until<T>(what: string, check: () => Promise<T | null | false>, timeoutMs = 600_000): Promise<T> {
  process.stderr.write(`deploy test: waiting for ${what}\n`);
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check().catch(() => null);
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 250));
  }
}

const git = (cwd: string, ...args: string[]) =>
  execFileSync("git", ["-c", "user.name=t", "-c", "user.email=t@t", ...args], { cwd, env: { ...process.env, GIT_AUTHOR_DATE: "2024-01-01T00:00:00Z", GIT_COMMITTER_DATE: "2024-01-01T00:00:00Z" } })
    .toString()
    .trim();

/**
 * A term-executor batch of TASKS tasks on a repository the workers clone over HTTP from a
 * fixture container on the compose network; the agent takes a few seconds per task.
 */
async function submission(): Promise<string> {
  const repo = join(work, "repo");
  await mkdir(repo);
  git(repo, "init", "-q");
  await writeFile(join(repo, "README"), "fixture\n");
  git(repo, "add", ".");
  git(repo, "commit", "-qm", "init");
  const commit = git(repo, "rev-parse", "HEAD");
  git(work, "clone", "-q", "--bare", repo, join(work, "www", "repo.git"));
  git(join(work, "www", "repo.git"), "update-server-info"); // served as static files (git's dumb HTTP)
  const sub = join(work, "sub");
  for (let i = 1; i <= TASKS; i++) {
    const task = join(sub, "tasks", `t${i}`);
    await mkdir(join(task, "tests"), { recursive: true });
    await writeFile(join(task, "workspace.yaml"), `repo: http://git-fixture:8000/repo.git\nbase_commit: ${commit}\n`);
    await writeFile(join(task, "prompt.md"), "Write done to out.txt\n");
    await writeFile(join(task, "tests", "check.sh"), "grep -qx done out.txt\n");
  }
  await mkdir(join(sub, "agent_code"));
  await writeFile(join(sub, "agent_code", "run.sh"), '#!/bin/bash\nsleep 6\necho done > "$REPO_DIR/out.txt"\n');
  const archive = join(work, "batch.tar.gz");
  execFileSync("tar", ["-czf", archive, "-C", sub, "."]);
  return archive;
}

/** The test's additions to deploy/compose.yaml: the git fixture, and nothing else changed. */
async function override(): Promise<string> {
  const file = join(work, "compose.test.yaml");
  await writeFile(
    file,
    `services:\n  git-fixture:\n    image: proctor/base:bookworm\n    command: ["python3", "-m", "http.server", "8000", "--directory", "/srv/www"]\n    volumes:\n      - ${join(work, "www")}:/srv/www:ro\n`,
  );
  return file;
}

/**
 * `proctor images build` of a one-task dataset into the compose stack's registry, from this host:
 * its exit, output and the registry's proctor-build tags afterwards.
 */
async function imagePushed(): Promise<{ code: number; output: string; tags: string[] }> {
  const task = join(work, "image-task");
  await mkdir(join(task, "environment"), { recursive: true });
  await mkdir(join(task, "tests"), { recursive: true });
  await writeFile(join(task, "task.toml"), 'version = "1.0"\n');
  await writeFile(join(task, "instruction.md"), "Nothing to do.\n");
  await writeFile(join(task, "tests", "test.sh"), "#!/bin/sh\necho 1 > /logs/verifier/reward.txt\n");
  await writeFile(join(task, "environment", "Dockerfile"), `FROM proctor/busybox:latest\nRUN echo ${project} > /stamp\n`);
  const cli = [process.execPath, "--conditions=@proctor/source", "--import", "tsx", join(repoRoot, "apps/cli/src/main.ts")];
  const built = await run(cli[0] as string, [...cli.slice(1), "images", "build", task, "--image-registry", registry], { cwd: repoRoot, env: { ...process.env, FORCE_COLOR: "0" } }).then(
    (done) => ({ code: 0, output: done.stdout + done.stderr }),
    (error: { code?: number; stdout?: string; stderr?: string }) => ({ code: error.code ?? 1, output: `${error.stdout ?? ""}${error.stderr ?? ""}` }),
  );
  for (const [tag] of built.output.matchAll(/proctor-build\/[0-9a-f]{64}/g)) await run("docker", ["rmi", tag]).catch(() => undefined);
  const list = (await (await fetch(`http://${registry}/v2/proctor-build/tags/list`, { signal: AbortSignal.timeout(5000) })).json().catch(() => ({}))) as { tags?: string[] };
  return { ...built, tags: list.tags ?? [] };
}

interface WorkerView {
  name: string;
  running_trials: string[];
  finished_trials: number;
}
const workers = async (): Promise<WorkerView[]> =>
  ((await (await fetch(`${base}/v1/workers`, { headers: { authorization: `Bearer ${workerToken}` }, signal: AbortSignal.timeout(5000) })).json()) as { workers: WorkerView[] }).workers;

describe.skipIf(!haveDocker)("deploy/compose.yaml", () => {
  beforeAll(async () => {
    work = await mkdtemp(join(tmpdir(), "proctor-deploy-"));
    port = await freePort();
    await run("bash", [join(repoRoot, "tools/images/build.sh"), "deploy"], { cwd: repoRoot, env: { ...process.env, PROCTOR_IMAGES_BUILT: process.env.PROCTOR_IMAGES_BUILT ?? "" } }).catch((error: { stdout?: string; stderr?: string }) => {
      throw new Error(`pnpm images --deploy failed:\n${error.stdout ?? ""}${error.stderr ?? ""}`);
    });
    const [cmd, ...pre] = composeCommand() as [string, ...string[]];
    const files = ["-f", join(repoRoot, "deploy/compose.yaml"), "-f", await override()];
    // The registry profile on, and the workers given it as this host's daemon reaches it (loopback).
    registry = `127.0.0.1:${await freePort()}`;
    const env = {
      ...process.env,
      PROCTOR_PORT: String(port),
      PROCTOR_TOKENS: userToken,
      PROCTOR_WORKER_TOKEN: workerToken,
      PROCTOR_WORKER_CONCURRENCY: "2",
      PROCTOR_WORKER_STOP_GRACE: "5m",
      COMPOSE_PROFILES: "registry",
      PROCTOR_REGISTRY_ADDR: registry,
      PROCTOR_IMAGE_REGISTRY: registry,
    };
    compose = async (args) => (await run(cmd, [...pre, "-p", project, ...files, ...args], { cwd: repoRoot, env })).stdout;
    base = `http://127.0.0.1:${port}`;
  }, 900_000); // hang guard: the image builds copy ~150 MB each on a loaded 2-core machine
  afterAll(async () => {
    // Also after a failure: nothing of the stack may stay.
    try {
      await compose?.(["down", "-v", "--remove-orphans", "-t", "60"]);
    } finally {
      await rm(work, { recursive: true, force: true });
    }
  });

  // A hang guard, not a speed check: eight trials in containers on a loaded 2-core machine.
  test("server + Redis + 2 workers: a submitted batch is graded by both, survives a worker restart, and down leaves nothing", { timeout: 900_000 }, async () => {
    const archive = await submission();
    await compose(["up", "-d", "--scale", "worker=2"]);
    const health = await until("the server's /health", async () => ((await fetch(`${base}/health`, { signal: AbortSignal.timeout(5000) })).ok ? true : null));
    expect(health).toBe(true);
    // Workers in containers check the registry through the host's daemon, where 127.0.0.1 is the
    // published port (from inside a worker it is nothing): both join.
    await until("two workers on the queue", async () => (await workers()).length === 2);
    const pushed = await imagePushed();

    const submit = spawn(process.execPath, ["--conditions=@proctor/source", "--import", "tsx", join(repoRoot, "apps/cli/src/main.ts"), "submit", archive, "--server", base, "--token", userToken, "--json"], {
      cwd: repoRoot,
      env: { ...process.env, FORCE_COLOR: "0" },
    });
    let stdout = "";
    let stderr = "";
    submit.stdout.on("data", (c: Buffer) => (stdout += c.toString()));
    submit.stderr.on("data", (c: Buffer) => (stderr += c.toString()));
    const submitted = new Promise<number | null>((done) => submit.on("close", done));

    // Both workers grade trials of the batch at the same time.
    const grading = new Set<string>();
    await until("trials running on both workers", async () => {
      for (const w of await workers()) if (w.running_trials.length > 0) grading.add(w.name);
      return grading.size === 2;
    });
    // Restart one worker mid-batch: SIGTERM drains (its trials finish), then it comes back.
    const [victim] = (await compose(["ps", "-q", "worker"])).trim().split("\n");
    await run("docker", ["restart", "-t", "300", victim as string]);

    expect(pushed.code, pushed.output).toBe(0);
    expect(pushed.output).toMatch(/images: 1 built, 0 reused, 0 pulled, 0 failed/);
    expect(pushed.tags).toHaveLength(1);

    expect(await submitted, stderr).toBe(0);
    const status = JSON.parse(stdout) as { batch_id: string; status: string; total_tasks: number; passed_tasks: number; failed_tasks: number };
    expect(status).toMatchObject({ status: "completed", total_tasks: TASKS, passed_tasks: TASKS, failed_tasks: 0 });

    // Every trial ran to a result exactly once, across the two workers (logs span the restart).
    const logs = await compose(["logs", "--no-color", "worker"]);
    const trialLines = logs.split("\n").filter((l) => /trial=t\d+__1 /.test(l));
    expect(trialLines.filter((l) => / status=passed /.test(l))).toHaveLength(TASKS);
    expect(new Set(trialLines.map((l) => /trial=(t\d+)__1/.exec(l)?.[1])).size).toBe(TASKS);
    expect(logs).toMatch(/SIGTERM: draining/);
    await until("both workers back on the queue", async () => (await workers()).length === 2);

    await compose(["down", "-v", "--remove-orphans", "-t", "60"]);
    const left = (args: string[]) => execFileSync("docker", args, { encoding: "utf8" }).trim();
    expect(left(["ps", "-aq", "--filter", `label=com.docker.compose.project=${project}`])).toBe("");
    expect(left(["volume", "ls", "-q", "--filter", `label=com.docker.compose.project=${project}`])).toBe("");
    expect(left(["network", "ls", "-q", "--filter", `label=com.docker.compose.project=${project}`])).toBe("");
    expect(left(["ps", "-aq", "--filter", `label=proctor.run=${status.batch_id}`])).toBe(""); // the batch's sandboxes
  });
});
