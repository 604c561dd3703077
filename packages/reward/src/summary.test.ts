import { RunSummary, type TrialResult } from "@proctor/schema";
import { describe, expect, it } from "vitest";
import { summarize } from "./summary";

let counter = 0;
function trial(over: Partial<TrialResult> & Pick<TrialResult, "taskId" | "status">): TrialResult {
  counter++;
  const reward = over.status === "passed" ? 1 : over.status === "failed" ? 0 : null;
  return {
    trialId: `${over.taskId}-${over.attempt ?? 1}-${counter}`,
    attempt: 1,
    category: null,
    difficulty: null,
    reward,
    error: over.status === "error" ? { kind: "verifier", message: "no reward file" } : null,
    durationMs: 10,
    startedAt: "2025-01-01T00:00:00.000Z",
    finishedAt: "2025-01-01T00:00:01.000Z",
    retries: 0,
    phases: [],
    agent: null,
    checks: null,
    ...over,
  };
}

const base = { runId: "r1", startedAt: "2025-01-01T00:00:00.000Z", now: new Date("2025-01-01T00:01:30.000Z"), status: "completed" as const };

describe("summarize", () => {
  it("counts trials and states every denominator", () => {
    const results = [
      trial({ taskId: "a", status: "passed" }),
      trial({ taskId: "b", status: "failed" }),
      trial({ taskId: "c", status: "error", error: { kind: "infra", message: "daemon gone" } }),
      trial({ taskId: "d", status: "passed" }),
      trial({ taskId: "e", status: "failed", reward: 0.5 }),
    ];
    const s = summarize({ ...base, results, plannedTrials: 8, attempts: 1 });
    expect(RunSummary.parse(s)).toEqual(s);
    expect(s.trials).toEqual({ planned: 8, total: 5, passed: 2, flagged: 0, failed: 2, errored: 1 });
    expect(s.passRate).toBeCloseTo(2 / 5, 12);
    expect(s.rates.passRate).toEqual({ value: 2 / 5, numerator: 2, denominator: 5, of: "finished trials (errors and flagged passes count as not passed)" });
    expect(s.rates.passRateScored).toEqual({ value: 2 / 4, numerator: 2, denominator: 4, of: "scored trials (infra, setup and verifier errors excluded; agent errors count as not passed)" });
    // rewards 1 + 0 + 0 (error) + 1 + 0.5 over 5
    expect(s.rates.meanReward).toEqual({ value: 2.5 / 5, numerator: 2.5, denominator: 5, of: "finished trials (errors and flagged passes score 0)" });
    expect(s.meanReward).toBeCloseTo(0.5, 12);
    expect(s.errorsByKind).toEqual({ infra: 1 });
    expect(s.passAtK).toBeNull();
    expect(s.startedAt).toBe("2025-01-01T00:00:00.000Z");
    expect(s.updatedAt).toBe("2025-01-01T00:01:30.000Z");
    expect(s.durationMs).toBe(90_000);
    expect(s.status).toBe("completed");
  });

  it("never counts a flagged pass as a pass, and keeps the agent's errors in the scored denominator", () => {
    const integrity = (flags: string[]) => ({ isolation: "isolated" as const, tamperChecked: true, tampered: [], survivors: [], flagged: flags.length > 0, flags, note: null });
    const results = [
      trial({ taskId: "clean", status: "passed", integrity: integrity([]) }),
      trial({ taskId: "flagged", status: "passed", integrity: integrity(["graded in the agent's own sandbox without an audit"]) }),
      // Written before flags existed: a pass with agent processes alive was flagged and counted.
      trial({ taskId: "old", status: "passed", integrity: { ...integrity([]), flagged: true, flags: undefined } }),
      trial({ taskId: "agent-error", status: "error", reward: null, error: { kind: "agent", message: "the verifier produced no reward (with 1 agent process(es) alive during verification)" } }),
      trial({ taskId: "infra-error", status: "error", reward: null, error: { kind: "infra", message: "daemon gone" } }),
    ];
    const s = summarize({ ...base, results, plannedTrials: 5, attempts: 1 });
    expect(RunSummary.parse(s)).toEqual(s);
    expect(s.trials).toMatchObject({ total: 5, passed: 2, flagged: 1, failed: 0, errored: 2 });
    expect(s.rates.passRate).toMatchObject({ numerator: 2, denominator: 5 });
    // Only the infra error leaves the denominator.
    expect(s.rates.passRateScored).toMatchObject({ numerator: 2, denominator: 4 });
    expect(s.rates.meanReward).toMatchObject({ numerator: 2, denominator: 5 });
    expect(s.integrity).toMatchObject({ flagged: 1 });
  });

  it("gives null rates, not 0 or NaN, when nothing finished", () => {
    const s = summarize({ ...base, results: [], plannedTrials: 3, attempts: 2, status: "running" });
    expect(s.passRate).toBeNull();
    expect(s.meanReward).toBeNull();
    expect(s.rates.passRate).toMatchObject({ value: null, numerator: 0, denominator: 0 });
    expect(s.rates.passRateScored.value).toBeNull();
    expect(s.meanRewardStdErr).toBeNull();
    expect(s.passAtK).toEqual({});
    expect(s.trials).toEqual({ planned: 3, total: 0, passed: 0, flagged: 0, failed: 0, errored: 0 });
  });

  it("passRateScored is null when every trial errored", () => {
    const s = summarize({ ...base, results: [trial({ taskId: "a", status: "error" })], plannedTrials: 1, attempts: 1 });
    expect(s.rates.passRateScored).toMatchObject({ value: null, numerator: 0, denominator: 0 });
    expect(s.rates.passRate.value).toBe(0);
  });

  it("groups by category and difficulty with defaults for null", () => {
    const results = [
      trial({ taskId: "a", status: "passed", category: "security", difficulty: "hard" }),
      trial({ taskId: "b", status: "failed", category: "security", difficulty: null }),
      trial({ taskId: "c", status: "error", category: null, difficulty: "easy" }),
      trial({ taskId: "d", status: "passed", category: null, difficulty: "easy" }),
    ];
    const s = summarize({ ...base, results, plannedTrials: 4, attempts: 1 });
    expect(s.byCategory).toEqual({
      security: { total: 2, passed: 1, flagged: 0, failed: 1, errored: 0, passRate: 0.5, meanReward: 0.5 },
      uncategorized: { total: 2, passed: 1, flagged: 0, failed: 0, errored: 1, passRate: 0.5, meanReward: 0.5 },
    });
    expect(s.byDifficulty).toEqual({
      easy: { total: 2, passed: 1, flagged: 0, failed: 0, errored: 1, passRate: 0.5, meanReward: 0.5 },
      hard: { total: 1, passed: 1, flagged: 0, failed: 0, errored: 0, passRate: 1, meanReward: 1 },
      unknown: { total: 1, passed: 0, flagged: 0, failed: 1, errored: 0, passRate: 0, meanReward: 0 },
    });
    expect(s.errorsByKind).toEqual({ verifier: 1 });
  });

  it("counts errors by kind, an error without details as unknown", () => {
    const results = [
      trial({ taskId: "a", status: "error", error: { kind: "agent", message: "timeout" } }),
      trial({ taskId: "b", status: "error", error: { kind: "agent", message: "setup" } }),
      trial({ taskId: "c", status: "error", error: { kind: "setup", message: "clone" } }),
      trial({ taskId: "d", status: "error", error: null }),
    ];
    expect(summarize({ ...base, results, plannedTrials: 4, attempts: 1 }).errorsByKind).toEqual({ agent: 2, setup: 1, unknown: 1 });
  });

  it("lets the last result for a trialId win", () => {
    const first = trial({ taskId: "a", status: "error", trialId: "a-1" });
    const other = trial({ taskId: "b", status: "failed", trialId: "b-1" });
    const again = trial({ taskId: "a", status: "passed", trialId: "a-1" });
    const s = summarize({ ...base, results: [first, other, again], plannedTrials: 2, attempts: 1 });
    expect(s.trials).toEqual({ planned: 2, total: 2, passed: 1, flagged: 0, failed: 1, errored: 0 });
    expect(s.errorsByKind).toEqual({});
  });

  it("computes the standard error over per-task mean rewards", () => {
    // task a: 1, 1 -> 1; task b: 1, 0 -> 0.5; task c: 0, error -> 0
    const results = [
      trial({ taskId: "a", attempt: 1, status: "passed" }),
      trial({ taskId: "a", attempt: 2, status: "passed" }),
      trial({ taskId: "b", attempt: 1, status: "passed" }),
      trial({ taskId: "b", attempt: 2, status: "failed" }),
      trial({ taskId: "c", attempt: 1, status: "failed" }),
      trial({ taskId: "c", attempt: 2, status: "error" }),
    ];
    const s = summarize({ ...base, results, plannedTrials: 6, attempts: 2 });
    // means 1, 0.5, 0: mean 0.5, sample variance (0.25 + 0 + 0.25) / 2 = 0.25, sd 0.5, se 0.5 / sqrt(3)
    expect(s.meanRewardStdErr).toBeCloseTo(0.5 / Math.sqrt(3), 12);
    expect(s.meanReward).toBeCloseTo(3 / 6, 12);
  });

  it("has no standard error with a single task", () => {
    const results = [trial({ taskId: "a", attempt: 1, status: "passed" }), trial({ taskId: "a", attempt: 2, status: "failed" })];
    expect(summarize({ ...base, results, plannedTrials: 2, attempts: 2 }).meanRewardStdErr).toBeNull();
  });

  it("computes unbiased pass@k over tasks with enough finished attempts", () => {
    const attempts = (taskId: string, statuses: TrialResult["status"][]) =>
      statuses.map((status, i) => trial({ taskId, attempt: i + 1, status }));
    const results = [
      ...attempts("a", ["passed", "failed", "failed", "passed", "error"]), // n=5, c=2
      ...attempts("b", ["failed", "failed", "failed", "failed", "failed"]), // n=5, c=0
      ...attempts("c", ["passed", "passed"]), // n=2, c=2 (still running)
    ];
    const s = summarize({ ...base, results, plannedTrials: 15, attempts: 5, status: "running" });
    expect(s.passAtK).not.toBeNull();
    const p = s.passAtK as Record<string, number>;
    expect(Object.keys(p)).toEqual(["1", "2", "3", "4", "5"]);
    expect(p["1"]).toBeCloseTo((0.4 + 0 + 1) / 3, 12);
    expect(p["2"]).toBeCloseTo((0.7 + 0 + 1) / 3, 12);
    // k >= 3: task c has only 2 finished attempts and is left out
    expect(p["3"]).toBeCloseTo((0.9 + 0) / 2, 12);
    expect(p["4"]).toBeCloseTo((1 + 0) / 2, 12);
    expect(p["5"]).toBeCloseTo((1 + 0) / 2, 12);
  });

  it("leaves out a k that no task has reached", () => {
    const results = [trial({ taskId: "a", attempt: 1, status: "passed" })];
    expect(summarize({ ...base, results, plannedTrials: 3, attempts: 3, status: "running" }).passAtK).toEqual({ "1": 1 });
  });

  it("scores a passed or failed trial without a numeric reward by its verdict", () => {
    const results = [trial({ taskId: "a", status: "passed", reward: null }), trial({ taskId: "b", status: "failed", reward: null })];
    expect(summarize({ ...base, results, plannedTrials: 2, attempts: 1 }).meanReward).toBe(0.5);
  });

  it("never reports a negative duration", () => {
    const s = summarize({ ...base, now: "2024-12-31T23:59:59.000Z", results: [], plannedTrials: 0, attempts: 1 });
    expect(s.durationMs).toBe(0);
  });

  it("sums model usage over the trials that report it, and leaves it out when none do", () => {
    const usage = (inputTokens: number, outputTokens: number, requests: number, retries: number) => ({
      exitCode: 0,
      timedOut: false,
      name: "llm",
      model: "m",
      usage: { inputTokens, outputTokens, requests, retries },
    });
    const results = [
      trial({ taskId: "a", status: "passed", agent: usage(100, 10, 3, 1) }),
      trial({ taskId: "b", status: "failed", agent: usage(50, 5, 2, 0) }),
      trial({ taskId: "c", status: "error", agent: null }),
    ];
    const s = summarize({ ...base, results, plannedTrials: 3, attempts: 1 });
    expect(s.usage).toEqual({ inputTokens: 150, outputTokens: 15, requests: 5, retries: 1, trials: 2 });
    expect(RunSummary.parse(s).usage).toEqual(s.usage);
    expect(summarize({ ...base, results: [trial({ taskId: "a", status: "passed" })], plannedTrials: 1, attempts: 1 }).usage).toBeUndefined();
  });
});
