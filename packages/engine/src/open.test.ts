import { mkdir, readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import type { Agent, AgentContext, AgentRunResult } from "@proctor/agents";
import { LocalRuntime, type ImageRequest, type Sandbox, type SandboxCreateOptions, type SandboxRuntime } from "@proctor/sandbox";
import { loadTasks } from "@proctor/tasks";
import { afterAll, beforeAll, expect, test } from "vitest";
import { startRun } from "./run";
import { ADVERSARIAL_TASKS, readResultsFile, tempDir, writeTasks } from "./testing/fixtures";

let root: { path: string; cleanup: () => Promise<void> };
beforeAll(async () => {
  root = await tempDir("proctor-engine-open-");
});
afterAll(async () => {
  await root.cleanup();
});

/** A library user's own agent: solves needs-work through the sandbox API and reports usage. */
class TouchAgent implements Agent {
  readonly name = "touch-agent";
  runs = 0;
  async run(ctx: AgentContext): Promise<AgentRunResult> {
    this.runs++;
    const result = await ctx.sandbox.exec({ shell: 'touch "${PROCTOR_WORKDIR:-/app}/solved"' }, { signal: ctx.signal });
    return { exitCode: result.exitCode, timedOut: false, aborted: false, durationMs: result.durationMs, outputTruncated: false, model: "scripted", usage: { inputTokens: 3, outputTokens: 2, requests: 1, retries: 0 } };
  }
}

/** A library user's own runtime (here wrapping the local one under another name). */
class CountingRuntime implements SandboxRuntime {
  readonly name = "counting";
  created = 0;
  constructor(private readonly inner: SandboxRuntime) {}
  get capabilities() {
    return this.inner.capabilities;
  }
  resolveImage(request: ImageRequest): Promise<string> {
    return this.inner.resolveImage(request);
  }
  create(options: SandboxCreateOptions): Promise<Sandbox> {
    this.created++;
    return this.inner.create(options);
  }
  reap(): Promise<number> {
    return this.inner.reap();
  }
}

test("the engine runs an Agent object and a SandboxRuntime object a library user defined", async () => {
  const loaded = await loadTasks([await writeTasks(join(root.path, "tasks"), { "needs-work": ADVERSARIAL_TASKS["needs-work"]! })]);
  const agent = new TouchAgent();
  const runtime = new CountingRuntime(new LocalRuntime({ rootDir: join(root.path, "sandboxes") }));
  const handle = startRun({ runId: "open", runDir: join(root.path, "runs", "open"), tasks: loaded.tasks, agent, runtime, concurrency: 1, attempts: 2 });
  const summary = await handle.done;
  expect(summary.trials).toMatchObject({ total: 2, passed: 2 });
  expect(agent.runs).toBe(2);
  // Each trial: the agent's sandbox, then a fresh one for its grading.
  expect(runtime.created).toBe(4);
  const [result] = await readResultsFile(handle.runDir);
  expect(result?.agent).toMatchObject({ name: "touch-agent", model: "scripted", usage: { inputTokens: 3, outputTokens: 2, requests: 1, retries: 0 } });
  const config = JSON.parse(await readFile(join(handle.runDir, "run.json"), "utf8"));
  expect(config).toMatchObject({ agent: { kind: "custom", name: "touch-agent" }, runtime: "counting" });
});

/**
 * A runtime whose sandboxes can list processes and count OOM kills, where (as on Docker) the OOM
 * count is itself an exec: while it runs, a listing sees it (here as runc's init process).
 */
class ListingRuntime extends CountingRuntime {
  override get capabilities() {
    return { ...super.capabilities, processes: true };
  }
  override async create(options: SandboxCreateOptions): Promise<Sandbox> {
    const inner = await super.create(options);
    let execInFlight = false;
    const extra: Partial<Sandbox> = {
      capabilities: { ...inner.capabilities, processes: true },
      async outOfMemoryKills() {
        execInFlight = true;
        await new Promise((resolve) => setTimeout(resolve, 20));
        execInFlight = false;
        return 0;
      },
      async processes() {
        return execInFlight ? [{ pid: 4242, ppid: 0, command: "[runc:[2:INIT]]", ports: [] }] : [];
      },
    };
    return new Proxy(inner, {
      get(target, key) {
        if (key in extra) return extra[key as keyof Sandbox];
        const value = Reflect.get(target, key, target) as unknown;
        return typeof value === "function" ? value.bind(target) : value;
      },
    });
  }
}

test("the runtime's own OOM check is over before the agent's leftover processes are listed (no false survivor)", async () => {
  const loaded = await loadTasks([await writeTasks(join(root.path, "tasks-listing"), { "needs-work": ADVERSARIAL_TASKS["needs-work"]! })]);
  const runtime = new ListingRuntime(new LocalRuntime({ rootDir: join(root.path, "sandboxes-listing") }));
  const handle = startRun({ runId: "listing", runDir: join(root.path, "runs", "listing"), tasks: loaded.tasks, agent: new TouchAgent(), runtime, concurrency: 1, attempts: 1 });
  const summary = await handle.done;
  expect(summary.trials).toMatchObject({ total: 1, passed: 1 });
  const [result] = await readResultsFile(handle.runDir);
  // No survivor: the agent's sandbox is halted and the grader's has nothing of the agent running.
  expect(result?.integrity).toMatchObject({ isolation: "isolated", survivors: [], flagged: false });
});

/**
 * A runtime whose sandboxes vouch for their tools (as Docker's read-only busybox does): the
 * verifier's launcher then empties the verifier's directories and unpacks the tests itself, from
 * a tar on its stdin. `failing` names host tools that fail in every exec (a broken toolchain).
 */
class TrustingRuntime extends CountingRuntime {
  constructor(inner: SandboxRuntime, private readonly stubs: string | null) {
    super(inner);
  }
  override async create(options: SandboxCreateOptions): Promise<Sandbox> {
    const inner = await super.create(options);
    const stubs = this.stubs;
    const extra: Partial<Sandbox> = {
      capabilities: { ...inner.capabilities, trustedTools: true },
      exec: (command, execOptions = {}) =>
        inner.exec(command, stubs === null ? execOptions : { ...execOptions, env: { ...execOptions.env, PATH: `${stubs}:${process.env.PATH ?? "/usr/bin:/bin"}` } }),
    };
    return new Proxy(inner, {
      get(target, key) {
        if (key in extra) return extra[key as keyof Sandbox];
        const value = Reflect.get(target, key, target) as unknown;
        return typeof value === "function" ? value.bind(target) : value;
      },
    });
  }
}

/** Plants a passing reward and a test script that always passes, without doing the work. */
class PlantingAgent implements Agent {
  readonly name = "planting-agent";
  async run(ctx: AgentContext): Promise<AgentRunResult> {
    const result = await ctx.sandbox.exec(
      { shell: 'mkdir -p "$PROCTOR_TESTS_DIR" "$PROCTOR_VERIFIER_LOGS_DIR" && echo 1 > "$PROCTOR_VERIFIER_LOGS_DIR/reward.txt" && printf "#!/bin/sh\\necho 1 > $PROCTOR_VERIFIER_LOGS_DIR/reward.txt\\n" > "$PROCTOR_TESTS_DIR/test.sh"' },
      { signal: ctx.signal },
    );
    return { exitCode: result.exitCode, timedOut: false, aborted: false, durationMs: result.durationMs, outputTruncated: false };
  }
}

test("with trusted tools the launcher empties /logs/verifier and /tests and unpacks the tests itself: planting gains nothing, honest work passes", async () => {
  const loaded = await loadTasks([await writeTasks(join(root.path, "tasks-trusting"), { "needs-work": ADVERSARIAL_TASKS["needs-work"]! })]);
  const runtime = new TrustingRuntime(new LocalRuntime({ rootDir: join(root.path, "sandboxes-trusting") }), null);
  const planted = startRun({ runId: "trusting-planted", runDir: join(root.path, "runs", "trusting-planted"), tasks: loaded.tasks, agent: new PlantingAgent(), runtime, concurrency: 1, attempts: 1 });
  expect((await planted.done).trials).toMatchObject({ total: 1, passed: 0, failed: 1 });
  const [cheated] = await readResultsFile(planted.runDir);
  expect(cheated).toMatchObject({ status: "failed", reward: 0, error: null });
  const honest = startRun({ runId: "trusting-honest", runDir: join(root.path, "runs", "trusting-honest"), tasks: loaded.tasks, agent: new TouchAgent(), runtime, concurrency: 1, attempts: 1 });
  expect((await honest.done).trials).toMatchObject({ total: 1, passed: 1 });
});

test.each([
  ["rm", /^removing \/app in the grader's sandbox failed \(exit 1\): broken$/],
  ["tar", /could not unpack \S+ into \/tests before verifying \(exit 98\): broken\nproctor: unpacking the tests into /],
])("a launcher whose %s fails ends the trial as a verifier error that says so, with no reward", async (tool, expected) => {
  const stubs = join(root.path, `stubs-${tool}`);
  await mkdir(stubs, { recursive: true });
  await writeFile(join(stubs, tool), "#!/bin/sh\necho broken >&2\nexit 1\n", { mode: 0o755 });
  const loaded = await loadTasks([await writeTasks(join(root.path, `tasks-broken-${tool}`), { "needs-work": ADVERSARIAL_TASKS["needs-work"]! })]);
  const runtime = new TrustingRuntime(new LocalRuntime({ rootDir: join(root.path, `sandboxes-broken-${tool}`) }), stubs);
  const handle = startRun({ runId: `broken-${tool}`, runDir: join(root.path, "runs", `broken-${tool}`), tasks: loaded.tasks, agent: new TouchAgent(), runtime, concurrency: 1, attempts: 1 });
  expect((await handle.done).trials).toMatchObject({ total: 1, passed: 0, errored: 1 });
  const [result] = await readResultsFile(handle.runDir);
  expect(result).toMatchObject({ status: "error", reward: null, error: { kind: "verifier" } });
  expect(result?.error?.message).toMatch(expected);
});
