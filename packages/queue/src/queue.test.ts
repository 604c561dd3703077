import { createHash } from "node:crypto";
import { existsSync } from "node:fs";
import { lstat, mkdir, mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { startRun } from "@proctor/engine";
import { LocalRuntime } from "@proctor/sandbox";
import type { TaskSpec, TrialResult } from "@proctor/schema";
import { loadTasks } from "@proctor/tasks";
import { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { BundleCache, DirBundleStore, bundleTask } from "./bundles";
import { startBundleServer } from "./bundle-server";
import { QueueDispatcher, type WaitingNotice } from "./dispatcher";
import { QueueMonitor } from "./monitor";
import { startRedisServer, type RedisServerHandle } from "./redis-server";
import { startWorker } from "./worker";

const EXAMPLES = resolve(import.meta.dirname, "../../../examples/tasks");
let root: string;
let redis: RedisServerHandle;
let tasks: TaskSpec[];
let runtime: LocalRuntime;

beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), "proctor-queue-"));
  redis = await startRedisServer();
  const loaded = await loadTasks([EXAMPLES]);
  expect(loaded.errors).toEqual([]);
  tasks = loaded.tasks;
  runtime = new LocalRuntime({ rootDir: join(root, "sandboxes") });
});
afterAll(async () => {
  await redis?.stop();
  await rm(root, { recursive: true, force: true });
});

/** Path -> kind, mode, size and sha256 of everything under `dir` (result.json: its timestamps differ, so only that it exists). */
async function treeOf(dir: string): Promise<Record<string, string>> {
  const tree: Record<string, string> = {};
  for (const rel of (await readdir(dir, { recursive: true })).sort()) {
    const path = join(dir, rel);
    const stat = await lstat(path);
    if (stat.isDirectory()) tree[rel] = "dir";
    else if (rel === "result.json") tree[rel] = "file";
    else tree[rel] = `file ${stat.mode.toString(8)} ${stat.size} ${createHash("sha256").update(await readFile(path)).digest("hex")}`;
  }
  return tree;
}

const statusOf = (results: TrialResult[]) => Object.fromEntries(results.map((r) => [r.trialId, [r.status, r.reward]]));
const readResults = async (runDir: string) =>
  (await readFile(join(runDir, "results.jsonl"), "utf8")).trim().split("\n").map((l) => JSON.parse(l) as TrialResult);

/** A local runtime that pins its images, as Docker's does (the engine records it as environment.imageId). */
class PinningRuntime extends LocalRuntime {
  async imageId(image: string): Promise<string> {
    return `sha256:${createHash("sha256").update(image).digest("hex")}`;
  }
}

