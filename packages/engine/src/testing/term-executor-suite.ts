/**
 * The term-executor regression suite, run on each runtime (term-executor.local.test.ts,
 * term-executor.docker.test.ts). Used by the engine's tests only.
 */
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import type { SandboxRuntime } from "@proctor/sandbox";
import type { AgentSpec, TaskSpec, TrialResult } from "@proctor/schema";
import { loadTermExecutorArchive } from "@proctor/tasks";
import { afterAll, beforeAll, expect, test } from "vitest";
import { startRun, type RunOptions } from "../run";
import { byTask, readResultsFile, tempDir } from "./fixtures";
import { CORRECT_AGENT, PLANTING_AGENT, writeTermExecutorArchive } from "./term-executor";

const SOLVABLE = ["from-checks", "from-f2p", "repo-relative", "py-same-size"];
/** A Docker run of several trials can take a while on a loaded machine. */
const TIMEOUT_MS = 240_000;

export function termExecutorSuite(name: string, runtime: () => SandboxRuntime, extra: Partial<RunOptions> = {}): void {
  let root: { path: string; cleanup: () => Promise<void> };
  let tasks: TaskSpec[];
  let correctAgent: string;
  let plantingAgent: string;
  let runs = 0;

  beforeAll(async () => {
    root = await tempDir(`proctor-te-${name}-`);
    const fixture = await writeTermExecutorArchive(join(root.path, "correct"), CORRECT_AGENT);
    const loaded = await loadTermExecutorArchive(fixture.root, { cacheDir: join(root.path, "cache") });
    expect(loaded.errors.map((e) => e.message)).toEqual([]);
    tasks = loaded.tasks;
    correctAgent = loaded.agentDir as string;
    const planting = await writeTermExecutorArchive(join(root.path, "planting"), PLANTING_AGENT);
    plantingAgent = (await loadTermExecutorArchive(planting.root, { cacheDir: join(root.path, "cache") })).agentDir as string;
  });
  afterAll(async () => {
    await root?.cleanup();
  });

  async function run(agent: AgentSpec, ids = SOLVABLE): Promise<{ results: Record<string, TrialResult>; runDir: string }> {
    const runId = `te-${name}-${++runs}-${process.pid}`;
    const runDir = join(root.path, "runs", runId);
    const handle = startRun({
      runId,
      runDir,
      runtime: runtime(),
      tasks: tasks.filter((t) => ids.includes(t.id)),
      agent,
      concurrency: 4,
      attempts: 1,
      cacheDir: join(root.path, "repo-cache"),
      ...extra,
    });
    await handle.done;
    return { results: byTask(await readResultsFile(runDir)), runDir };
  }

  test("the agent in agent_code/ passes every check: tests/ files sit in the repo root, scripts run from there", async () => {
    const { results, runDir } = await run({ kind: "code", dir: correctAgent });
    for (const id of SOLVABLE) expect(results[id], id).toMatchObject({ status: "passed", reward: 1, error: null });
    const checks = results["repo-relative"]?.checks ?? [];
    expect(checks.map((c) => [c.name, c.passed, c.exitCode])).toEqual([
      ["checks/structure.sh", true, 0],
      ["run_tests.sh", true, 0],
    ]);
    expect(checks[1]).toMatchObject({ command: 'bash "$PROCTOR_WORKDIR"/run_tests.sh', timedOut: false });
    expect(checks[1]?.output).toContain("2 + 3 = 5 (expected 5)");
    expect(checks[1]?.durationMs).toBeGreaterThanOrEqual(0);
    expect(results["from-checks"]?.checks?.map((c) => [c.name, c.command, c.passed])).toEqual([
      ["check_1.sh", 'set -e\ntest "$(bash src/calc.sh 1 1)" = 2', true],
      ["check_3.sh", "set -e\ntest -f README.md", true],
    ]);
    expect(results["from-f2p"]?.checks?.map((c) => c.name)).toEqual(["fail_to_pass_0.sh", "pass_to_pass_1.sh"]);
    // result.json carries the same per-check detail.
    const trial = JSON.parse(await readFile(join(runDir, "trials", results["repo-relative"]?.trialId as string, "result.json"), "utf8")) as TrialResult;
    expect(trial.checks).toEqual(checks);
  }, TIMEOUT_MS);

  test("the oracle (workspace.yaml patch) passes, nop fails every task", async () => {
    const oracle = await run({ kind: "oracle" });
    for (const id of SOLVABLE) expect(oracle.results[id], id).toMatchObject({ status: "passed", reward: 1 });
    const nop = await run({ kind: "nop" });
    for (const id of SOLVABLE) expect(nop.results[id], id).toMatchObject({ status: "failed", reward: 0, error: null });
    const failing = nop.results["repo-relative"]?.checks?.find((c) => c.name === "run_tests.sh");
    expect(failing).toMatchObject({ passed: false, exitCode: 1 });
    expect(failing?.output).toContain("2 + 3 = -1 (expected 5)");
  }, TIMEOUT_MS);

  test("checks an agent planted at the test files' paths are overwritten after it finishes", async () => {
    const { results } = await run({ kind: "code", dir: plantingAgent }, ["repo-relative"]);
    expect(results["repo-relative"]).toMatchObject({ status: "failed", reward: 0 });
    expect(results["repo-relative"]?.checks?.map((c) => [c.name, c.passed])).toEqual([
      ["checks/structure.sh", true],
      ["run_tests.sh", false],
    ]);
    expect(results["repo-relative"]?.checks?.[1]?.output).toContain("(expected 5)");
  }, TIMEOUT_MS);

  test("a failing install command is a setup error naming the command and its output; install runs before the agent", async () => {
    const { results } = await run({ kind: "code", dir: correctAgent }, ["install-fails"]);
    const result = results["install-fails"];
    expect(result).toMatchObject({ status: "error", error: { kind: "setup" } });
    expect(result?.error?.message).toMatch(/install command "echo cannot install the toolchain >&2; exit 7" exited with 7: cannot install the toolchain/);
    // The agent refuses to work when the install did not run first: here it found no .deps/installed.
    expect(result?.reward).toBe(0);
  }, TIMEOUT_MS);
}
