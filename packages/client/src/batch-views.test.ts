import type { ProctorEvent, RunSummary, TrialResult } from "@proctor/schema";
import { describe, expect, test } from "vitest";
import { batchFeed, batchStatusJson, snapshotOf, taskDetailJson, taskJson, wireOfEvent, wireOfUpdate, type BatchStateView, type TaskStateView } from "./batch-views";
import { BatchStatusResponse, SnapshotData, TaskDetailResponse, WireEnvelope } from "./wire";

const done: TaskStateView = { taskId: "a", status: "completed", phase: null, outcome: "passed", reward: 1, error: null, durationMs: 1200 };
const pending: TaskStateView = { taskId: "b", status: "pending", phase: null, outcome: null, reward: null, error: null, durationMs: null };

function batch(overrides: Partial<BatchStateView> = {}): BatchStateView {
  return {
    id: "b1",
    status: "running",
    tasks: new Map([["a", done], ["b", pending]]),
    completed: 1,
    passed: 1,
    failed: 0,
    meanReward: 1,
    costUsd: 0.1234567,
    unpricedTasks: 0,
    error: null,
    durationMs: null,
    startedAtMs: null,
    seq: 4,
    record: { createdAt: "2026-01-01T00:00:00.000Z", finishedAt: null, concurrentTasks: 2, submittedBy: "5Grw" },
    ...overrides,
  };
}

describe("batch state -> responses", () => {
  test("GET /batch/:id: counts, a running batch's duration so far, and the queue position only when given", () => {
    const startedAtMs = Date.now() - 5_000;
    const json = batchStatusJson(batch({ startedAtMs }), null);
    expect(BatchStatusResponse.parse(json)).toEqual(json);
    expect(json).toMatchObject({ batch_id: "b1", status: "running", total_tasks: 2, completed_tasks: 1, passed_tasks: 1, submitted_by: "5Grw", cost_usd: 0.123457, unpriced_tasks: 0 });
    expect(json.duration_ms).toBeGreaterThanOrEqual(5_000);
    expect(json).not.toHaveProperty("queue_position");
    expect(batchStatusJson(batch({ status: "queued" }), 3)).toMatchObject({ duration_ms: null, queue_position: 3 });
    expect(batchStatusJson(batch({ durationMs: 812.6, startedAtMs }), null).duration_ms).toBe(813);
  });

  test("a task shows passed only once it has an outcome", () => {
    expect(taskJson(done)).toMatchObject({ task_id: "a", passed: true, reward: 1, duration_ms: 1200 });
    expect(taskJson(pending).passed).toBeNull();
    expect(taskJson({ ...done, outcome: "error", error: "agent: timed out" })).toMatchObject({ passed: false, error: "agent: timed out" });
  });

  test("task detail: per-check results and a combined test output from the result; empty before it completed", () => {
    const result = {
      taskId: "a", status: "failed", startedAt: "s", finishedAt: "f", agent: { exitCode: 0, timedOut: false },
      phases: [{ phase: "verify", durationMs: 10.4 }],
      checks: [
        { name: "one", command: "test -f x", passed: true, exitCode: 0, timedOut: false, durationMs: 5, output: "ok" },
        { name: "two", passed: false, exitCode: null, timedOut: true, output: "slow" },
      ],
    } as unknown as TrialResult;
    const detail = taskDetailJson(done, result);
    expect(TaskDetailResponse.parse(detail)).toEqual(detail);
    expect(detail.test_results).toEqual([
      { name: "one", command: "test -f x", passed: true, exit_code: 0, timed_out: false, duration_ms: 5, output: "ok" },
      { name: "two", command: null, passed: false, exit_code: null, timed_out: true, duration_ms: null, output: "slow" },
    ]);
    expect(detail.test_output).toBe("== one (exit 0)\nok\n== two (exit none)\nslow");
    expect(detail.phases).toEqual([{ phase: "verify", duration_ms: 10 }]);
    expect(taskDetailJson(pending, null)).toMatchObject({ task_id: "b", test_results: [], test_output: "", phases: [] });
  });
});