describe("a run through the queue", () => {
  test("records what a local run records, with each trial's logs in the run dir", async () => {
    // Every optional method of the runtime reaches the worker's trials, not only the ones a wrapper chose.
    const runtime = new PinningRuntime({ rootDir: join(root, "sandboxes-pinning") });
    const local = await startRun({ runId: "local", runDir: join(root, "runs", "local"), tasks, agent: { kind: "oracle" }, runtime, concurrency: 2, attempts: 2 }).done;
    const store = new DirBundleStore(join(root, "bundles"));
    const dispatcher = new QueueDispatcher({ url: redis.url, bundles: { store, source: { kind: "dir", dir: store.dir } } });
    const worker = await startWorker({ url: redis.url, runtime, concurrency: 2, workDir: join(root, "worker-a"), name: "a" });
    const monitor = new QueueMonitor({ url: redis.url });
    try {
      const handle = startRun({ runId: "queued", runDir: join(root, "runs", "queued"), tasks, agent: { kind: "oracle" }, runtime, concurrency: 2, attempts: 2, dispatch: dispatcher.dispatch });
      const phases: string[] = [];
      handle.bus.subscribe((e) => void (e.type === "trial_phase" && phases.push(e.trialId)));
      const summary = await handle.done;
      expect(summary.trials).toEqual(local.trials);
      const results = await readResults(handle.runDir);
      expect(results).toHaveLength(8);
      const localResults = await readResults(join(root, "runs", "local"));
      expect(statusOf(results)).toEqual(statusOf(localResults));
      const pins = (list: TrialResult[]) => Object.fromEntries(list.map((r) => [r.trialId, r.environment?.imageId]));
      expect(pins(results)).toEqual(pins(localResults));
      expect(Object.values(pins(results)).every((id) => typeof id === "string" && id.startsWith("sha256:"))).toBe(true);
      for (const r of results) expect(existsSync(join(handle.runDir, "trials", r.trialId, "verifier"))).toBe(true);
      expect(new Set(phases).size).toBe(8); // worker events reached the run's bus
      const workers = await monitor.workers();
      expect(workers.map((w) => [w.name, w.capacity, w.runtime])).toEqual([["a", 2, "local"]]);
      expect(workers[0]?.finished).toBe(8);
    } finally {
      await worker.drain();
      await dispatcher.close();
      await monitor.close();
    }
    expect(await new QueueMonitor({ url: redis.url }).workers().then((w) => w.length)).toBe(0);
  });

  test("trial dirs arrive whole, small ones and ones past the small-artifact size or entry count alike", async () => {
    // Three verifiers: a small log (a file list); a 3 MB log and 300 small files (tar.gz).
    const dir = join(root, "artifact-tasks");
    const scripts = {
      small: 'echo s > "$PROCTOR_LOGS_DIR/verifier/secret.txt"; chmod 600 "$PROCTOR_LOGS_DIR/verifier/secret.txt"',
      "big-log": 'yes proctor | head -c 3000000 > "$PROCTOR_LOGS_DIR/verifier/big.log"',
      "many-files": 'i=0; while [ $i -lt 300 ]; do echo "$i" > "$PROCTOR_LOGS_DIR/verifier/f$i.txt"; chmod 600 "$PROCTOR_LOGS_DIR/verifier/f$i.txt"; i=$((i+1)); done',
    };
    for (const [name, script] of Object.entries(scripts)) {
      await mkdir(join(dir, name, "tests"), { recursive: true });
      await writeFile(join(dir, name, "task.toml"), "");
      await writeFile(join(dir, name, "instruction.md"), "Do nothing.\n");
      await writeFile(join(dir, name, "tests", "test.sh"), `#!/bin/sh\n${script}\necho 1 > "$PROCTOR_LOGS_DIR/verifier/reward.txt"\n`, { mode: 0o755 });
    }
    const loaded = await loadTasks([dir]);
    expect(loaded.errors).toEqual([]);
    const run = { tasks: loaded.tasks, agent: { kind: "nop" as const }, runtime, concurrency: 3, attempts: 1 };
    const local = await startRun({ ...run, runId: "art-local", runDir: join(root, "runs", "art-local") }).done;
    const store = new DirBundleStore(join(root, "bundles-art"));
    const dispatcher = new QueueDispatcher({ url: redis.url, prefix: "art", bundles: { store, source: { kind: "dir", dir: store.dir } } });
    const worker = await startWorker({ url: redis.url, prefix: "art", runtime, concurrency: 3, workDir: join(root, "worker-art"), name: "art" });
    try {
      const queued = await startRun({ ...run, runId: "art-queued", runDir: join(root, "runs", "art-queued"), dispatch: dispatcher.dispatch }).done;
      expect(queued.trials).toEqual({ ...local.trials, passed: 3 });
      for (const name of Object.keys(scripts)) {
        const trial = `${name}__1`;
        const tree = await treeOf(join(root, "runs", "art-queued", "trials", trial));
        expect(tree).toEqual(await treeOf(join(root, "runs", "art-local", "trials", trial)));
        if (name === "small") expect(tree["logs/verifier/secret.txt"]).toMatch(/^file 100600 2 /); // sent as a file list
        if (name === "big-log") expect(tree["logs/verifier/big.log"]).toMatch(/^file 100644 3000000 /);
        if (name === "many-files") expect(tree["logs/verifier/f299.txt"]).toMatch(/^file 100600 4 /);
      }
      expect(await readdir(join(root, "worker-art", "runs"))).toEqual([]); // each trial's scratch dir went with its result
    } finally {
      await worker.drain();
      await dispatcher.close();
    }
  });

  test("with no worker alive it says the trials wait for workers", async () => {
    const store = new DirBundleStore(join(root, "bundles-wait"));
    const notices: WaitingNotice[] = [];
    const dispatcher = new QueueDispatcher({ url: redis.url, prefix: "wait", pollMs: 50, noticeEveryMs: 50, bundles: { store, source: { kind: "dir", dir: store.dir } }, onWaiting: (n) => void notices.push(n) });
    const controller = new AbortController();
    const handle = startRun({ runId: "waiting", runDir: join(root, "runs", "waiting"), tasks: tasks.slice(0, 1), agent: { kind: "nop" }, runtime, concurrency: 1, attempts: 1, dispatch: dispatcher.dispatch, signal: controller.signal });
    while (notices.length < 2) await new Promise((r) => setTimeout(r, 50));
    expect(notices[0]).toMatchObject({ queued: 1, queue: redis.url });
    controller.abort();
    expect((await handle.done).status).toBe("interrupted");
    await dispatcher.close();
  });
});

