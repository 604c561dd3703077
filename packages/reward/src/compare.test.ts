import { describe, expect, it } from "vitest";
import type { TrialResult } from "@proctor/schema";
import { compareRuns, flakyTasks, mcnemarExact, meanOverTasks, pairedBootstrap, passAtKTable, taskOutcomes } from "./compare";

function trial(taskId: string, attempt: number, status: TrialResult["status"], reward: number | null = status === "passed" ? 1 : status === "failed" ? 0 : null): TrialResult {
  return {
    trialId: `${taskId}__${attempt}`,
    taskId,
    attempt,
    category: "cat",
    difficulty: null,
    status,
    reward,
    error: status === "error" ? { kind: "agent", message: "boom" } : null,
    durationMs: 1,
    startedAt: "2025-01-01T00:00:00.000Z",
    finishedAt: "2025-01-01T00:00:01.000Z",
    retries: 0,
    phases: [],
    agent: null,
    checks: null,
  };
}

describe("mcnemarExact", () => {
  it("matches hand-computed binomial tails", () => {
    // n = 7 discordant, min 1: 2 * (C(7,0) + C(7,1)) / 2^7 = 2 * 8/128
    expect(mcnemarExact(1, 6).pValue).toBeCloseTo(0.125, 12);
    expect(mcnemarExact(6, 1).pValue).toBeCloseTo(0.125, 12);
    // n = 5, min 0: 2 / 32
    expect(mcnemarExact(0, 5).pValue).toBeCloseTo(0.0625, 12);
    // n = 10, min 2: 2 * (1 + 10 + 45) / 1024
    expect(mcnemarExact(2, 8).pValue).toBeCloseTo(0.109375, 12);
    // symmetric counts: the doubled tail exceeds 1 and is capped
    expect(mcnemarExact(3, 3).pValue).toBe(1);
    expect(mcnemarExact(0, 0).pValue).toBe(1);
    // n = 20, min 0: 2 / 2^20
    expect(mcnemarExact(0, 20).pValue).toBeCloseTo(2 / 1048576, 15);
  });

  it("keeps the denominator it was given", () => {
    expect(mcnemarExact(1, 6, 40)).toMatchObject({ passToFail: 1, failToPass: 6, pairs: 40 });
  });
});

describe("taskOutcomes and pass@k", () => {
  const results = [trial("t1", 1, "passed"), trial("t1", 2, "failed"), trial("t1", 3, "error"), trial("t2", 1, "passed"), trial("t2", 2, "passed")];

  it("gives each task's pass rate over its attempts", () => {
    const [t1, t2] = taskOutcomes(results);
    expect(t1).toMatchObject({ taskId: "t1", attempts: 3, passed: 1, failed: 1, errored: 1 });
    expect(t1?.passRate).toBeCloseTo(1 / 3, 12);
    expect(t1?.meanReward).toBeCloseTo(1 / 3, 12); // the error scores 0
    expect(t2).toMatchObject({ attempts: 2, passed: 2, passRate: 1, meanReward: 1 });
  });

  it("counts a repeated trial id once (the last line wins)", () => {
    const [t1] = taskOutcomes([trial("t1", 1, "error"), trial("t1", 1, "passed")]);
    expect(t1).toMatchObject({ attempts: 1, passed: 1 });
  });

  it("pass@k averages the unbiased estimator over tasks with >= k attempts", () => {
    const table = passAtKTable(taskOutcomes(results), 3);
    // k=1: (1/3 + 1) / 2; k=2: (1 - C(2,2)/C(3,2) = 2/3, and 1) / 2; k=3: t1 only, 2 failures < 3 -> 1
    expect(table.map((p) => p.tasks)).toEqual([2, 2, 1]);
    expect(table[0]?.value).toBeCloseTo(2 / 3, 12);
    expect(table[1]?.value).toBeCloseTo(5 / 6, 12);
    expect(table[2]?.value).toBe(1);
  });

  it("mean over tasks carries its standard error and n", () => {
    const m = meanOverTasks(taskOutcomes(results));
    // values 1/3 and 1: mean 2/3, sd = |1 - 1/3| / sqrt(2), se = sd / sqrt(2) = 1/3
    expect(m.mean).toBeCloseTo(2 / 3, 12);
    expect(m.standardError).toBeCloseTo(1 / 3, 12);
    expect(m.n).toBe(2);
  });
});