describe("batch state -> WebSocket messages", () => {
  test("the snapshot is serialized once per seq and status, and again when either changes", () => {
    const state = { ...batch() };
    const first = snapshotOf(state);
    const parsed = WireEnvelope.parse(JSON.parse(first.json));
    expect(parsed).toMatchObject({ seq: 4, event: "snapshot", batch_id: "b1" });
    expect(SnapshotData.parse(parsed.data).tasks.map((t) => t.task_id)).toEqual(["a", "b"]);
    expect(snapshotOf(state)).toBe(first);
    (state as { status: string }).status = "cancelled";
    const cancelled = snapshotOf(state);
    expect(cancelled).not.toBe(first);
    expect(JSON.parse(cancelled.json).data.status).toBe("cancelled");
    (state as { seq: number }).seq = 5;
    expect(snapshotOf(state).seq).toBe(5);
  });

  test("an interrupted run's finish is cancelled when replayed for a cancelled batch, and nothing otherwise", () => {
    const summary = { status: "interrupted", trials: { planned: 2, total: 1, passed: 1, failed: 0, errored: 0 }, meanReward: 1, durationMs: 9 } as RunSummary;
    const event = { seq: 9, ts: "t", runId: "b1", type: "run_finished", data: summary } as ProctorEvent;
    expect(wireOfEvent(batch({ status: "cancelled" }), event, true)?.data).toMatchObject({ status: "cancelled" });
    expect(wireOfEvent(batch({ status: "cancelled" }), event, false)).toBeNull();
    expect(wireOfEvent(batch({ status: "running" }), event, true)).toBeNull();
    expect(wireOfEvent(batch(), { ...event, data: { ...summary, status: "completed" } } as ProctorEvent, false)?.event).toBe("batch_complete");
  });

  test("a finish without a summary (a batch that never ran) reports the batch's own counts and error", () => {
    const envelope = wireOfUpdate(batch({ status: "failed", durationMs: 20.2 }), { type: "finished", seq: 5, ts: "t", status: "failed", summary: null, error: "agent_image/: no" });
    expect(envelope).toEqual({
      seq: 5, event: "batch_complete", batch_id: "b1", ts: "t",
      data: { status: "failed", total: 2, completed: 1, passed: 1, failed: 0, reward: 1, duration_ms: 20, error: "agent_image/: no" },
    });
  });
});

describe("batchFeed", () => {
  test("replays recorded events in wire form (a historic interrupted finish of a cancelled batch is cancelled) and forwards live updates", async () => {
    type LiveBatch = Parameters<typeof batchFeed>[0];
    const listeners: Parameters<LiveBatch["subscribe"]>[0][] = [];
    const live: LiveBatch = {
      ...batch({ status: "cancelled" }),
      finished: true,
      bus: null,
      subscribe: (listener) => {
        listeners.push(listener);
        return () => listeners.splice(listeners.indexOf(listener), 1);
      },
    };
    const seen: number[] = [];
    const summary = { status: "interrupted", trials: { planned: 2, total: 1, passed: 1, failed: 0, errored: 0 }, meanReward: 1, durationMs: 9 } as RunSummary;
    const recorded = [
      { seq: 5, ts: "t", runId: "b1", type: "trial_started", trialId: "b__1", taskId: "b", data: { attempt: 1, retry: 0 } },
      { seq: 6, ts: "t", runId: "b1", type: "run_finished", data: summary },
    ] as ProctorEvent[];
    const feed = batchFeed(live, {
      ensureSeq: async () => {
        seen.push(-1);
      },
      replay: async (_b, since) => recorded.filter((e) => e.seq > since),
    });
    await feed.prepare();
    expect(seen).toEqual([-1]);
    expect(feed.finished).toBe(true);
    expect((await feed.replay(4)).map((e) => [e.seq, e.event, e.data.status])).toEqual([[5, "task_started", undefined], [6, "batch_complete", "cancelled"]]);
    const got: WireEnvelope[] = [];
    const stop = feed.subscribe((e) => got.push(e));
    listeners[0]?.({ type: "finished", seq: 7, ts: "t", status: "cancelled", summary: null, error: null });
    stop();
    expect(listeners).toHaveLength(0);
    expect(got.map((e) => [e.seq, e.event])).toEqual([[7, "batch_complete"]]);
    expect(JSON.parse(feed.snapshot().json).event).toBe("snapshot");
  });
});
