import type { TrialResult } from "@proctor/schema";
import { describe, expect, it } from "vitest";
import { validationProblems } from "./validation";

function trial(status: TrialResult["status"], over: Partial<TrialResult> = {}): TrialResult {
  return {
    trialId: "t-1", taskId: "t", attempt: 1, category: null, difficulty: null, status,
    reward: status === "passed" ? 1 : status === "failed" ? 0 : null,
    error: null, durationMs: 10, startedAt: "s", finishedAt: "f", retries: 0, phases: [], agent: null, checks: null,
    ...over,
  };
}
const check = (name: string, passed: boolean, exitCode: number | null = passed ? 0 : 1, timedOut = false) => ({ name, passed, exitCode, timedOut, output: "" });

describe("validationProblems", () => {
  it("a task is valid when the oracle passes and nop scores 0 without an error", () => {
    expect(validationProblems({ oracle: trial("passed"), nop: trial("failed") })).toEqual([]);
  });

  it("names a trial that did not run, and an error by kind and its first line only", () => {
    const error = trial("error", { error: { kind: "infra", message: "daemon gone\nstack..." } });
    expect(validationProblems({ nop: error })).toEqual(["oracle did not run", "nop error (infra: daemon gone)"]);
  });

  it("an error's message is shown whole, not cut off mid-word; only a very long one is cut, at a word", () => {
    const own = `the verifier wrote no reward (exit 2; test-stderr.txt: "/tests/test.sh: line 7: syntax error: unexpected end of file"): neither /logs/verifier/reward.json nor /logs/verifier/reward.txt exists; tests/test.sh must write "1", "0" or a number to reward.txt, or {"reward": <number>} to reward.json`;
    const error = trial("error", { error: { kind: "verifier", message: own } });
    expect(validationProblems({ oracle: error, nop: error })).toEqual([`oracle error (verifier: ${own})`, `nop error (verifier: ${own})`]);
    const long = trial("error", { error: { kind: "infra", message: "word ".repeat(200) } });
    expect(validationProblems({ oracle: long, nop: trial("failed") })[0]).toMatch(/^oracle error \(infra: (word )+word\.\.\.\)$/);
  });

  it("names the failing checks of the oracle and the passing checks of nop", () => {
    const oracle = trial("failed", { reward: 0, checks: [check("a", true), check("b", false, 2), check("c", false, null, true)] });
    const nop = trial("passed", { reward: 1, checks: [check("a", true), check("b", false)] });
    expect(validationProblems({ oracle, nop })).toEqual([
      "oracle reward 0, expected 1; failing checks: b (exit 2), c (timed out)",
      "nop reward 1, expected 0; checks passing without a fix: a",
    ]);
  });

  it("SWE-bench grading: the tests that keep the oracle from resolving, and the FAIL_TO_PASS tests nop already passes (at most 8 named)", () => {
    const many = Array.from({ length: 10 }, (_, i) => `t${i}`);
    const grading = (f2pFail: string[], f2pOk: string[], p2pFail: string[]) => ({
      resolved: false, testCommand: "pytest",
      failToPass: { success: f2pOk, failure: f2pFail }, passToPass: { success: [], failure: p2pFail },
      tests: { x: "FAILED" as const },
    });
    const oracle = trial("failed", { grading: grading(["x"], [], ["y"]) });
    const nop = trial("passed", { grading: grading([], many, []) });
    expect(validationProblems({ oracle, nop })).toEqual([
      "oracle does not resolve: FAIL_TO_PASS failing: x (FAILED); PASS_TO_PASS failing: y (not run)",
      "nop resolves: FAIL_TO_PASS already passing without a fix: t0, t1, t2, t3, t4, t5, t6, t7 and 2 more",
    ]);
  });
});
