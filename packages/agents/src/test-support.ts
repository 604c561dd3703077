// Helpers for this package's tests (not exported from index.ts).
import type { Sandbox } from "@proctor/sandbox";
import type { TaskSpec } from "@proctor/schema";
import type { AgentContext } from "./types";

/** A native task for driving an agent directly: no image, no tests, a 30 s agent timeout. */
export function testTask(overrides: Partial<TaskSpec> = {}): TaskSpec {
  return {
    id: "t",
    format: "native",
    sourcePath: "/nonexistent",
    instruction: "Create answer.txt holding 42.",
    category: null,
    difficulty: null,
    tags: [],
    environment: { dockerImage: null, buildContext: null, buildTimeoutSec: 600, cpus: null, memoryMb: null, storageMb: null, gpus: 0, allowInternet: false, workdir: null, env: {} },
    agent: { timeoutSec: 30 },
    verifier: { mode: "reward-file", testsDir: null, command: "true", timeoutSec: 30, env: {}, isolateProcesses: false, allowChanges: [] },
    solution: null,
    workspace: null,
    extra: {},
    ...overrides,
  };
}

/** An agent's context for `task` in `sandbox`, its deadline `timeoutMs` from now. */
export function testContext(sandbox: Sandbox, task: TaskSpec, logDir: string, timeoutMs = 30_000): AgentContext {
  return { sandbox, task, timeoutMs, deadlineMs: Date.now() + timeoutMs, signal: new AbortController().signal, logDir };
}
