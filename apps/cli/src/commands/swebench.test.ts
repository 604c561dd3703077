import { cp, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { buildSweCalc } from "@proctor/engine/testing";
import { dockerTestGate } from "@proctor/sandbox-docker";
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { proctor } from "../test-support";

const docker = await dockerTestGate();

/**
 * The calc project's mirror and four SWE-bench rows on it: two valid, one whose gold patch fixes
 * the wrong function (the oracle does not resolve), one whose FAIL_TO_PASS test already passes at
 * base_commit (nop resolves).
 */
async function buildDataset(root: string): Promise<{ dataset: string; mirrors: string }> {
  const calc = await buildSweCalc(root);
  const { fixMul, fixNeg, testMul, testNeg } = calc.patches;
  const dataset = await calc.writeDataset([
    { id: "ok-mul", patch: fixMul, testPatch: testMul, failToPass: ["tests/test_ops.py::test_mul"], passToPass: ["tests/test_ops.py::test_add"] },
    { id: "ok-neg", patch: fixNeg, testPatch: testNeg, failToPass: ["tests/test_ops.py::test_neg"], passToPass: ["tests/test_ops.py::test_add"] },
    // The gold patch fixes neg, but the instance's test is test_mul.
    { id: "bad-gold", patch: fixNeg, testPatch: testMul, failToPass: ["tests/test_ops.py::test_mul"], passToPass: ["tests/test_ops.py::test_add"] },
    // test_add passes before any fix: nop resolves it.
    { id: "bad-f2p", patch: fixMul, testPatch: testMul, failToPass: ["tests/test_ops.py::test_add"], passToPass: [] },
  ]);
  return { dataset, mirrors: calc.mirrors };
}

describe.skipIf(!docker)("proctor tasks validate on SWE-bench rows (real Docker, real git, real pytest)", () => {
  let root: string;
  let fixture: { dataset: string; mirrors: string };
  beforeAll(async () => {
    root = await mkdtemp(join(tmpdir(), "proctor-validate-test-"));
    fixture = await buildDataset(root);
  });
  afterAll(async () => {
    await rm(root, { recursive: true, force: true });
  });

  test("names every broken instance with its failing tests, exit 1; the valid ones pass", async () => {
    const r = await proctor(["tasks", "validate", fixture.dataset, "--repos-dir", fixture.mirrors, "--runtime", "docker", "-n", "4"]);
    expect(r.code, r.stderr).toBe(1);
    expect(r.stdout).toContain("2 of 4 task(s) are broken:");
    const block = (id: string) => {
      const lines = r.stdout.split("\n");
      const at = lines.indexOf(`  ${id}`);
      if (at < 0) return null;
      const end = lines.findIndex((l, i) => i > at && !l.startsWith("    "));
      return lines.slice(at + 1, end < 0 ? undefined : end).join("\n");
    };
    expect(block("bad-gold")).toBe("    oracle does not resolve: FAIL_TO_PASS failing: tests/test_ops.py::test_mul (FAILED)");
    expect(block("bad-f2p")).toBe("    nop resolves: FAIL_TO_PASS already passing without a fix: tests/test_ops.py::test_add");
    expect(block("ok-mul")).toBeNull();
    expect(block("ok-neg")).toBeNull();
    // Progress of both passes.
    expect(r.stderr).toContain("validate: oracle on 4 task(s)");
    expect(r.stderr).toContain("validate: nop on 4 task(s)");
    expect(r.stderr).toMatch(/\[4\/4\]/);
  });

  test("the valid instances alone: exit 0", async () => {
    const r = await proctor(["tasks", "validate", fixture.dataset, "--repos-dir", fixture.mirrors, "--runtime", "docker", "-n", "4", "-i", "ok-*"]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toContain("all 2 task(s) valid");
  });

  test("a missing mirror is a load error naming its path, exit 2, before any trial", async () => {
    const r = await proctor(["tasks", "validate", fixture.dataset, "--repos-dir", join(root, "nowhere"), "--runtime", "docker"]);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/--repos-dir has no mirror .*nowhere\/acme__calc\.git/);
    expect(r.stderr).not.toContain("validate: oracle");
  });
});

describe.skipIf(!docker)("proctor run on SWE-bench rows: --repos-dir / --image / --env-setup in run.json", () => {
  let root: string;
  let fixture: { dataset: string; mirrors: string };
  beforeAll(async () => {
    root = await mkdtemp(join(tmpdir(), "proctor-swe-resume-test-"));
    fixture = await buildDataset(root);
  });
  afterAll(async () => {
    await rm(root, { recursive: true, force: true });
  });

  test("run.json keeps the flags; --resume reuses them; a changed one is refused, naming it", async () => {
    const setup = join(root, "env.yaml");
    await writeFile(setup, 'acme/calc:\n  "*":\n    install: "true"\n');
    const runs = join(root, "runs");
    const first = await proctor(["run", fixture.dataset, "-i", "ok-mul", "--repos-dir", fixture.mirrors, "--env-setup", setup, "--agent", "oracle", "--runtime", "docker", "-o", runs, "--run-id", "r1"]);
    expect(first.code, first.stderr).toBe(0);
    const runDir = join(runs, "r1");
    const config = JSON.parse(await readFile(join(runDir, "run.json"), "utf8")) as { dataset?: unknown };
    expect(config.dataset).toEqual({ reposDir: fixture.mirrors, envSetup: setup });
    // No flags: the stored ones load the same tasks, so nothing changed and nothing reruns.
    const resumed = await proctor(["run", "--resume", runDir, "-i", "ok-mul", "--runtime", "docker"]);
    expect(resumed.code, resumed.stderr).toBe(0);
    expect((await readFile(join(runDir, "results.jsonl"), "utf8")).trim().split("\n")).toHaveLength(1);
    // Another mirrors dir (same content): refused, naming the field.
    const other = join(root, "mirrors-copy");
    await cp(fixture.mirrors, other, { recursive: true });
    const changed = await proctor(["run", "--resume", runDir, "-i", "ok-mul", "--repos-dir", other, "--runtime", "docker"]);
    expect(changed.code).not.toBe(0);
    expect(changed.stderr).toContain("the run configuration changed");
    expect(changed.stderr).toMatch(/dataset: .*mirrors-copy/);
  });
});

describe.skipIf(!docker)("a gold patch that applies nowhere is the task's fault; a fuzzy one applies without `patch` in the image", () => {
  let root: string;
  let fixture: { dataset: string; mirrors: string; envSetup: string };
  beforeAll(async () => {
    root = await mkdtemp(join(tmpdir(), "proctor-swe-gold-test-"));
    const calc = await buildSweCalc(root);
    // Made against a version of ops.py whose first line differed: git apply refuses it, patch --fuzz takes it.
    const fuzzy = calc.patches.fixMul.replace(" def add(a, b):", " def add(x, y):");
    const misfit = "diff --git a/calc/ops.py b/calc/ops.py\n--- a/calc/ops.py\n+++ b/calc/ops.py\n@@ -40,3 +40,4 @@\n-nothing like this\n-is in the file\n+at all\n+really\n+here\n context\n";
    const dataset = await calc.writeDataset(
      [
        { id: "gold-fuzzy", patch: fuzzy, testPatch: calc.patches.testMul, failToPass: ["tests/test_ops.py::test_mul"], passToPass: ["tests/test_ops.py::test_add"] },
        { id: "gold-misfit", patch: misfit, testPatch: calc.patches.testMul, failToPass: ["tests/test_ops.py::test_mul"], passToPass: ["tests/test_ops.py::test_add"] },
      ],
      "gold.jsonl",
    );
    // The image has no `patch` at all (the build fails if it still has one).
    const envSetup = join(root, "no-patch.yaml");
    await writeFile(envSetup, 'acme/calc:\n  "*":\n    image_setup:\n      - "rm -f /usr/bin/patch"\n      - "! command -v patch"\n');
    fixture = { dataset, mirrors: calc.mirrors, envSetup };
  });
  afterAll(async () => {
    await rm(root, { recursive: true, force: true });
  });

  test("proctor run --agent oracle: the misfit is a setup error (errorsByKind, swebench error_ids), the fuzzy one resolves", async () => {
    const runs = join(root, "runs");
    const r = await proctor(["run", fixture.dataset, "--repos-dir", fixture.mirrors, "--env-setup", fixture.envSetup, "--agent", "oracle", "--runtime", "docker", "-o", runs, "--run-id", "gold", "--json"]);
    expect(r.code, r.stderr).toBe(0);
    const runDir = join(runs, "gold");
    const results = (await readFile(join(runDir, "results.jsonl"), "utf8")).trim().split("\n").map((l) => JSON.parse(l) as { taskId: string; status: string; error: { kind: string; message: string } | null });
    const byId = Object.fromEntries(results.map((x) => [x.taskId, x]));
    expect(byId["gold-fuzzy"]).toMatchObject({ status: "passed", error: null });
    expect(byId["gold-misfit"]).toMatchObject({ status: "error", error: { kind: "setup" } });
    expect(byId["gold-misfit"]?.error?.message).toMatch(/^the task's gold patch does not apply: calc\/ops\.py: hunk #1 \(@@ -40,3 \+40,4 @@\) fits nowhere/);
    const summary = JSON.parse(await readFile(join(runDir, "summary.json"), "utf8")) as { errorsByKind: Record<string, number> };
    expect(summary.errorsByKind).toEqual({ setup: 1 });
    const report = await proctor(["report", runDir, "--format", "swebench"]);
    expect(report.code, report.stderr).toBe(0);
    expect(JSON.parse(report.stdout)).toMatchObject({ resolved_ids: ["gold-fuzzy"], error_ids: ["gold-misfit"], unresolved_ids: [] });
  });

  test("proctor tasks validate names the row whose gold patch does not apply", async () => {
    const r = await proctor(["tasks", "validate", fixture.dataset, "--repos-dir", fixture.mirrors, "--env-setup", fixture.envSetup, "--runtime", "docker", "-n", "2"]);
    expect(r.code, r.stderr).toBe(1);
    expect(r.stdout).toContain("1 of 2 task(s) are broken:");
    expect(r.stdout).toMatch(/ {2}gold-misfit\n {4}oracle error \(setup: the task's gold patch does not apply: calc\/ops\.py: hunk #1/);
    expect(r.stdout).not.toContain("gold-fuzzy");
  });
});
