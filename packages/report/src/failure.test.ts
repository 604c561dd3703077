import type { TrialResult } from "@proctor/schema";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { failureInOutput, firstFailure, readFirstFailure } from "./failure";
import { validationProblems } from "./validation";

function trial(status: TrialResult["status"], over: Partial<TrialResult> = {}): TrialResult {
  return {
    trialId: "t__1", taskId: "t", attempt: 1, category: null, difficulty: null, status,
    reward: status === "passed" ? 1 : status === "failed" ? 0 : null,
    error: null, durationMs: 10, startedAt: "s", finishedAt: "f", retries: 0, phases: [], agent: null, checks: null,
    ...over,
  };
}

describe("firstFailure", () => {
  it("finds pytest's short summary line, a shell test's FAIL line, a TAP not ok; nothing in a clean log", () => {
    expect(failureInOutput("collected 3 items\n....\nFAILED tests/test_a.py::test_b[1] - assert 1 == 2\nFAILED tests/test_a.py::test_c\n")).toEqual({ name: "tests/test_a.py::test_b[1]", message: "assert 1 == 2" });
    expect(failureInOutput("checking x.txt\nFAIL: x.txt holds 'wrong'\n")).toEqual({ name: "tests' output", message: "FAIL: x.txt holds 'wrong'" });
    expect(failureInOutput("ok 1 - a\nnot ok 2 - b works\n")).toEqual({ name: "tests' output", message: "not ok 2 - b works" });
    expect(failureInOutput("all good\n3 passed\n")).toBeNull();
  });

  it("names the first failing check with its output's last line, a SWE test, an error; nothing for a pass", () => {
    const checks = [{ name: "build", passed: true, exitCode: 0, timedOut: false, output: "" }, { name: "unit", passed: false, exitCode: 1, timedOut: false, output: "running\nexpected 3, got 4\n\n" }];
    expect(firstFailure(trial("failed", { checks }))).toEqual({ name: "unit", message: "expected 3, got 4" });
    const grading = { resolved: false, testCommand: "pytest", failToPass: { success: [], failure: ["t::x"] }, passToPass: { success: [], failure: [] }, tests: { "t::x": "FAILED" as const } };
    expect(firstFailure(trial("failed", { grading }))).toEqual({ name: "t::x", message: "FAIL_TO_PASS test FAILED" });
    expect(firstFailure(trial("error", { error: { kind: "verifier", message: "no reward file" } }))).toEqual({ name: "verifier error", message: "no reward file" });
    expect(firstFailure(trial("passed"), "FAILED a::b")).toBeNull();
  });

  it("reads Proctor's captured verifier output first, then the text files the tests wrote under logs/verifier/", async () => {
    const dir = await mkdtemp(join(tmpdir(), "proctor-failure-"));
    try {
      await mkdir(join(dir, "verifier"), { recursive: true });
      await mkdir(join(dir, "logs", "verifier"), { recursive: true });
      await writeFile(join(dir, "verifier", "test-stdout.txt"), "running the tests\nsee pytest.txt\n");
      await writeFile(join(dir, "logs", "verifier", "pytest.txt"), "FAILED tests/test_x.py::test_y - KeyError: 'z'\n1 failed\n");
      expect(await readFirstFailure(trial("failed"), dir)).toEqual({ name: "tests/test_x.py::test_y", message: "KeyError: 'z'" });
      // validate names it for a task whose tests only write a reward.
      const failure = await readFirstFailure(trial("failed"), dir);
      expect(validationProblems({ oracle: trial("failed"), nop: trial("failed") }, failure)).toEqual(["oracle reward 0, expected 1; first failure: tests/test_x.py::test_y: KeyError: 'z'"]);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
