import { mkdir, readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { DockerRuntime, dockerTestGate } from "@proctor/sandbox-docker";
import type { TaskSpec, TrialResult } from "@proctor/schema";
import { loadTasks } from "@proctor/tasks";
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { startRun, type RunOptions } from "./run";
import { byTask, containersOf, readResultsFile, removeRunContainers, tempDir } from "./testing/fixtures";
import { HONEST_TASKS, SWE_ENV_SETUP, SWE_SAME_SIZE_ROWS, sameSizeSweRows, writeHonestTasks } from "./testing/honest-tasks";
import { buildSweCalc } from "./testing/swe-calc";

/**
 * The honest-task regression set (testing/honest-tasks.ts) run with the oracle: every task's
 * reference solution must pass clean (reward 1, no error, nothing tampered, not flagged) in each
 * of three runs: as each task is graded by default, with --isolate-verifier (the tasks that need
 * a live service excepted), and the tasks graded fresh by default once more with --grading
 * shared. A red run lists each trial that did not pass clean with its error, integrity and the
 * tail of its verifier output. The SWE rows' same-size fixes race the install's bytecode within
 * one second, so a grader that trusts stale bytecode fails them often, not always.
 */
const IMAGE = "proctor/base:bookworm";
const haveDocker = await dockerTestGate();

/** Tasks whose tests need the service the solution left running (stopped by design with --isolate-verifier). */
const SERVICE_TASKS = Object.keys(HONEST_TASKS).filter((id) => HONEST_TASKS[id]?.service);
/** Tasks graded fresh by default (their tests name nothing outside /app; none runs apt-get), to grade once more in the agent's own sandbox. */
const SHARED_TOO = [...Object.keys(HONEST_TASKS).filter((id) => !HONEST_TASKS[id]?.shared), ...SWE_SAME_SIZE_ROWS.map((r) => r.id)];

/** The last `lines` lines of a file of the run, or a note that it is absent. */
async function tailOf(path: string, lines: number): Promise<string> {
  const text = await readFile(path, "utf8").catch(() => null);
  if (text === null) return "(absent)";
  return text.trimEnd().split("\n").slice(-lines).join("\n");
}

/** Why `result` is not a clean pass (its error, integrity and the verifier's output), or null when it is one. */
async function notClean(runDir: string, id: string, result: TrialResult | undefined): Promise<string | null> {
  if (!result) return `${id}: no result`;
  const integrity = result.integrity;
  const clean = result.status === "passed" && result.reward === 1 && result.error === null && integrity?.tampered.length === 0 && integrity.flagged === false;
  if (clean) return null;
  const trial = join(runDir, "trials", result.trialId);
  return [
    `${id}: status ${result.status}, reward ${String(result.reward)}, graded ${integrity?.grading?.mode ?? "?"} (${integrity?.grading?.why ?? "?"})`,
    `  error: ${result.error ? `${result.error.kind}: ${result.error.message}` : "null"}`,
    `  tampered: ${JSON.stringify(integrity?.tampered ?? null)}`,
    `  flagged: ${String(integrity?.flagged)} ${JSON.stringify(integrity?.flags ?? [])}`,
    `  note: ${integrity?.note ?? "null"}`,
    ...(result.grading ? [`  FAIL_TO_PASS failed: ${JSON.stringify(result.grading.failToPass.failure)}, PASS_TO_PASS failed: ${JSON.stringify(result.grading.passToPass.failure)}`] : []),
    "  --- verifier stdout (tail) ---",
    await tailOf(join(trial, "verifier", result.grading ? "test-output.txt" : "test-stdout.txt"), 40),
    "  --- verifier stderr (tail) ---",
    await tailOf(join(trial, "verifier", "test-stderr.txt"), 15),
  ].join("\n");
}

describe.skipIf(!haveDocker)("honest tasks shaped like Terminal-Bench 2 / SWE-bench pass clean with their reference solutions", () => {
  let root: { path: string; cleanup: () => Promise<void> };
  let runtime: DockerRuntime;
  let tasks: Record<string, TaskSpec>;
  const runIds: string[] = [];

  /** Runs the oracle on `ids`; returns a description of every trial that is not a clean pass. */
  async function oracle(name: string, ids: string[], options: Partial<RunOptions> = {}): Promise<string[]> {
    const runId = `honest-${name}-${process.pid}`;
    runIds.push(runId);
    const handle = startRun({
      runId,
      runDir: join(root.path, "runs", runId),
      runtime,
      tasks: ids.map((id) => tasks[id] as TaskSpec),
      agent: { kind: "oracle" },
      concurrency: 4,
      attempts: 1,
      defaultImage: IMAGE,
      cacheDir: join(root.path, "cache"),
      ...options,
    });
    await handle.done;
    expect(containersOf(runId)).toEqual([]);
    const results = byTask(await readResultsFile(handle.runDir));
    const problems: string[] = [];
    for (const id of ids) {
      const problem = await notClean(handle.runDir, id, results[id]);
      if (problem) problems.push(problem);
    }
    return problems;
  }

  beforeAll(async () => {
    root = await tempDir("proctor-honest-");
    runtime = new DockerRuntime();
    const loaded = await loadTasks([await writeHonestTasks(join(root.path, "tasks"))]);
    expect(loaded.errors).toEqual([]);
    tasks = Object.fromEntries(loaded.tasks.map((t) => [t.id, t]));
    const swe = await buildSweCalc(join(root.path, "swe"));
    const scratch = join(root.path, "swe-scratch");
    await mkdir(scratch, { recursive: true });
    const dataset = await swe.writeDataset(sameSizeSweRows(swe, scratch));
    const envSetup = join(root.path, "env-setup.json");
    await writeFile(envSetup, SWE_ENV_SETUP);
    const rows = await loadTasks([dataset], { reposDir: swe.mirrors, cacheDir: join(root.path, "task-cache"), envSetup });
    expect(rows.errors).toEqual([]);
    for (const row of rows.tasks) tasks[row.id] = row;
  }, 120_000);

  afterAll(async () => {
    removeRunContainers(runIds);
    await root?.cleanup();
  });

  test("every task, graded as it asks (fresh by default, shared where its tests read the system)", async () => {
    expect(await oracle("default", Object.keys(tasks))).toEqual([]);
  }, 600_000);

  test("with --isolate-verifier (the tasks whose tests need a live service excepted)", async () => {
    expect(await oracle("strict", Object.keys(tasks).filter((id) => !SERVICE_TASKS.includes(id)), { isolateVerifier: true })).toEqual([]);
  }, 600_000);

  test("the tasks graded fresh by default, graded in the agent's own sandbox (--grading shared), audited", async () => {
    expect(await oracle("shared", SHARED_TOO, { grading: "shared" })).toEqual([]);
  }, 600_000);
});