describe("published records", () => {
  test("a job whose task record left Redis, or was swapped, becomes an infra error naming the key; no worker runs it", async () => {
    const prefix = "records";
    const store = new DirBundleStore(join(root, "bundles-records"));
    const dispatcher = new QueueDispatcher({ url: redis.url, prefix, bundles: { store, source: { kind: "dir", dir: store.dir } } });
    const monitor = new QueueMonitor({ url: redis.url, prefix });
    const client = new Redis(redis.url);
    const [gone, swapped] = tasks as [TaskSpec, TaskSpec];
    const handle = startRun({ runId: "records", runDir: join(root, "runs", "records"), tasks: [gone, swapped], agent: { kind: "nop" }, runtime, concurrency: 2, attempts: 1, dispatch: dispatcher.dispatch });
    let worker: Awaited<ReturnType<typeof startWorker>> | null = null;
    try {
      while ((await monitor.counts()).waiting < 2) await new Promise((r) => setTimeout(r, 50));
      // Jobs carry sha256s only: the task records are keys of their own.
      const keys = await client.keys(`${prefix}:spec:*`);
      const records = await Promise.all(keys.map(async (key) => ({ key, record: JSON.parse((await client.get(key)) as string) as { task?: TaskSpec } })));
      const keyOf = (id: string) => records.find((r) => r.record.task?.id === id)?.key as string;
      expect(keys).toHaveLength(3); // two tasks and the run's settings
      await client.del(keyOf(gone.id));
      await client.set(keyOf(swapped.id), JSON.stringify({ ...records.find((r) => r.record.task?.id === swapped.id)?.record, extra: 1 }));
      worker = await startWorker({ url: redis.url, prefix, runtime, concurrency: 2, workDir: join(root, "worker-records"), name: "records" });
      const summary = await handle.done;
      expect(summary.trials.total).toBe(2);
      const results = Object.fromEntries((await readResults(handle.runDir)).map((r) => [r.taskId, r]));
      expect(results[gone.id]?.error?.kind).toBe("infra");
      expect(results[gone.id]?.error?.message).toContain(`Redis key ${keyOf(gone.id)}) is gone`);
      expect(results[swapped.id]?.error?.message).toMatch(/\(Redis key records:spec:[0-9a-f]{64}\) was refused: its content hashes to [0-9a-f]{64}/);
      expect((await monitor.workers())[0]?.finished).toBe(0); // neither trial ran
    } finally {
      await worker?.drain();
      await dispatcher.close();
      await monitor.close();
      client.disconnect();
    }
  });
});

