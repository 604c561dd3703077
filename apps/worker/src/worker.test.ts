import { spawn, type ChildProcess } from "node:child_process";
import { existsSync } from "node:fs";
import { chmod, mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { startRun } from "@proctor/engine";
import { DirBundleStore, QueueDispatcher, remoteRuntime, startRedisServer, type RedisServerHandle } from "@proctor/queue";
import { LOCAL_CAPABILITIES } from "@proctor/sandbox";
import { loadTasks } from "@proctor/tasks";
import { afterAll, afterEach, beforeAll, describe, expect, test } from "vitest";

const MAIN = resolve(import.meta.dirname, "main.ts");
let root: string;
let redis: RedisServerHandle;
const children: ChildProcess[] = [];

beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), "proctor-worker-app-"));
  redis = await startRedisServer();
});
afterEach(() => {
  for (const child of children.splice(0)) if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
});
afterAll(async () => {
  await redis?.stop();
  await rm(root, { recursive: true, force: true });
});

interface Worker {
  child: ChildProcess;
  output: () => string;
  exited: Promise<number | null>;
}

/** `proctor-worker` from source, as the bin runs it; `env` replaces nothing but adds to this process's. */
function proctorWorker(args: string[], env: Record<string, string> = {}): Worker {
  const child = spawn(process.execPath, ["--conditions=@proctor/source", "--import", "tsx", MAIN, ...args], { env: { ...process.env, FORCE_COLOR: "0", ...env } });
  children.push(child);
  let text = "";
  child.stdout?.on("data", (c: Buffer) => (text += c.toString()));
  child.stderr?.on("data", (c: Buffer) => (text += c.toString()));
  const exited = new Promise<number | null>((done) => child.on("close", (code) => done(code)));
  return { child, output: () => text, exited };
}

async function until(what: string, check: () => boolean | Promise<boolean>, timeoutMs = 240_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** Tasks whose solution waits until `gate` exists, so the test decides when a trial may finish. */
async function gatedTasks(dir: string, count: number, gate: string): Promise<string> {
  for (let i = 1; i <= count; i++) {
    const task = join(dir, `gated-${i}`);
    await mkdir(join(task, "tests"), { recursive: true });
    await mkdir(join(task, "solution"), { recursive: true });
    await writeFile(join(task, "task.toml"), "[agent]\ntimeout_sec = 600\n[verifier]\ntimeout_sec = 60\n");
    await writeFile(join(task, "instruction.md"), "Write done to out.txt once the gate opens.\n");
    await writeFile(join(task, "solution", "solve.sh"), `#!/bin/bash\nwhile [ ! -e '${gate}' ]; do sleep 0.2; done\ncd "$PROCTOR_WORKDIR" && echo done > out.txt\n`);
    await writeFile(join(task, "tests", "test.sh"), '#!/bin/bash\nmkdir -p "$PROCTOR_LOGS_DIR/verifier"\nif grep -q done "$PROCTOR_WORKDIR/out.txt"; then echo 1; else echo 0; fi > "$PROCTOR_LOGS_DIR/verifier/reward.txt"\n');
    await chmod(join(task, "solution", "solve.sh"), 0o755);
    await chmod(join(task, "tests", "test.sh"), 0o755);
  }
  return dir;
}

/** A run of `source`'s tasks (oracle, local runtime) sent to the queue (default: the shared Redis) from this process. */
async function queuedRun(source: string, runId: string, url = redis.url) {
  const { tasks, errors } = await loadTasks([source]);
  expect(errors).toEqual([]);
  const store = new DirBundleStore(join(root, "bundles"));
  const dispatcher = new QueueDispatcher({ url, bundles: { store, source: { kind: "dir", dir: store.dir } } });
  const runDir = join(root, "runs", runId);
  const handle = startRun({ runId, runDir, tasks, agent: { kind: "oracle" }, runtime: remoteRuntime("local", LOCAL_CAPABILITIES), concurrency: 4, attempts: 1, isolateVerifier: false, dispatch: dispatcher.dispatch });
  return { runDir, done: handle.done.finally(() => dispatcher.close()) };
}

/** A port nothing listens on (taken from the OS, then let go). */
function unusedPort(): Promise<number> {
  return new Promise((done, fail) => {
    const server = createServer();
    server.once("error", fail);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address() as { port: number };
      server.close(() => done(port));
    });
  });
}

/** SIGTERM, then how long the worker took to exit and its exit code. */
async function stopTimed(worker: Worker): Promise<{ code: number | null; ms: number }> {
  const sent = Date.now();
  worker.child.kill("SIGTERM");
  const code = await worker.exited;
  return { code, ms: Date.now() - sent };
}

