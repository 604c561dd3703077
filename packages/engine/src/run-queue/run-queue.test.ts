import { existsSync } from "node:fs";
import { mkdir, readdir, readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { LocalRuntime } from "@proctor/sandbox";
import type { ProctorEvent, TaskSpec } from "@proctor/schema";
import { loadTasks } from "@proctor/tasks";
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { startRun, type RunOptions } from "../run";
import { readResultsFile, tempDir, writeTasks } from "../testing/fixtures";
import type { BatchUpdate } from "./batch";
import { BatchFinishedError, QueueFullError, RunQueue, type RunQueueOptions } from "./run-queue";
import { forEachJsonLine } from "./store";

const V = '"${PROCTOR_LOGS_DIR:-/logs}/verifier"';
let root: { path: string; cleanup: () => Promise<void> };
let runtime: LocalRuntime;
let gateDir: string;
let tasks: TaskSpec[];

/** "quick" passes at once; "gate-*" pass once the test opens their gate (a file on the host: the local runtime runs host processes). */
beforeAll(async () => {
  root = await tempDir("proctor-run-queue-");
  await mkdir(join(root.path, "sandboxes"));
  runtime = new LocalRuntime({ rootDir: join(root.path, "sandboxes") });
  gateDir = join(root.path, "gates");
  await mkdir(gateDir);
  const gated = (name: string) => ({
    toml: "[agent]\ntimeout_sec = 600\n[verifier]\ntimeout_sec = 30\n",
    instruction: "Wait for the gate.",
    test: `mkdir -p ${V}; echo 1 > ${V}/reward.txt`,
    solve: `while [ ! -f '${join(gateDir, name)}' ]; do sleep 0.05; done`,
  });
  const dir = await writeTasks(join(root.path, "tasks"), {
    quick: { instruction: "Nothing to do.", test: `mkdir -p ${V}; echo 1 > ${V}/reward.txt`, solve: "true" },
    "gate-order": gated("gate-order"),
    "gate-resume": gated("gate-resume"),
    "gate-cancel": gated("gate-cancel"),
  });
  const loaded = await loadTasks([dir]);
  expect(loaded.errors).toEqual([]);
  tasks = loaded.tasks;
});
afterAll(async () => {
  await root.cleanup();
});

function newQueue(name: string, overrides: Partial<RunQueueOptions> = {}): RunQueue {
  return new RunQueue({
    root: join(root.path, name),
    maxActive: 1,
    maxQueued: 1,
    retentionDays: null,
    prepare: async (batch) => ({
      tasks: tasks.filter((t) => batch.record.taskIds.includes(t.id)),
      agent: { kind: "oracle" },
      runtime,
      isolateVerifier: false,
    }),
    ...overrides,
  });
}

const open = (gate: string) => writeFile(join(gateDir, gate), "");

async function until<T>(what: string, check: () => T | undefined | false | Promise<T | undefined | false>): Promise<T> {
  const deadline = Date.now() + 120_000;
  for (;;) {
    const value = await check();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

const submit = (queue: RunQueue, taskIds: string[], extra: Record<string, unknown> = {}, concurrentTasks = 1) =>
  queue.submit({ concurrentTasks, submittedBy: "tester", fill: async () => ({ taskIds, extra }) });

describe("RunQueue", () => {
  test("queues beyond maxActive, refuses beyond maxQueued, runs in order, and tells listeners every event then the finish", async () => {
    const queue = newQueue("order");
    await queue.start();
    const first = await submit(queue, ["gate-order"], { note: "kept" });
    const updates: BatchUpdate[] = [];
    first.subscribe((u) => updates.push(u));
    const second = await submit(queue, ["quick"]);
    await expect(submit(queue, ["quick"])).rejects.toBeInstanceOf(QueueFullError);
    // Nothing of a refused submission stays on disk.
    expect((await readdir(queue.root)).sort()).toEqual([first.id, second.id].sort());
    expect(queue.queuePosition(second)).toBe(1);
    expect(queue.counts()).toMatchObject({ active: 1, queued: 1, total: 2 });
    await until("the gated trial to start", () => first.running.size === 1);
    expect(second.status).toBe("queued");
    await open("gate-order");
    await until("both batches to finish", () => first.finished && second.finished);
    expect([first.status, second.status]).toEqual(["completed", "completed"]);
    expect([first.passed, second.passed]).toEqual([1, 1]);
    const seqs = updates.map((u) => (u.type === "event" ? u.event.seq : u.seq));
    expect(seqs).toEqual([...seqs].sort((a, b) => a - b));
    expect(new Set(seqs).size).toBe(seqs.length);
    expect(updates.at(-1)).toMatchObject({ type: "finished", status: "completed", error: null });
    expect(updates.filter((u) => u.type === "event" && u.event.type === "run_finished")).toEqual([]);
    // App fields in batch.json survive the queue's own rewrites.
    expect(JSON.parse(await readFile(join(first.dir, "batch.json"), "utf8"))).toMatchObject({ note: "kept", finishedAt: expect.any(String) });
    expect(await queue.trialResult(first, "gate-order")).toMatchObject({ trialId: "gate-order__1", status: "passed" });
    await expect(queue.cancel(first)).rejects.toBeInstanceOf(BatchFinishedError);
    await queue.close(10_000);
  });

  test("a batch interrupted by close() resumes on the next start: finished trials are kept, seqs keep increasing, replay has every event once", async () => {
    const queue = newQueue("resume");
    await queue.start();
    const batch = await submit(queue, ["quick", "gate-resume"], {}, 2);
    await until("the quick trial to finish", () => batch.completed === 1);
    const seqBefore = batch.seq ?? 0;
    await queue.close(60_000);
    expect(batch.status).toBe("queued");

    const again = newQueue("resume");
    const seen: ProctorEvent[] = [];
    await again.start();
    const restored = again.find(batch.id);
    if (!restored) throw new Error("batch not restored");
    expect(restored.completed).toBe(1);
    restored.subscribe((u) => {
      if (u.type === "event") seen.push(u.event);
    });
    await until("the resumed trial to start", () => restored.running.size === 1);
    await open("gate-resume");
    await until("the resumed batch to finish", () => restored.finished);
    expect(restored.status).toBe("completed");
    expect(seen.every((e) => e.seq > seqBefore)).toBe(true);
    expect(seen.find((e) => e.type === "run_started")).toMatchObject({ data: { skipped: 1 } });
    const replayed = await again.replay(restored, 0);
    const seqs = replayed.map((e) => e.seq);
    expect(seqs).toEqual([...seqs].sort((a, b) => a - b));
    expect(new Set(seqs).size).toBe(seqs.length);
    expect(replayed.filter((e) => e.type === "trial_finished").map((e) => e.taskId).sort()).toEqual(["gate-resume", "quick"]);
    expect((await readResultsFile(restored.dir)).map((r) => r.taskId).sort()).toEqual(["gate-resume", "quick"]);
    await again.close(10_000);
  });

  test("close() during a long prepare() (an image build) leaves the batch queued to resume, not failed; a prepare() that fails fails the batch with its message", async () => {
    let building = false;
    const slowPrepare = newQueue("slow-prepare", {
      prepare: (batch) =>
        new Promise((_resolve, reject) => {
          building = true;
          batch.abort?.signal.addEventListener("abort", () => reject(new Error("build cancelled")), { once: true });
        }),
    });
    await slowPrepare.start();
    const batch = await submit(slowPrepare, ["quick"]);
    await until("prepare() to start", () => building);
    await slowPrepare.close(10_000);
    expect(batch.status).toBe("queued");
    expect(batch.error).toBeNull();
    const again = newQueue("slow-prepare");
    await again.start();
    const restored = again.find(batch.id);
    await until("the resumed batch to finish", () => restored?.finished);
    expect(restored?.status).toBe("completed");
    await again.close(10_000);

    const failing = newQueue("failing-prepare", { prepare: () => Promise.reject(new Error("agent_image/: over the limit")) });
    await failing.start();
    const failed = await submit(failing, ["quick"]);
    await until("the batch to fail", () => failed.finished);
    expect(failed).toMatchObject({ status: "failed", error: "agent_image/: over the limit" });
    await failing.close(10_000);
  });

  test("cancelling a queued batch finishes it as cancelled without running it; it is never resumed", async () => {
    const queue = newQueue("cancel");
    await queue.start();
    const running = await submit(queue, ["gate-cancel"]);
    const waiting = await submit(queue, ["quick"]);
    const updates: BatchUpdate[] = [];
    waiting.subscribe((u) => updates.push(u));
    await queue.cancel(waiting);
    expect(waiting.status).toBe("cancelled");
    expect(updates).toEqual([expect.objectContaining({ type: "finished", status: "cancelled" })]);
    await open("gate-cancel");
    await until("the running batch to finish", () => running.finished);
    await queue.close(10_000);
    const again = newQueue("cancel");
    await again.start();
    expect(again.find(waiting.id)?.status).toBe("cancelled");
    expect(existsSync(join(waiting.dir, "run.json"))).toBe(false);
    await again.close(10_000);
  });

  test("retention deletes finished batches older than retentionDays on start, and keeps newer ones", async () => {
    const queue = newQueue("retention");
    await queue.start();
    const old = await submit(queue, ["quick"]);
    await until("the first batch to finish", () => old.finished);
    const recent = await submit(queue, ["quick"]);
    await until("the second batch to finish", () => recent.finished);
    await queue.close(10_000);
    const record = JSON.parse(await readFile(join(old.dir, "batch.json"), "utf8")) as Record<string, unknown>;
    await writeFile(join(old.dir, "batch.json"), JSON.stringify({ ...record, finishedAt: new Date(Date.now() - 3 * 86_400_000).toISOString() }));
    const again = newQueue("retention", { retentionDays: 2 });
    await again.start();
    expect(existsSync(old.dir)).toBe(false);
    expect(again.find(old.id)).toBeUndefined();
    expect(again.find(recent.id)?.status).toBe("completed");
    await again.close(10_000);
  });

  test("the startRun seam runs every batch: what it is given is the batch's run", async () => {
    const given: RunOptions[] = [];
    const queue = newQueue("seam", {
      startRun: (options) => {
        given.push(options);
        return startRun(options);
      },
    });
    await queue.start();
    const batch = await submit(queue, ["quick"]);
    await until("the batch to finish", () => batch.finished);
    expect(given).toHaveLength(1);
    expect(given[0]).toMatchObject({ runId: batch.id, runDir: batch.dir, attempts: 1, concurrency: 1, resume: false, agent: { kind: "oracle" } });
    await queue.close(10_000);
  });

  test("a submission whose fill fails leaves nothing on disk and frees its place", async () => {
    const queue = newQueue("fill", { maxQueued: 0 });
    await queue.start();
    await expect(queue.submit({ concurrentTasks: 1, submittedBy: null, fill: async () => Promise.reject(new Error("bad upload")) })).rejects.toThrow("bad upload");
    expect(await readdir(queue.root)).toEqual([]);
    const batch = await submit(queue, ["quick"]);
    await until("the batch to finish", () => batch.finished);
    await queue.close(10_000);
  });
});

describe("reading JSONL after a crash", () => {
  test("a torn last line is skipped, a broken middle line is an error naming the file and line", async () => {
    const file = join(root.path, "events.jsonl");
    await writeFile(file, '{"seq":1}\n{"seq":2}\n{"seq":3,"ty');
    const seen: unknown[] = [];
    await forEachJsonLine(file, (v) => seen.push(v));
    expect(seen).toEqual([{ seq: 1 }, { seq: 2 }]);
    await writeFile(file, '{"seq":1}\nnot json\n{"seq":3}\n');
    await expect(forEachJsonLine(file, (v) => seen.push(v))).rejects.toThrow(/events\.jsonl:2/);
    seen.length = 2;
    await forEachJsonLine(join(root.path, "missing.jsonl"), () => seen.push("x"));
    expect(seen).toHaveLength(2);
  });
});