describe("bundles", () => {
  test("a bundle whose bytes do not match its sha256 is refused and never extracted", async () => {
    const task = tasks[0] as TaskSpec;
    const { bundle } = await bundleTask(task);
    const again = await bundleTask(task);
    expect(again.bundle.sha256).toBe(bundle.sha256); // content-addressed: same files, same id
    const store = new DirBundleStore(join(root, "tamper"));
    await store.put(bundle);
    const path = store.pathOf(bundle.sha256);
    const bytes = await readFile(path);
    bytes[bytes.length - 10] = (bytes[bytes.length - 10] ?? 0) ^ 0xff;
    await writeFile(path, bytes);
    expect(createHash("sha256").update(bytes).digest("hex")).not.toBe(bundle.sha256);
    const cache = new BundleCache(join(root, "tamper-cache"));
    await expect(cache.materialize({ sha256: bundle.sha256, source: { kind: "dir", dir: store.dir } })).rejects.toThrow(/refused: its content hashes to/);
    expect(existsSync(join(root, "tamper-cache", bundle.sha256))).toBe(false);
  });

  test("a run's bundle server: the job's token fetches the bundle; no token or another is 401, an unknown sha 404", async () => {
    const { bundle } = await bundleTask(tasks[0] as TaskSpec);
    const store = new DirBundleStore(join(root, "served"));
    await store.put(bundle);
    const served = await startBundleServer(store, { host: "127.0.0.1" });
    try {
      expect(served.source.baseUrl).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
      expect(served.source.token).toMatch(/^[0-9a-f]{64}$/);
      const url = `${served.source.baseUrl}/v1/bundles/${bundle.sha256}`;
      expect((await fetch(url)).status).toBe(401);
      expect((await fetch(url, { headers: { authorization: `Bearer ${"0".repeat(64)}` } })).status).toBe(401);
      expect((await fetch(`${served.source.baseUrl}/v1/bundles/${"a".repeat(64)}`, { headers: { authorization: `Bearer ${served.source.token}` } })).status).toBe(404);
      // A worker with no token of its own fetches with the one the job names, and checks the bytes.
      const root2 = await new BundleCache(join(root, "served-cache")).materialize({ sha256: bundle.sha256, source: served.source });
      expect((await readdir(root2)).length).toBeGreaterThan(0);
      // A job naming the wrong token: refused, nothing extracted.
      await expect(new BundleCache(join(root, "served-cache-2")).materialize({ sha256: bundle.sha256, source: { ...served.source, token: "f".repeat(64) } })).rejects.toThrow(/refused the token its job gave \(401\)/);
    } finally {
      await served.close();
    }
  });
});

describe("a worker's drain", () => {
  test("with nothing running it ends at once, also after Redis went away (nothing is left that needs Redis)", async () => {
    const up = await startWorker({ url: redis.url, runtime, concurrency: 1, workDir: join(root, "worker-idle"), name: "idle" });
    let started = Date.now();
    await up.drain();
    expect(Date.now() - started).toBeLessThan(2000);

    const own = await startRedisServer();
    const lines: string[] = [];
    const logger = { debug: () => undefined, info: () => undefined, warn: () => undefined, error: (m: string) => void lines.push(m) };
    const orphan = await startWorker({ url: own.url, runtime, concurrency: 1, workDir: join(root, "worker-orphan"), name: "orphan", logger });
    await own.stop();
    while (!lines.some((l) => l.includes("is unreachable"))) await new Promise((r) => setTimeout(r, 50));
    started = Date.now();
    await Promise.race([orphan.drain(), new Promise((_, fail) => setTimeout(() => fail(new Error("the drain still waits for Redis after 10 s")), 10_000))]);
    expect(Date.now() - started).toBeLessThan(2000);
    await orphan.closed;
  });
});
