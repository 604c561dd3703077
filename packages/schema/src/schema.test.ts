import { describe, expect, test } from "vitest";
import { TaskId, TrialResult, AgentSpec } from "./index";

describe("schema", () => {
  test("task ids reject path tricks and accept ordinary names", () => {
    expect(TaskId.safeParse("hello-world_1.2").success).toBe(true);
    for (const bad of ["../x", "a/b", "", ".hidden", "a b", "x".repeat(129)]) {
      expect(TaskId.safeParse(bad).success, bad).toBe(false);
    }
  });

  test("a trial result needs a known status and error kind", () => {
    const base = {
      trialId: "t", taskId: "t", attempt: 1, category: null, difficulty: null, status: "passed", reward: 1,
      error: null, durationMs: 1, startedAt: "x", finishedAt: "y", retries: 0, phases: [], agent: null, checks: null,
    };
    expect(TrialResult.safeParse(base).success).toBe(true);
    expect(TrialResult.safeParse({ ...base, status: "ok" }).success).toBe(false);
    expect(TrialResult.safeParse({ ...base, status: "error", error: { kind: "oops", message: "m" } }).success).toBe(false);
  });

  test("a code agent needs its directory", () => {
    expect(AgentSpec.safeParse({ kind: "code" }).success).toBe(false);
    expect(AgentSpec.safeParse({ kind: "code", dir: "/a" }).success).toBe(true);
  });
});
