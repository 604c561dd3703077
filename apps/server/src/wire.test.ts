import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { ProctorEvent, RunSummary, TrialResult } from "@proctor/schema";
import { describe, expect, test } from "vitest";
import { forEachJsonLine } from "./store";
import { toWire } from "./wire";
import { backpressureAction } from "./ws-hub";

const result: TrialResult = {
  trialId: "t__1", taskId: "t", attempt: 1, category: null, difficulty: null, status: "error", reward: null,
  error: { kind: "agent", message: "timed out" }, durationMs: 1234.4, startedAt: "a", finishedAt: "b", retries: 0,
  phases: [], agent: null, checks: [],
};
const base = { seq: 7, ts: "2025-01-01T00:00:00.000Z", runId: "b1" };

describe("wire mapping", () => {
  test("engine events become term-executor events with the batch id and task id", () => {
    const started = toWire("b1", { ...base, type: "trial_started", trialId: "t__1", taskId: "t", data: { attempt: 1, retry: 0 } } as ProctorEvent, () => "completed");
    expect(started).toEqual({ seq: 7, event: "task_started", batch_id: "b1", task_id: "t", ts: base.ts, data: { task_id: "t", attempt: 1, retry: 0 } });
    const done = toWire("b1", { ...base, type: "trial_finished", trialId: "t__1", taskId: "t", data: result } as ProctorEvent, () => "completed");
    expect(done?.event).toBe("task_complete");
    expect(done?.data).toEqual({ task_id: "t", status: "completed", outcome: "error", passed: false, reward: 0, error: "agent: timed out", duration_ms: 1234 });
  });

  test("run_finished becomes batch_complete with the status the caller decides, or nothing", () => {
    const summary = { trials: { planned: 3, total: 3, passed: 2, failed: 0, errored: 1 }, meanReward: 2 / 3, durationMs: 10 } as RunSummary;
    const event = { ...base, type: "run_finished", data: summary } as ProctorEvent;
    expect(toWire("b1", event, () => "cancelled")?.data).toMatchObject({ status: "cancelled", total: 3, passed: 2, failed: 1, reward: 2 / 3 });
    expect(toWire("b1", event, () => null)).toBeNull();
  });
});

describe("backpressure policy", () => {
  const caps = { softBufferBytes: 100, hardBufferBytes: 1000 };
  test("a reading client gets everything", () => {
    expect(backpressureAction("task_phase", 0, caps)).toBe("send");
    expect(backpressureAction("task_complete", 100, caps)).toBe("send");
  });
  test("above the soft cap task_phase is dropped but completions still go out", () => {
    expect(backpressureAction("task_phase", 101, caps)).toBe("drop");
    expect(backpressureAction("task_retry", 500, caps)).toBe("drop");
    expect(backpressureAction("task_complete", 500, caps)).toBe("send");
  });
  test("above the hard cap the client is resynced later, except for the final event", () => {
    expect(backpressureAction("task_complete", 1001, caps)).toBe("resync");
    expect(backpressureAction("batch_complete", 10_000, caps)).toBe("send");
  });
});

describe("reading JSONL after a crash", () => {
  test("a torn last line is skipped, a broken middle line is an error naming the file and line", async () => {
    const dir = await mkdtemp(join(tmpdir(), "proctor-jsonl-"));
    try {
      const file = join(dir, "events.jsonl");
      await writeFile(file, '{"seq":1}\n{"seq":2}\n{"seq":3,"ty');
      const seen: unknown[] = [];
      await forEachJsonLine(file, (v) => seen.push(v));
      expect(seen).toEqual([{ seq: 1 }, { seq: 2 }]);
      await writeFile(file, '{"seq":1}\nnot json\n{"seq":3}\n');
      await expect(forEachJsonLine(file, (v) => seen.push(v))).rejects.toThrow(/events\.jsonl:2/);
      seen.length = 2;
      await forEachJsonLine(join(dir, "missing.jsonl"), () => seen.push("x"));
      expect(seen).toHaveLength(2);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
