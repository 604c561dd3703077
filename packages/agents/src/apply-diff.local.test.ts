import { execFileSync } from "node:child_process";
import { mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { LocalRuntime, type Sandbox } from "@proctor/sandbox";
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, test } from "vitest";
import { createAgent } from "./create";
import { patchesAgent } from "./patches";
import { testContext, testTask } from "./test-support";

let root: string;
let runtime: LocalRuntime;
let sandbox: Sandbox;
let logDir: string;

/** The file in the workdir at "base": the gold patch below was made against an older version of it. */
const OPS = ["def add(a, b):", "    return a + b", "", "", "# helpers moved here in a later release", "def mul(a, b):", "    return a + b  # bug", "", "", "def neg(a):", "    return a", ""].join("\n");
/** Made when mul's neighbour had another comment: git apply refuses it (context differs), patch --fuzz takes it. */
const FUZZY_GOLD = [
  "--- a/calc/ops.py",
  "+++ b/calc/ops.py",
  "@@ -3,7 +3,7 @@",
  " ",
  " ",
  " # helpers",
  " def mul(a, b):",
  "-    return a + b  # bug",
  "+    return a * b",
  " ",
  " ",
  "",
].join("\n");
const FITS_NOWHERE = ["--- a/calc/ops.py", "+++ b/calc/ops.py", "@@ -40,3 +40,3 @@", "-nothing like this", "-is in the file", "+at all", "+really", " context", ""].join("\n");

/** A task whose solution is a gold patch (as SWE-bench rows load). */
async function goldTask(patch: string) {
  const dir = await mkdtemp(join(root, "gold-"));
  await writeFile(join(dir, "gold.patch"), patch);
  return testTask({ format: "swebench", solution: { dir, command: "false", patch: "gold.patch" } });
}

beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), "proctor-apply-diff-"));
  await mkdir(join(root, "sandboxes"));
  runtime = new LocalRuntime({ rootDir: join(root, "sandboxes") });
});
afterAll(() => rm(root, { recursive: true, force: true }));
beforeEach(async () => {
  sandbox = await runtime.create({ image: "local" });
  logDir = await mkdtemp(join(root, "logs-"));
  await sandbox.writeFile(`${sandbox.workdir}/calc/ops.py`, OPS, { mode: 0o755 });
});
afterEach(() => sandbox.kill());

describe("oracle with a gold patch", () => {
  test("a patch git apply refuses is fitted on the host with fuzz (no `patch` needed); the file keeps its mode", async () => {
    const ctx = testContext(sandbox, await goldTask(FUZZY_GOLD), logDir);
    const agent = createAgent({ kind: "oracle" });
    await agent.setup?.(ctx);
    const result = await agent.run(ctx);
    expect(result).toMatchObject({ exitCode: 0, timedOut: false });
    expect(result.error).toBeUndefined();
    const after = (await sandbox.readFile(`${sandbox.workdir}/calc/ops.py`))?.toString();
    expect(after).toBe(OPS.replace("return a + b  # bug", "return a * b"));
    const mode = execFileSync("sh", ["-c", 'stat -c %a "$1"', "sh", "calc/ops.py"], { cwd: await hostWorkdir(), encoding: "utf8" }).trim();
    expect(mode).toBe("755");
    expect(await readFile(join(logDir, "stderr.txt"), "utf8")).toContain("applied on the host with up to 5 lines of fuzz");
  });

  test("a gold patch that applies nowhere is a setup error naming the file and hunk; the workdir is unchanged", async () => {
    const ctx = testContext(sandbox, await goldTask(FITS_NOWHERE), logDir);
    const result = await createAgent({ kind: "oracle" }).run(ctx);
    expect(result).toMatchObject({ exitCode: 1, errorKind: "setup" });
    expect(result.error).toMatch(/^the task's gold patch does not apply: calc\/ops\.py: hunk #1 \(@@ -40,3 \+40,3 @@\) fits nowhere, even with 5 lines of fuzz/);
    expect((await sandbox.readFile(`${sandbox.workdir}/calc/ops.py`))?.toString()).toBe(OPS);
  });

  test("a patch whose second file fits nowhere changes neither file", async () => {
    const both = `${FUZZY_GOLD}${FITS_NOWHERE.replaceAll("calc/ops.py", "calc/other.py")}`;
    await sandbox.writeFile(`${sandbox.workdir}/calc/other.py`, "x = 1\n");
    const result = await createAgent({ kind: "oracle" }).run(testContext(sandbox, await goldTask(both), logDir));
    expect(result.error).toMatch(/calc\/other\.py: hunk #1/);
    expect((await sandbox.readFile(`${sandbox.workdir}/calc/ops.py`))?.toString()).toBe(OPS);
  });

  test("a path outside the workdir is refused, not written", async () => {
    const escape = FUZZY_GOLD.replaceAll("a/calc/ops.py", "a/../escape.py").replaceAll("b/calc/ops.py", "b/../escape.py");
    const result = await createAgent({ kind: "oracle" }).run(testContext(sandbox, await goldTask(escape), logDir));
    expect(result.error).toContain("../escape.py: not a path inside the workdir");
  });
});

describe("patches agent", () => {
  test("a model patch that needs fuzz applies; one that fits nowhere is an agent error", async () => {
    const file = join(root, "predictions.jsonl");
    await writeFile(file, `${JSON.stringify({ instance_id: "t", model_name_or_path: "m", model_patch: FUZZY_GOLD })}\n`);
    const ok = await patchesAgent(file).run(testContext(sandbox, testTask(), logDir));
    expect(ok).toMatchObject({ exitCode: 0, model: "m" });
    expect((await sandbox.readFile(`${sandbox.workdir}/calc/ops.py`))?.toString()).toContain("return a * b");
    await writeFile(file, `${JSON.stringify({ instance_id: "t", model_patch: FITS_NOWHERE })}\n`);
    const bad = await patchesAgent(file).run(testContext(sandbox, testTask(), logDir));
    expect(bad.errorKind).toBeUndefined();
    expect(bad.error).toMatch(/^the model patch does not apply: calc\/ops\.py: hunk #1/);
  });
});

/** The host directory the local sandbox's workdir maps to. */
async function hostWorkdir(): Promise<string> {
  const r = await sandbox.exec(["pwd"], { cwd: sandbox.workdir });
  return r.stdout.trim();
}
