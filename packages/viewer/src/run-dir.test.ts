import { appendFile, mkdtemp, rename, rm, truncate, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, expect, test } from "vitest";
import type { TrialResult } from "@proctor/schema";
import { RunDir } from "./run-dir";

function result(taskId: string, status: TrialResult["status"]): TrialResult {
  return {
    trialId: `${taskId}__1`, taskId, attempt: 1, category: null, difficulty: null, status, reward: status === "passed" ? 1 : 0, error: null, durationMs: 10,
    startedAt: "2025-03-01T10:00:00.000Z", finishedAt: "2025-03-01T10:00:01.000Z", retries: 0, phases: [], agent: null, checks: null, integrity: null,
  };
}
const line = (r: TrialResult) => `${JSON.stringify(r)}\n`;

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), "proctor-rundir-"));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

test("reads only what was appended since the last refresh; a torn last line waits for its end", async () => {
  const file = join(dir, "results.jsonl");
  await writeFile(file, line(result("a", "passed")) + line(result("b", "failed")));
  const run = new RunDir(dir, { plannedTrials: 4 });
  expect(await run.refresh()).toBe(true);
  expect(run.results.map((r) => r.trialId)).toEqual(["a__1", "b__1"]);
  const first = run.resultsOffset;
  expect(await run.refresh()).toBe(false); // nothing new: no read, same version
  const version = run.version;

  const c = line(result("c", "passed"));
  await appendFile(file, c.slice(0, 20)); // a writer in the middle of an append
  expect(await run.refresh()).toBe(true);
  expect(run.results).toHaveLength(2);
  await appendFile(file, c.slice(20) + line(result("a", "failed"))); // the rest, then a re-recorded trial
  await run.refresh();
  expect(run.resultsOffset).toBe(first + c.length + line(result("a", "failed")).length);
  expect(run.results.map((r) => `${r.trialId}:${r.status}`)).toEqual(["b__1:failed", "c__1:passed", "a__1:failed"]);
  expect(run.version).toBeGreaterThan(version);
  expect(run.summary.trials).toMatchObject({ planned: 4, total: 3, passed: 1, failed: 2 });
  expect(run.skippedLines).toBe(0);
});

test("a truncated or replaced results.jsonl is read again from the start", async () => {
  const file = join(dir, "results.jsonl");
  await writeFile(file, line(result("a", "passed")) + line(result("b", "passed")));
  const run = new RunDir(dir);
  await run.refresh();
  await truncate(file, 0);
  await appendFile(file, line(result("z", "failed")));
  await run.refresh();
  expect(run.results.map((r) => r.trialId)).toEqual(["z__1"]);
  const replacement = join(dir, "new.jsonl");
  await writeFile(replacement, line(result("y", "passed")) + line(result("x", "passed")) + "not json\n");
  await rename(replacement, file);
  await run.refresh();
  expect(run.results.map((r) => r.trialId)).toEqual(["y__1", "x__1"]);
  expect(run.skippedLines).toBe(1);
});

test("memoized values last until the next change", async () => {
  await writeFile(join(dir, "results.jsonl"), line(result("a", "passed")));
  const run = new RunDir(dir);
  await run.refresh();
  let computed = 0;
  const get = () => run.cached("n", () => ++computed);
  expect([get(), get()]).toEqual([1, 1]);
  await appendFile(join(dir, "results.jsonl"), line(result("b", "passed")));
  await run.refresh();
  expect(get()).toBe(2);
});