describe("proctor-worker configuration", () => {
  test("--help names every setting with its environment variable; bad values exit 2 with one line naming the flag or variable", async () => {
    const help = proctorWorker(["--help"]);
    expect(await help.exited).toBe(0);
    for (const env of ["PROCTOR_QUEUE_URL", "PROCTOR_WORKER_NAME", "PROCTOR_WORKER_CONCURRENCY", "PROCTOR_RUNTIME", "PROCTOR_WORKER_PORT", "PROCTOR_WORKER_MEMORY_MB"]) expect(help.output()).toContain(env);

    const none = proctorWorker([], { PROCTOR_QUEUE_URL: "" });
    expect(await none.exited).toBe(2);
    expect(none.output().trim()).toBe("proctor-worker: no queue: pass --queue redis://HOST:PORT/DB or set PROCTOR_QUEUE_URL");

    const badUrl = proctorWorker([], { PROCTOR_QUEUE_URL: "http://example" });
    expect(await badUrl.exited).toBe(2);
    expect(badUrl.output()).toBe("proctor-worker: --queue (or PROCTOR_QUEUE_URL): scheme must be redis:// or rediss://, got http://\n");
    expect(badUrl.output().trim().split("\n")).toHaveLength(1);

    const badEnv = proctorWorker(["--queue", redis.url], { PROCTOR_WORKER_CONCURRENCY: "two" });
    expect(await badEnv.exited).toBe(2);
    expect(badEnv.output()).toContain("from env 'PROCTOR_WORKER_CONCURRENCY' is invalid. --concurrency must be a whole number >= 1, got \"two\"");
  });
});

describe("proctor-worker and a Redis that is not there", () => {
  test("started against a Redis that does not answer, it exits 3 with one line naming the URL and the fix", async () => {
    const port = await unusedPort();
    const worker = proctorWorker(["--runtime", "local", "--work-dir", join(root, "work-none")], { PROCTOR_QUEUE_URL: `redis://127.0.0.1:${port}/0` });
    // It used to wait for Redis with no word, and a SIGTERM then said "draining" and never exited.
    await until("the worker exits", () => worker.child.exitCode !== null, 120_000);
    expect(await worker.exited).toBe(3);
    expect(worker.output()).toBe(
      `proctor-worker: Redis at redis://127.0.0.1:${port}/0 does not answer (connect ECONNREFUSED 127.0.0.1:${port}): start it (redis-server --port ${port} --appendonly yes) or fix --queue (or PROCTOR_QUEUE_URL)\n`,
    );
  });

  test("SIGTERM with nothing running exits 0 at once, with Redis there and after Redis went away", async () => {
    // On Docker, with the image settings empty as deploy/compose.yaml passes them when they are not set: none given.
    const idle = proctorWorker(["--runtime", "docker", "--name", "idle", "--work-dir", join(root, "work-idle")], { PROCTOR_QUEUE_URL: redis.url, PROCTOR_IMAGE_CACHE_GB: "", PROCTOR_IMAGE_REGISTRY: "" });
    await until("the worker joined", () => idle.output().includes("worker idle ready"));
    const up = await stopTimed(idle);
    expect(up.code, idle.output()).toBe(0);
    expect(up.ms, idle.output()).toBeLessThan(5000);
    expect(idle.output()).toContain("SIGTERM: draining: no new trials; 0 running trial(s) finish, then the worker exits\nworker idle stopped\n");

    const own = await startRedisServer();
    const orphan = proctorWorker(["--runtime", "local", "--name", "orphan", "--work-dir", join(root, "work-orphan")], { PROCTOR_QUEUE_URL: own.url });
    try {
      await until("the worker joined", () => orphan.output().includes("worker orphan ready"));
    } finally {
      await own.stop();
    }
    await until("the worker saw Redis go", () => orphan.output().includes("is unreachable"));
    const away = await stopTimed(orphan);
    expect(away.code, orphan.output()).toBe(0);
    expect(away.ms, orphan.output()).toBeLessThan(5000);
    expect(orphan.output()).toContain("SIGTERM: draining: no new trials; 0 running trial(s) finish, then the worker exits\nworker orphan stopped\n");
  });

  test("SIGTERM while Redis is away and a trial runs: the trial finishes, its result waits for Redis, then the worker exits 0", async () => {
    const gate = join(root, "gate-away");
    const tasks = await gatedTasks(join(root, "tasks-away"), 1, gate);
    const own = await startRedisServer({ appendOnly: true });
    try {
      const worker = proctorWorker(["--runtime", "local", "--name", "patient", "--work-dir", join(root, "work-patient")], { PROCTOR_QUEUE_URL: own.url });
      await until("the worker joined", () => worker.output().includes("worker patient ready"));
      const run = await queuedRun(tasks, "away", own.url);
      await until("the trial started", () => worker.output().includes("status=started"));
      await own.restart({
        whileDown: async () => {
          await until("the worker saw Redis go", () => worker.output().includes("is unreachable"));
          worker.child.kill("SIGTERM");
          await until("the worker says it drains", () => worker.output().includes("SIGTERM: draining: no new trials; 1 running trial(s) finish"));
          await writeFile(gate, "");
          await new Promise((r) => setTimeout(r, 2000)); // the trial ends; its result waits for Redis
          expect(worker.child.exitCode).toBeNull();
        },
      });
      expect(await worker.exited, worker.output()).toBe(0);
      expect(worker.output()).toMatch(/trial=gated-1__1 run=away worker=patient task=gated-1 status=passed reward=1/);
      expect((await run.done).trials).toMatchObject({ total: 1, passed: 1 });
    } finally {
      await own.stop();
    }
  });
});