describe("pairedBootstrap", () => {
  it("is degenerate on constant differences", () => {
    const all = pairedBootstrap([1, 1, 1]);
    expect(all).toMatchObject({ estimate: 1, low: 1, high: 1, n: 3, pValue: 0 });
    expect(pairedBootstrap([0, 0])).toMatchObject({ estimate: 0, low: 0, high: 0, pValue: 1 });
    expect(pairedBootstrap([])).toBeNull();
  });

  it("is reproducible with a seed and brackets the estimate", () => {
    const d = [0.5, -0.25, 1, 0, 0.75, 0.25, -0.5, 1];
    const one = pairedBootstrap(d, { seed: 3 });
    expect(pairedBootstrap(d, { seed: 3 })).toEqual(one);
    expect(one?.estimate).toBeCloseTo(0.34375, 12);
    expect(one?.low).toBeLessThan(0.34375);
    expect(one?.high).toBeGreaterThan(0.34375);
  });
});

describe("compareRuns", () => {
  const a = [trial("t1", 1, "passed"), trial("t2", 1, "passed"), trial("t3", 1, "failed"), trial("t4", 1, "error"), trial("t5", 1, "passed")];
  const b = [trial("t1", 1, "passed"), trial("t2", 1, "failed"), trial("t3", 1, "passed"), trial("t4", 1, "passed"), trial("t6", 1, "passed")];

  it("pairs trials by task and attempt, lists flips, and tests them", () => {
    const c = compareRuns(a, b);
    expect(c.commonTasks).toBe(4);
    expect(c.onlyInA).toEqual(["t5"]);
    expect(c.onlyInB).toEqual(["t6"]);
    expect(c.pairs).toBe(4);
    expect(c.flips).toEqual([
      { taskId: "t2", attempt: 1, kind: "pass_to_fail", from: "passed", to: "failed" },
      { taskId: "t3", attempt: 1, kind: "fail_to_pass", from: "failed", to: "passed" },
      { taskId: "t4", attempt: 1, kind: "fail_to_pass", from: "error", to: "passed" },
    ]);
    // b = 1, c = 2: 2 * (C(3,0) + C(3,1)) / 8 = 1
    expect(c.mcnemar).toMatchObject({ passToFail: 1, failToPass: 2, pairs: 4, pValue: 1 });
    expect(c.passRate).toMatchObject({ a: 0.5, b: 0.75 });
    // per-task reward differences 0, -1, 1, 1
    expect(c.rewardDifference?.estimate).toBeCloseTo(0.25, 12);
    expect(c.rewardDifference?.n).toBe(4);
    expect(c.binary).toBe(true);
  });

  it("says a run with fractional rewards is not binary", () => {
    expect(compareRuns([trial("t1", 1, "failed", 0.5)], [trial("t1", 1, "passed")]).binary).toBe(false);
  });
});

describe("flakyTasks", () => {
  it("flags tasks whose oracle outcome changes across three runs, not with two", () => {
    const run = (s1: TrialResult["status"], s2: TrialResult["status"]) => ({ agent: "oracle" as const, results: [trial("t1", 1, s1), trial("t2", 1, s2)] });
    const three = [run("passed", "passed"), run("passed", "failed"), run("passed", "passed")];
    expect(flakyTasks(three)).toEqual([{ taskId: "t2", agent: "oracle", passed: 2, attempts: 3, runs: 3 }]);
    expect(flakyTasks(three.slice(0, 2))).toEqual([]);
  });
});
