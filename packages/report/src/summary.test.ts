import { summarize } from "@proctor/reward";
import type { TrialResult } from "@proctor/schema";
import { describe, expect, it } from "vitest";
import { renderRunSummary } from "./summary";

function trial(taskId: string, status: TrialResult["status"], over: Partial<TrialResult> = {}): TrialResult {
  return {
    trialId: `${taskId}-${over.attempt ?? 1}`,
    taskId,
    attempt: 1,
    category: null,
    difficulty: null,
    status,
    reward: status === "passed" ? 1 : status === "failed" ? 0 : null,
    error: status === "error" ? { kind: "infra", message: "daemon gone" } : null,
    durationMs: 10,
    startedAt: "2026-01-01T00:00:00.000Z",
    finishedAt: "2026-01-01T00:00:01.000Z",
    retries: 0,
    phases: [],
    agent: null,
    checks: null,
    ...over,
  };
}

const base = { runId: "r1", startedAt: "2026-01-01T00:00:00.000Z", now: "2026-01-01T00:01:30.000Z", attempts: 1 };

describe("renderRunSummary", () => {
  it("prints a row per category sorted by name, the totals, and what each rate is out of", () => {
    const results = [
      trial("a", "passed", { category: "web" }),
      trial("b", "failed", { category: "web" }),
      trial("c", "error", { category: "data" }),
      trial("d", "passed", { category: "data" }),
    ];
    const text = renderRunSummary(summarize({ ...base, results, plannedTrials: 4, status: "completed" }));
    const lines = text.split("\n");
    expect(lines[0]).toMatch(/^category\s+trials\s+passed\s+failed\s+errored\s+pass rate\s+mean reward$/);
    expect(lines.slice(2, 5).map((l) => l.split(/\s+/)[0])).toEqual(["data", "web", "all"]);
    expect(lines[4]).toMatch(/^all\s+4\s+2\s+1\s+1\s+50\.0%/);
    expect(text).toMatch(/^pass rate\s+50\.0% \(2\/4 /m);
    expect(text).toMatch(/^scored only\s+66\.7% \(2\/3 /m);
    expect(text).toMatch(/^errors\s+infra 1$/m);
    expect(text).toMatch(/^status\s+completed in 1m30s$/m);
    expect(text).not.toMatch(/^unfinished/m);
  });

  it("names what is missing from an unfinished run, and the tokens spent", () => {
    const usage = { inputTokens: 12_345, outputTokens: 678, requests: 9, retries: 1 };
    const agent = { exitCode: 0, timedOut: false, durationMs: 5, usage } as unknown as TrialResult["agent"];
    const text = renderRunSummary(summarize({ ...base, results: [trial("a", "passed", { agent })], plannedTrials: 3, status: "interrupted" }));
    expect(text).toMatch(/^unfinished\s+2 of 3 planned trials$/m);
    expect(text).toMatch(/^tokens\s+12,345 in, 678 out \(9 model requests, 1 retried, over 1 trials\)$/m);
    expect(text).toMatch(/^status\s+interrupted in/m);
  });
});
