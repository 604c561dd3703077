import { mkdir } from "node:fs/promises";
import { join } from "node:path";
import {
  ImageError, LOCAL_CAPABILITIES, LocalRuntime, SandboxStartError,
  type ImageRequest, type Sandbox, type SandboxCreateOptions, type SandboxRuntime,
} from "@proctor/sandbox";
import type { TaskSpec } from "@proctor/schema";
import { loadTasks } from "@proctor/tasks";
import { afterAll, beforeAll, expect, test } from "vitest";
import { ManualClock } from "./clock";
import { startRun } from "./run";
import { EXAMPLES_DIR, readResultsFile, tempDir } from "./testing/fixtures";

/** The real local runtime, with the first `failures` calls of one method failing as a daemon hiccup would. */
class FlakyRuntime implements SandboxRuntime {
  readonly name = "local";
  readonly capabilities = LOCAL_CAPABILITIES;
  calls = 0;
  constructor(private readonly inner: SandboxRuntime, private failures: number, private readonly error: () => Error, private readonly where: "resolveImage" | "create") {}
  private maybeFail(method: string): void {
    if (method !== this.where) return;
    this.calls++;
    if (this.failures > 0) {
      this.failures--;
      throw this.error();
    }
  }
  async resolveImage(request: ImageRequest): Promise<string> {
    this.maybeFail("resolveImage");
    return this.inner.resolveImage(request);
  }
  async create(options: SandboxCreateOptions): Promise<Sandbox> {
    this.maybeFail("create");
    return this.inner.create(options);
  }
  reap(): Promise<number> {
    return this.inner.reap();
  }
}

let root: { path: string; cleanup: () => Promise<void> };
let local: LocalRuntime;
let task: TaskSpec;
beforeAll(async () => {
  root = await tempDir("proctor-engine-retry-");
  await mkdir(join(root.path, "sandboxes"));
  local = new LocalRuntime({ rootDir: join(root.path, "sandboxes") });
  task = (await loadTasks([join(EXAMPLES_DIR, "tasks", "greeting-file")])).tasks[0] as TaskSpec;
});
afterAll(() => root.cleanup());

function runWith(runtime: SandboxRuntime, name: string, clock: ManualClock) {
  const handle = startRun({
    runId: name, runDir: join(root.path, "runs", name), tasks: [task], agent: { kind: "oracle" }, runtime,
    concurrency: 1, attempts: 1, clock, retryBaseDelayMs: 1000,
  });
  // Move the clock past each backoff as soon as the engine starts waiting.
  handle.bus.subscribe((e) => {
    if (e.type === "trial_retry") setImmediate(() => void clock.advance(e.data.delayMs));
  });
  return handle;
}

test("a sandbox start failure is retried with backoff on the injected clock, then the trial runs", async () => {
  const runtime = new FlakyRuntime(local, 2, () => new SandboxStartError("daemon hiccup"), "create");
  const handle = runWith(runtime, "flaky-start", new ManualClock());
  const retries: number[] = [];
  handle.bus.subscribe((e) => void (e.type === "trial_retry" && retries.push(e.data.delayMs)));
  const summary = await handle.done;
  expect(summary.trials.passed).toBe(1);
  // Two failed starts, the agent's sandbox, and the grader's.
  expect(runtime.calls).toBe(4);
  expect(retries).toHaveLength(2);
  expect(retries[1]).toBeGreaterThan(1000); // the second wait is longer: 2000 ms with jitter in [1000, 2000]
  const [result] = await readResultsFile(handle.runDir);
  expect(result).toMatchObject({ status: "passed", retries: 2 });
});

test("an image error that persists ends as an infra error after maxInfraRetries", async () => {
  const runtime = new FlakyRuntime(local, 99, () => new ImageError("no such image", "x"), "resolveImage");
  const summary = await runWith(runtime, "bad-image", new ManualClock()).done;
  expect(summary).toMatchObject({ trials: { errored: 1 }, errorsByKind: { infra: 1 } });
  expect(runtime.calls).toBe(3);
  const [result] = await readResultsFile(join(root.path, "runs", "bad-image"));
  expect(result).toMatchObject({ status: "error", retries: 2, error: { kind: "infra", message: "no such image" } });
});

test("other errors are not retried", async () => {
  const runtime = new FlakyRuntime(local, 1, () => new Error("bug"), "create");
  const summary = await runWith(runtime, "not-retried", new ManualClock()).done;
  expect(summary.errorsByKind).toEqual({ infra: 1 });
  expect(runtime.calls).toBe(1);
});
