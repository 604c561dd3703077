import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { DockerRuntime, dockerTestGate } from "@proctor/sandbox-docker";
import type { TaskSpec, TrialResult } from "@proctor/schema";
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { startRun, type RunOptions } from "./run";
import { ATTACK_MODES, ATTACKS, buildAttackTasks, controlsFor, writeAttackAgent, type AttackMode } from "./testing/attacks";
import { byTask, containersOf, readResultsFile, removeRunContainers, tempDir } from "./testing/fixtures";

/**
 * The attacks of testing/attacks.ts, one run per grading mode (every attack task of that mode and
 * an honest control of each task kind, one dispatching code agent): no attack may pass unflagged or
 * end as an infrastructure error, and every control must pass clean.
 */
const IMAGE = "proctor/base:bookworm";
const haveDocker = await dockerTestGate();

/** The run options of each mode. */
const MODE_OPTIONS: Record<AttackMode, Partial<RunOptions>> = {
  fresh: {},
  strict: { isolateVerifier: true },
  shared: { grading: "shared" },
};

/** Not a clean pass: reward 0 (or an agent error saying tampered), or a pass flagged for audit. */
function cleanPassOrWorse(result: TrialResult | undefined): string | null {
  if (!result) return "no result";
  if (result.error?.kind === "infra") return `an infra error: ${result.error.message}`;
  if (result.status === "passed") return result.integrity?.flagged === true ? null : "an unflagged pass";
  return (result.reward ?? 0) === 0 ? null : `reward ${result.reward} without a pass`;
}

/** The last `chars` of a file, or "". */
async function tailOf(path: string, chars = 700): Promise<string> {
  const text = await readFile(path, "utf8").catch(() => "");
  return text.length > chars ? `...${text.slice(-chars)}` : text;
}

/** One trial, for the failure message: its outcome, integrity and the end of its verifier's output. */
async function describeTrial(runDir: string, id: string, result: TrialResult | undefined): Promise<string> {
  if (!result) return `${id}: no result`;
  const integrity = result.integrity;
  const lines = [
    `${id}: status=${result.status} reward=${result.reward} error=${result.error ? `${result.error.kind}: ${result.error.message.slice(0, 300)}` : "none"}`,
    `  integrity: mode=${integrity?.grading?.mode ?? "?"} flagged=${integrity?.flagged} flags=${JSON.stringify(integrity?.flags ?? [])} tampered=${JSON.stringify(integrity?.tampered ?? [])} survivors=${integrity?.survivors.length ?? 0}`,
  ];
  const dir = join(runDir, "trials", result.trialId, "verifier");
  for (const name of ["test-stdout.txt", "test-stderr.txt", "test-output.txt"]) {
    const text = (await tailOf(join(dir, name))).trim();
    if (text) lines.push(`  ${name}: ${text.replace(/\n/g, "\n    ")}`);
  }
  for (const check of result.checks ?? []) lines.push(`  check ${check.name}: exit ${check.exitCode} ${check.output.slice(-300).replace(/\n/g, "\n    ")}`);
  return lines.join("\n");
}

describe.skipIf(!haveDocker)("attacks on grading: a pass must never come from these (each task's honest control passes clean)", () => {
  let root: { path: string; cleanup: () => Promise<void> };
  let runtime: DockerRuntime;
  let tasks: Record<string, TaskSpec>;
  let agentDir: string;
  const runIds: string[] = [];

  beforeAll(async () => {
    root = await tempDir("proctor-attacks-");
    runtime = new DockerRuntime();
    tasks = await buildAttackTasks(join(root.path, "tasks"));
    agentDir = await writeAttackAgent(root.path);
  }, 600_000);

  afterAll(async () => {
    removeRunContainers(runIds);
    await root?.cleanup();
  });

  test.each(ATTACK_MODES)(
    "graded %s: no attack passes unflagged, every control passes clean",
    async (mode) => {
      const attacks = ATTACKS.filter((a) => a.modes.includes(mode)).map((a) => a.name);
      const controls = controlsFor(mode);
      const ids = [...controls, ...attacks];
      const runId = `attacks-${mode}-${process.pid}-${runIds.length}`;
      runIds.push(runId);
      const handle = startRun({
        runId,
        runDir: join(root.path, "runs", runId),
        runtime,
        concurrency: 4,
        attempts: 1,
        defaultImage: IMAGE,
        cacheDir: join(root.path, "cache"),
        tasks: ids.map((id) => {
          const task = tasks[id];
          if (!task) throw new Error(`no task ${id}`);
          return task;
        }),
        agent: { kind: "code", dir: agentDir },
        ...MODE_OPTIONS[mode],
      });
      await handle.done;
      expect(containersOf(runId)).toEqual([]);
      const results = byTask(await readResultsFile(handle.runDir));

      const problems: string[] = [];
      for (const attack of ATTACKS.filter((a) => a.modes.includes(mode))) {
        const why = cleanPassOrWorse(results[attack.name]);
        if (why) problems.push(`${attack.name} (class ${attack.cls}): ${why}`);
      }
      for (const id of controls) {
        const r = results[id];
        if (!(r?.status === "passed" && r.reward === 1 && r.error === null && r.integrity?.flagged === false)) problems.push(`${id} (control): no clean pass`);
      }
      const report = problems.length === 0 ? "" : (await Promise.all(ids.map((id) => describeTrial(handle.runDir, id, results[id])))).join("\n");
      expect(problems, `graded ${mode}:\n${report}`).toEqual([]);
    },
    1_800_000,
  );
});