describe("proctor-worker on a queue (local runtime)", () => {
  test("/health and /metrics, one log line per trial, and SIGTERM mid-trial finishes the trial before it exits 0", async () => {
    const gate = join(root, "gate");
    const tasks = await gatedTasks(join(root, "tasks"), 2, gate);
    const worker = proctorWorker(["--runtime", "local", "--port", "0", "--work-dir", join(root, "work")], {
      PROCTOR_QUEUE_URL: redis.url,
      PROCTOR_WORKER_NAME: "app-1",
      PROCTOR_WORKER_CONCURRENCY: "1",
      PROCTOR_WORKER_HEARTBEAT_MS: "500",
    });
    await until("the status server", () => /health and metrics on (http:\/\/\S+)\/health/.test(worker.output()));
    const base = /health and metrics on (http:\/\/\S+)\/health/.exec(worker.output())?.[1] as string;
    await until("the worker joined", () => worker.output().includes("worker app-1 ready"));
    const health = await fetch(`${base}/health`);
    expect(health.status).toBe(200);
    expect(await health.json()).toMatchObject({ status: "ok", worker: "app-1", runtime: "local", running: 0, capacity: 1, draining: false });

    const run = await queuedRun(tasks, "drain");
    await until("one trial running", async () => /proctor_worker_running_trials\{worker="app-1"\} 1/.test(await (await fetch(`${base}/metrics`)).text()));
    worker.child.kill("SIGTERM");
    await until("the worker says it drains", () => worker.output().includes("SIGTERM: draining"));
    const draining = await fetch(`${base}/health`);
    expect(draining.status).toBe(200); // finishing its trial is healthy
    expect(await draining.json()).toMatchObject({ draining: true, running: 1 });
    expect(worker.child.exitCode).toBeNull();
    await writeFile(gate, "");
    expect(await worker.exited, worker.output()).toBe(0);

    // The running trial started, finished and was logged; the other was never taken.
    const lines = worker.output().split("\n").filter((l) => l.startsWith("trial="));
    expect(lines).toHaveLength(2);
    expect(lines[0]).toMatch(/^trial=gated-\d__1 run=drain worker=app-1 task=gated-\d status=started retry=0$/);
    expect(lines[1]).toMatch(/^trial=gated-\d__1 run=drain worker=app-1 task=gated-\d status=passed reward=1 duration=\d+\.\ds$/);
    expect(lines[1]?.split(" ")[0]).toBe(lines[0]?.split(" ")[0]);
    expect(worker.output()).toContain("worker app-1 stopped");

    // A second worker picks up the rest; its metrics count what it ran.
    const next = proctorWorker(["--runtime", "local", "--port", "0", "--name", "app-2", "--work-dir", join(root, "work-2")], { PROCTOR_QUEUE_URL: redis.url });
    const summary = await run.done;
    expect(summary.trials).toMatchObject({ total: 2, passed: 2 });
    expect(existsSync(join(run.runDir, "trials"))).toBe(true);
    const base2 = /health and metrics on (http:\/\/\S+)\/health/.exec(next.output())?.[1] as string;
    const metrics = await (await fetch(`${base2}/metrics`)).text();
    expect(metrics).toContain('proctor_worker_trials_finished_total{status="passed",worker="app-2"} 1');
    expect(metrics).toContain('proctor_worker_running_trials{worker="app-2"} 0');
    expect(metrics).toContain('proctor_worker_capacity{worker="app-2"} 1');
    expect(metrics).toMatch(/proctor_worker_heartbeats_total\{outcome="ok",worker="app-2"\} [1-9]/);
    expect(metrics).toMatch(/proctor_worker_last_heartbeat_timestamp_seconds\{worker="app-2"\} 1\d{9}/);
    expect((await fetch(`${base2}/nope`)).status).toBe(404);
    next.child.kill("SIGTERM");
    expect(await next.exited).toBe(0);
  });

  test("/health says 503 with the reason while Redis is away, 200 once it is back", async () => {
    const own = await startRedisServer();
    try {
      const worker = proctorWorker(["--runtime", "local", "--port", "0", "--name", "flaky", "--heartbeat-ms", "300", "--work-dir", join(root, "work-flaky")], { PROCTOR_QUEUE_URL: own.url });
      await until("the worker joined", () => worker.output().includes("worker flaky ready"));
      const base = /health and metrics on (http:\/\/\S+)\/health/.exec(worker.output())?.[1] as string;
      await own.restart({
        whileDown: () =>
          until("an unhealthy /health", async () => {
            const res = await fetch(`${base}/health`);
            if (res.status !== 503) return false;
            expect(((await res.json()) as { reason: string }).reason).toMatch(/^no heartbeat reached Redis at redis:\/\/127\.0\.0\.1:\d+\/0 for \d+ s$/);
            return true;
          }),
      });
      await until("a healthy /health again", async () => (await fetch(`${base}/health`)).status === 200);
      worker.child.kill("SIGTERM");
      expect(await worker.exited).toBe(0);
    } finally {
      await own.stop();
    }
  });
});
