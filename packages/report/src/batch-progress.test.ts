import { PassThrough } from "node:stream";
import { describe, expect, it } from "vitest";
import { batchTaskTable, createBatchProgress } from "./batch-progress";
import { textTable } from "./text";

function output(): { stream: PassThrough; text: () => string } {
  const stream = new PassThrough();
  const chunks: string[] = [];
  stream.on("data", (c: Buffer) => chunks.push(c.toString()));
  return { stream, text: () => chunks.join("") };
}

describe("createBatchProgress (lines mode)", () => {
  it("prints the start and one line per finished task, and keeps the rows for the table", () => {
    const out = output();
    const progress = createBatchProgress(out.stream, { tty: false });
    progress.onEvent({ event: "batch_started", batch_id: "b1", data: { total_tasks: 2 } });
    progress.onEvent({ event: "task_phase", batch_id: "b1", data: { task_id: "a" } });
    progress.onEvent({ event: "task_complete", batch_id: "b1", data: { task_id: "a", outcome: "passed", reward: 1, duration_ms: 1500, error: null } });
    progress.onEvent({ event: "task_complete", batch_id: "b1", data: { task_id: "b", outcome: "error", reward: 0, duration_ms: 10, error: "agent: timed out" } });
    progress.stop();
    expect(out.text()).toBe("batch b1 started: 2 tasks\n[1/2] PASSED a reward=1\n[2/2] ERROR b reward=0 agent: timed out\n");
    expect([...progress.tasks.keys()]).toEqual(["a", "b"]);
  });

  it("a snapshot (joining late) brings the tasks already finished, not the pending ones", () => {
    const progress = createBatchProgress(output().stream, { tty: false });
    progress.onEvent({
      event: "snapshot",
      batch_id: "b1",
      data: { total_tasks: 2, tasks: [{ task_id: "a", outcome: "failed", reward: 0, duration_ms: 5, error: null }, { task_id: "b", outcome: null, reward: null, duration_ms: null, error: null }] },
    });
    expect([...progress.tasks.keys()]).toEqual(["a"]);
  });
});

describe("batchTaskTable", () => {
  it("sorts by task id and shows pending tasks and durations", () => {
    const table = batchTaskTable([
      { task_id: "b", outcome: null, reward: null, duration_ms: null, error: null },
      { task_id: "a", outcome: "passed", reward: 1, duration_ms: 61_000, error: null },
    ]).split("\n");
    expect(table[0]).toMatch(/^task\s+outcome\s+reward\s+time\s+error$/);
    expect(table[2]).toMatch(/^a\s+passed\s+1\s+1m01s$/);
    expect(table[3]).toMatch(/^b\s+pending$/);
  });
});

describe("textTable", () => {
  it("right-aligns numbers after the first column, or aligns every column left", () => {
    expect(textTable(["id", "n"], [["a", "1"], ["bb", "100"]]).split("\n")).toEqual(["id    n", "--  ---", "a     1", "bb  100"]);
    expect(textTable(["id", "path"], [["a", "x/y/z"], ["bb", "q"]], "left").split("\n")).toEqual(["id  path", "--  -----", "a   x/y/z", "bb  q"]);
  });
});
