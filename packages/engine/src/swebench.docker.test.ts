import { execFileSync } from "node:child_process";
import { mkdir, readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { patchesAgent } from "@proctor/agents";
import { DockerRuntime, dockerTestGate } from "@proctor/sandbox-docker";
import type { Agent } from "@proctor/agents";
import type { AgentSpec, TrialResult } from "@proctor/schema";
import { loadTasks } from "@proctor/tasks";
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { startRun } from "./run";
import { byTask, containersOf, readResultsFile, removeRunContainers, tempDir, writeAgent } from "./testing/fixtures";

const haveDocker = await dockerTestGate();

const git = (cwd: string, ...args: string[]) =>
  execFileSync("git", ["-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main", ...args], { cwd, encoding: "utf8" });

/**
 * A small pure-Python project with three bugs and a pytest suite; like most real projects it ships
 * a conftest.py (a fixture the tests use) and a pytest config, which the agent must not change.
 */
const PROJECT: Record<string, string> = {
  "conftest.py": "import pytest\n\n\n@pytest.fixture\ndef width():\n    return 5\n",
  "setup.cfg": "[metadata]\nname = calc\n\n[tool:pytest]\nmarkers =\n    slow: slow tests\n",
  "calc/__init__.py": "from .ops import add, mul, neg\nfrom .fmt import shout\n",
  "calc/ops.py": "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a + b  # bug\n\n\ndef neg(a):\n    return a  # bug\n",
  "calc/fmt.py": "def shout(text):\n    return text + '!'  # bug: not upper-cased\n\n\ndef pad(text, n):\n    return text.ljust(n)\n",
  "tests/__init__.py": "",
  "tests/test_ops.py": "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n",
  "tests/test_fmt.py":
    "import pytest\nfrom calc.fmt import pad\n\n\n@pytest.mark.parametrize('text', ['a b', 'x'])\ndef test_pad(text, width):\n    assert len(pad(text, width)) == 5\n",
};

interface Fixture {
  dir: string;
  mirrors: string;
  dataset: string;
  base1: string;
  base2: string;
  gold: Record<string, string>;
}

/** Edit files, take the diff as a patch, and put the tree back. */
function diffOf(repo: string, edits: Record<string, string>): string {
  const before: Record<string, string> = {};
  for (const [path, content] of Object.entries(edits)) {
    before[path] = execFileSync("cat", [join(repo, path)], { encoding: "utf8" });
    execFileSync("sh", ["-c", 'printf "%s" "$1" > "$2"', "sh", content, join(repo, path)]);
  }
  const diff = git(repo, "diff");
  git(repo, "checkout", "--", ".");
  return diff;
}

async function buildFixture(root: string): Promise<Fixture> {
  const work = join(root, "work");
  await mkdir(work, { recursive: true });
  git(work, "init", "--quiet");
  for (const [path, content] of Object.entries(PROJECT)) {
    await mkdir(join(work, path, ".."), { recursive: true });
    await writeFile(join(work, path), content);
  }
  git(work, "add", "-A");
  git(work, "commit", "--quiet", "-m", "calc with bugs");
  const base1 = git(work, "rev-parse", "HEAD").trim();
  const ops = PROJECT["calc/ops.py"] as string;
  const fmt = PROJECT["calc/fmt.py"] as string;
  const testOps = PROJECT["tests/test_ops.py"] as string;
  const testFmt = PROJECT["tests/test_fmt.py"] as string;
  const i1 = {
    gold: diffOf(work, { "calc/ops.py": ops.replace("return a + b  # bug", "return a * b") }),
    test: diffOf(work, { "tests/test_ops.py": `${testOps.replace("from calc import add", "from calc import add, mul")}\n\ndef test_mul():\n    assert mul(3, 4) == 12\n` }),
  };
  const i3 = {
    gold: diffOf(work, { "calc/ops.py": ops.replace("return a  # bug", "return -a") }),
    test: diffOf(work, { "tests/test_ops.py": `${testOps.replace("from calc import add", "from calc import add, neg")}\n\ndef test_neg():\n    assert neg(2) == -2\n` }),
  };
  // A later commit: the second and fourth instances start there.
  await writeFile(join(work, "calc", "version.py"), "VERSION = '2'\n");
  git(work, "add", "-A");
  git(work, "commit", "--quiet", "-m", "version 2 (the future for instances 1 and 3)");
  const base2 = git(work, "rev-parse", "HEAD").trim();
  const i2 = {
    gold: diffOf(work, { "calc/fmt.py": fmt.replace("return text + '!'  # bug: not upper-cased", "return text.upper() + '!'") }),
    test: diffOf(work, { "tests/test_fmt.py": `${testFmt.replace("from calc.fmt import pad", "from calc.fmt import pad, shout")}\n\ndef test_shout():\n    assert shout('hi') == 'HI!'\n` }),
  };
  const mirrors = join(root, "mirrors");
  await mkdir(mirrors);
  execFileSync("git", ["clone", "--quiet", "--bare", work, join(mirrors, "acme__calc.git")]);
  const row = (id: string, base: string, inst: { gold: string; test: string }, f2p: unknown, p2p: unknown) => ({
    instance_id: id,
    repo: "acme/calc",
    base_commit: base,
    patch: inst.gold,
    test_patch: inst.test,
    FAIL_TO_PASS: f2p,
    PASS_TO_PASS: p2p,
    problem_statement: `fix ${id}`,
    version: "1.0",
    environment_setup_commit: base,
  });
  const rows = [
    row("calc-1", base1, i1, ["tests/test_ops.py::test_mul"], ["tests/test_ops.py::test_add"]),
    // FAIL_TO_PASS / PASS_TO_PASS as JSON-encoded strings, a parametrized id with a space.
    row("calc-2", base2, i2, '["tests/test_fmt.py::test_shout"]', '["tests/test_fmt.py::test_pad[a b]", "tests/test_fmt.py::test_pad[x]"]'),
    row("calc-3", base1, i3, ["tests/test_ops.py::test_neg"], ["tests/test_ops.py::test_add"]),
    row("calc-4", base2, i1, ["tests/test_ops.py::test_mul"], []),
  ];
  const dataset = join(root, "instances.jsonl");
  await writeFile(dataset, `${rows.map((r) => JSON.stringify(r)).join("\n")}\n`);
  return { dir: root, mirrors, dataset, base1, base2, gold: { "calc-1": i1.gold, "calc-2": i2.gold, "calc-3": i3.gold, "calc-4": i1.gold } };
}


describe.skipIf(!haveDocker)("SWE-bench instances on Docker (real git mirror, real pytest)", () => {
  let root: { path: string; cleanup: () => Promise<void> };
  let fixture: Fixture;
  let runtime: DockerRuntime;
  const runIds: string[] = [];

  async function run(name: string, agent: AgentSpec | Agent): Promise<{ results: Record<string, TrialResult>; runDir: string }> {
    const loaded = await loadTasks([fixture.dataset], { reposDir: fixture.mirrors, cacheDir: join(root.path, "task-cache") });
    expect(loaded.errors).toEqual([]);
    const runId = `swebench-${name}-${process.pid}`;
    runIds.push(runId);
    const handle = startRun({ runId, runDir: join(root.path, "runs", runId), runtime, tasks: loaded.tasks, agent, concurrency: 4, attempts: 1, defaultImage: null, cacheDir: join(root.path, "repo-cache") });
    await handle.done;
    expect(containersOf(runId)).toEqual([]);
    return { results: byTask(await readResultsFile(handle.runDir)), runDir: handle.runDir };
  }

  beforeAll(async () => {
    root = await tempDir("proctor-swebench-");
    fixture = await buildFixture(root.path);
    runtime = new DockerRuntime();
  }, 60_000);
  afterAll(async () => {
    removeRunContainers(runIds);
    await root?.cleanup();
  });

  test("oracle (the gold patch) resolves every instance; result.json holds the per-test table", async () => {
    const { results, runDir } = await run("oracle", { kind: "oracle" });
    for (const id of ["calc-1", "calc-2", "calc-3", "calc-4"]) expect(results[id], id).toMatchObject({ status: "passed", reward: 1, grading: { resolved: true } });
    expect(results["calc-2"]?.grading).toMatchObject({
      failToPass: { success: ["tests/test_fmt.py::test_shout"], failure: [] },
      passToPass: { success: ["tests/test_fmt.py::test_pad[a b]", "tests/test_fmt.py::test_pad[x]"], failure: [] },
      tests: { "tests/test_fmt.py::test_shout": "PASSED", "tests/test_fmt.py::test_pad[a b]": "PASSED" },
      testCommand: "python3 -m pytest -rA -p no:cacheprovider 'tests/test_fmt.py'",
    });
    const stored = JSON.parse(await readFile(join(runDir, "trials", "calc-1__1", "result.json"), "utf8")) as TrialResult;
    expect(stored.grading?.tests["tests/test_ops.py::test_mul"]).toBe("PASSED");
    const report = JSON.parse(await readFile(join(runDir, "trials", "calc-1__1", "verifier", "report.json"), "utf8"));
    expect(report["calc-1"]).toMatchObject({ resolved: true, tests_status: { FAIL_TO_PASS: { success: ["tests/test_ops.py::test_mul"] } } });
  }, 600_000);

  test("nop resolves nothing: the FAIL_TO_PASS tests are named as failing", async () => {
    const { results } = await run("nop", { kind: "nop" });
    for (const id of ["calc-1", "calc-2", "calc-3", "calc-4"]) expect(results[id], id).toMatchObject({ status: "failed", reward: 0, error: null, grading: { resolved: false } });
    expect(results["calc-1"]?.grading).toMatchObject({ failToPass: { success: [], failure: ["tests/test_ops.py::test_mul"] }, passToPass: { success: ["tests/test_ops.py::test_add"], failure: [] } });
  }, 300_000);

  test("predictions: only the gold patch resolves; an empty patch is recorded, a wrong one fails, one that does not apply is an error", async () => {
    const predictions = join(root.path, "predictions.jsonl");
    const wrong = fixture.gold["calc-3"]?.replace("+    return -a", "+    return 0 - a + a") ?? "";
    const broken = "diff --git a/calc/ops.py b/calc/ops.py\n--- a/calc/ops.py\n+++ b/calc/ops.py\n@@ -40,3 +40,3 @@\n-nothing like this\n-is in the file\n+at all\n+really\n context\n";
    const lines = [
      { instance_id: "calc-1", model_name_or_path: "m", model_patch: fixture.gold["calc-1"] },
      { instance_id: "calc-2", model_name_or_path: "m", model_patch: "" },
      { instance_id: "calc-3", model_name_or_path: "m", model_patch: wrong },
      { instance_id: "calc-4", model_name_or_path: "m", model_patch: broken },
    ];
    await writeFile(predictions, `${lines.map((l) => JSON.stringify(l)).join("\n")}\n`);
    const { results, runDir } = await run("patches", patchesAgent(predictions));
    expect(results["calc-1"]).toMatchObject({ status: "passed", reward: 1, agent: { model: "m" } });
    expect(results["calc-2"]).toMatchObject({ status: "failed", reward: 0 });
    expect(await readFile(join(runDir, "trials", "calc-2__1", "agent", "patch.diff"), "utf8")).toBe("");
    expect(results["calc-3"]).toMatchObject({ status: "failed", reward: 0, grading: { failToPass: { failure: ["tests/test_ops.py::test_neg"] } } });
    expect(results["calc-4"]).toMatchObject({ status: "error", reward: 0, error: { kind: "agent" } });
    expect(results["calc-4"]?.error?.message).toMatch(/^the model patch does not apply: calc\/ops\.py: hunk #1 \(@@ -40,3 \+40,3 @@\) fits nowhere, even with 5 lines of fuzz \(git apply: .*patch failed: calc\/ops\.py:40/);
  }, 300_000);

  test("the agent cannot grade itself: rewritten test files are reset, /testbed holds only base history and has no network", async () => {
    const cheat = await writeAgent(
      root.path,
      "cheater",
      [
        "cd /testbed",
        "{ git log --format=%H | wc -l; git cat-file -e " + "$(git rev-parse HEAD)" + " && echo has-head; } > /logs/agent/git.txt 2>&1",
        "python3 -c \"import socket; socket.create_connection(('1.1.1.1', 80), timeout=3)\" > /logs/agent/net.txt 2>&1 || echo no-network >> /logs/agent/net.txt",
        "pwd > /logs/agent/pwd.txt",
        // Pre-write the tests the grader will run, passing no matter what.
        "mkdir -p tests && printf 'def test_mul():\\n    pass\\n\\ndef test_add():\\n    pass\\n' > tests/test_ops.py",
      ].join("\n"),
    );
    const { results, runDir } = await run("cheater", { kind: "code", dir: cheat });
    expect(results["calc-1"]).toMatchObject({ status: "failed", reward: 0, grading: { failToPass: { failure: ["tests/test_ops.py::test_mul"] } } });
    const logs = join(runDir, "trials", "calc-1__1", "logs", "agent");
    expect((await readFile(join(logs, "pwd.txt"), "utf8")).trim()).toBe("/testbed");
    expect((await readFile(join(logs, "git.txt"), "utf8")).trim().split("\n")).toEqual(["1", "has-head"]);
    expect(await readFile(join(logs, "net.txt"), "utf8")).toContain("no-network");
    expect(fixture.base2).not.toBe(fixture.base1);
  }, 300_000);

  test("--env-setup: image_setup is baked into a derived image, install runs in /testbed before the agent", async () => {
    const setup = join(root.path, "env-setup.yaml");
    await writeFile(
      setup,
      [
        "acme/calc:",
        "  1.0:",
        "    image_setup:",
        "      - mkdir -p /usr/lib/python3/dist-packages",
        "      - |",
        "        cd /usr/lib/python3/dist-packages",
        "        echo 'READY = True' > calcenv.py",
        "    install: pwd > /tmp/installed-in && git rev-parse HEAD >> /tmp/installed-in",
        "",
      ].join("\n"),
    );
    // The instance's tests need both: the module from the image, the marker from install.
    const envTest = "import calcenv\n\n\ndef test_env():\n    assert calcenv.READY\n    assert open('/tmp/installed-in').read().split() == ['/testbed', '" + fixture.base1 + "']\n";
    const [first] = (await readFile(fixture.dataset, "utf8")).split("\n");
    const row = JSON.parse(first ?? "{}") as Record<string, unknown>;
    const testPatch = (row.test_patch as string) + ["diff --git a/tests/test_env.py b/tests/test_env.py", "new file mode 100644", "--- /dev/null", "+++ b/tests/test_env.py", `@@ -0,0 +1,${envTest.split("\n").length - 1} @@`, ...envTest.split("\n").slice(0, -1).map((l) => `+${l}`), ""].join("\n");
    const dataset = join(root.path, "env-instances.jsonl");
    await writeFile(dataset, `${JSON.stringify({ ...row, instance_id: "calc-env", test_patch: testPatch, PASS_TO_PASS: ["tests/test_ops.py::test_add", "tests/test_env.py::test_env"] })}\n`);
    const run = async (envSetup?: string) => {
      const loaded = await loadTasks([dataset], { reposDir: fixture.mirrors, cacheDir: join(root.path, "task-cache"), ...(envSetup ? { envSetup } : {}) });
      expect(loaded.errors).toEqual([]);
      const runId = `swebench-env-${envSetup ? "with" : "without"}-${process.pid}`;
      runIds.push(runId);
      const handle = startRun({ runId, runDir: join(root.path, "runs", runId), runtime, tasks: loaded.tasks, agent: { kind: "oracle" }, concurrency: 1, attempts: 1, defaultImage: null, cacheDir: join(root.path, "repo-cache") });
      await handle.done;
      return byTask(await readResultsFile(handle.runDir))["calc-env"];
    };
    expect(await run(setup)).toMatchObject({ status: "passed", reward: 1, grading: { resolved: true, tests: { "tests/test_env.py::test_env": "PASSED" } } });
    // Without the setup the same instance cannot resolve: test_env is named as failing (its import
    // error stops pytest's collection, so test_add does not run either).
    expect(await run()).toMatchObject({ status: "failed", reward: 0, grading: { resolved: false, passToPass: { failure: expect.arrayContaining(["tests/test_env.py::test_env"]) } } });
  }, 600_000);

  test("an agent that adds a plugin through the repo's pytest config (setup.cfg [tool:pytest] addopts) is tampering", async () => {
    const cheat = await writeAgent(
      root.path,
      "config-cheater",
      [
        "cd /testbed",
        // A plugin that turns every test report into a pass, loaded by pytest through setup.cfg.
        "printf 'import pytest\\n\\n@pytest.hookimpl(hookwrapper=True)\\ndef pytest_runtest_makereport(item, call):\\n    outcome = yield\\n    outcome.get_result().outcome = \"passed\"\\n' > passall.py",
        "printf 'addopts = -p passall\\n' >> setup.cfg",
        "cp setup.cfg /logs/agent/setup.cfg",
      ].join("\n"),
    );
    const { results, runDir } = await run("pytest-config", { kind: "code", dir: cheat });
    for (const id of ["calc-1", "calc-2"]) {
      expect(results[id], id).toMatchObject({ status: "error", reward: 0, error: { kind: "agent" } });
      expect(results[id]?.error?.message, id).toMatch(/^tampered: \/testbed\/setup\.cfg /);
    }
    expect(await readFile(join(runDir, "trials", "calc-1__1", "logs", "agent", "setup.cfg"), "utf8")).toContain("addopts = -p passall");
  }, 300_000);

  test("an agent that rewrites the repo's own conftest.py to pass every test is tampering", async () => {
    const cheat = await writeAgent(
      root.path,
      "conftest-cheater",
      [
        "cd /testbed",
        // A hook that turns every test report into a pass, appended to the conftest.py the repo ships.
        "printf '\\n\\n@pytest.hookimpl(hookwrapper=True)\\ndef pytest_runtest_makereport(item, call):\\n    outcome = yield\\n    outcome.get_result().outcome = \"passed\"\\n' >> conftest.py",
        "cp conftest.py /logs/agent/conftest.py",
      ].join("\n"),
    );
    const { results, runDir } = await run("conftest", { kind: "code", dir: cheat });
    for (const id of ["calc-1", "calc-2", "calc-3", "calc-4"]) {
      expect(results[id], id).toMatchObject({ status: "error", reward: 0, error: { kind: "agent" } });
      expect(results[id]?.error?.message, id).toMatch(/^tampered: \/testbed\/conftest\.py /);
    }
    expect(await readFile(join(runDir, "trials", "calc-1__1", "logs", "agent", "conftest.py"), "utf8")).toContain("pytest_runtest_makereport");
  }, 300_000);
});
