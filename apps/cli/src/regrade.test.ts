import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { existsSync } from "node:fs";
import { cp, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { dockerTestGate } from "@proctor/sandbox-docker";
import { proctor, repoRoot } from "./test-support";

// Results anyone can grade again: every run records its pins, keeps its agent's outputs, and
// `proctor regrade` grades them against a fixed task version without the agent.

const docker = await dockerTestGate();
const example = join(repoRoot, "examples/tasks/greeting-file");
let out: string;

beforeAll(async () => {
  out = await mkdtemp(join(tmpdir(), "proctor-regrade-"));
});
afterAll(async () => {
  await rm(out, { recursive: true, force: true });
});

const json = async (path: string) => JSON.parse(await readFile(path, "utf8"));

describe.skipIf(!docker)("regrading a run against a fixed task (Docker)", () => {
  test("v1's test is wrong, so the oracle fails; regraded against v2 from its kept outputs it passes, no agent runs, and both runs carry their pins", async () => {
    // v1: the test wants the greeting without its "!" (a bug); v2 is the fixed task.
    const v1 = join(out, "tasks-v1");
    const v2 = join(out, "tasks-v2");
    await cp(example, join(v1, "greeting"), { recursive: true });
    await cp(example, join(v2, "greeting"), { recursive: true });
    const test1 = join(v1, "greeting/tests/test.sh");
    await writeFile(test1, (await readFile(test1, "utf8")).replace('= "Hello, Proctor!" ]', '= "Hello, Proctor" ]'));
    // A task graded in the agent's own sandbox: nothing is taken out of it, so nothing is kept.
    await cp(example, join(v1, "shared-one"), { recursive: true });
    await writeFile(join(v1, "shared-one/task.toml"), `${await readFile(join(v1, "shared-one/task.toml"), "utf8")}grading = "shared"\n`);

    const run = await proctor(["run", v1, "-a", "oracle", "--runtime", "docker", "-o", out, "--run-id", "v1", "--json"]);
    expect(run.code, run.stderr).toBe(0);
    const before = JSON.parse(run.stdout);
    expect(before.trials).toMatchObject({ total: 2, passed: 1, failed: 1 });
    const runDir = join(out, "v1");
    const kept = await json(join(runDir, "trials/greeting__1/result.json"));
    expect(kept.status).toBe("failed");
    expect(kept.outputs).toMatchObject({ kept: true, file: "outputs.tar.gz", layout: "paths", paths: ["/app"] });
    expect(existsSync(join(runDir, "trials/greeting__1/outputs.tar.gz"))).toBe(true);
    expect(kept.environment.imageId).toMatch(/^sha256:[0-9a-f]{64}$/);
    // Pins: Proctor's version, the agent, each task's digest and image id; run.json has them from the start.
    const config = await json(join(runDir, "run.json"));
    expect(config.pins).toMatchObject({ agent: { name: "oracle", version: null, hash: null }, model: null });
    expect(config.pins.proctor).toMatch(/^\d+\.\d+\.\d+/);
    const digest1 = config.tasks.find((t: { id: string }) => t.id === "greeting").hash;
    expect(before.pins.tasks.greeting).toMatchObject({ digest: digest1, image: kept.environment.image, imageId: kept.environment.imageId });

    // Clear one-line errors: not a run directory, a task the new source lacks.
    const notRun = await proctor(["regrade", v1]);
    expect(notRun.code).toBe(2);
    expect(notRun.stderr).toMatch(/regrade .*tasks-v1: not a run directory/);
    const lacking = await proctor(["regrade", runDir, "--tasks", join(example, "..", "fizzbuzz-python"), "-o", out]);
    expect(lacking.code).toBe(2);
    expect(lacking.stderr).toContain("task(s) of run v1 are not in");
    expect(lacking.stderr).toContain("greeting");

    const regrade = await proctor(["regrade", runDir, "--tasks", v2, "-o", out, "--run-id", "v1-fixed"]);
    expect(regrade.code, regrade.stderr).toBe(0);
    // The trial without kept outputs is counted and named, not dropped in silence.
    expect(regrade.stderr).toContain("1 trial(s) of v1 kept no outputs and are not regraded: shared-one__1 (graded in the agent's own sandbox");
    expect(regrade.stdout).toContain("regrade of v1: 1 verdict(s) changed: greeting__1 failed -> passed");
    expect(regrade.stdout).toMatch(/pins differ: task greeting content \([0-9a-f]{12} vs [0-9a-f]{12}\)/);
    const fixedDir = join(out, "v1-fixed");
    const fixedConfig = await json(join(fixedDir, "run.json"));
    const fixed = await json(join(fixedDir, "summary.json"));
    expect(fixedConfig.regradeOf).toBe("v1");
    expect(fixed.regradeOf).toBe("v1");
    expect(fixedConfig.agent).toEqual(config.agent);
    expect(fixed.trials).toMatchObject({ planned: 1, total: 1, passed: 1 });
    expect(fixed.pins.tasks.greeting.digest).not.toBe(digest1);
    expect(fixed.pins.tasks.greeting.imageId).toBe(kept.environment.imageId);
    // No agent ran: the outputs were put back (phase "restore") and graded.
    const events = (await readFile(join(fixedDir, "events.jsonl"), "utf8")).trim().split("\n").map((l) => JSON.parse(l));
    const phases = new Set(events.filter((e) => e.type === "trial_phase").map((e) => e.data.phase));
    expect(phases.has("restore")).toBe(true);
    expect(phases.has("agent")).toBe(false);
    expect(phases.has("agent_setup")).toBe(false);
    const regraded = await json(join(fixedDir, "trials/greeting__1/result.json"));
    expect(regraded).toMatchObject({ status: "passed", agent: null });

    // proctor report A B warns first thing that the two runs ran different task versions.
    const report = await proctor(["report", runDir, fixedDir]);
    expect(report.code, report.stderr).toBe(0);
    expect(report.stdout).toMatch(/warning: pins differ: task greeting content \(/);
  });
});
