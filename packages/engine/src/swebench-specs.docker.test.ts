import { execFileSync } from "node:child_process";
import { chmod, mkdir, writeFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import { DockerRuntime, dockerTestGate } from "@proctor/sandbox-docker";
import type { AgentSpec, TrialResult } from "@proctor/schema";
import { loadTasks } from "@proctor/tasks";
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { startRun } from "./run";
import { byTask, containersOf, readResultsFile, removeRunContainers, tempDir, writeAgent } from "./testing/fixtures";

const haveDocker = await dockerTestGate();

const git = (cwd: string, ...args: string[]) =>
  execFileSync("git", ["-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main", ...args], { cwd, encoding: "utf8" });

/**
 * A small project laid out like Django: the package at the root, the suite under tests/ run by
 * tests/runtests.py with module labels (`utils_tests.test_text`), unittest's verbose output.
 */
const DJANGO_LIKE: Record<string, string> = {
  "django/__init__.py": "",
  "django/utils/__init__.py": "",
  "django/utils/text.py": "def capfirst(x):\n    return x  # bug: not capitalised\n\n\ndef lower(x):\n    return x.lower()\n",
  "tests/test_sqlite.py": "DATABASES = {'default': {'ENGINE': 'django.db.backends.sqlite3'}}\n",
  "tests/utils_tests/__init__.py": "",
  "tests/utils_tests/test_text.py": "import unittest\n\nfrom django.utils import text\n\n\nclass TestUtilsText(unittest.TestCase):\n    def test_lower(self):\n        self.assertEqual(text.lower('AB'), 'ab')\n",
  "tests/runtests.py": [
    "#!/usr/bin/env python3",
    "# Like Django's runner: labels are modules under tests/, --settings names a module there.",
    "import argparse, importlib, os, sys, unittest",
    "here = os.path.dirname(os.path.abspath(__file__))",
    "sys.path[:0] = [here, os.path.dirname(here)]",
    "p = argparse.ArgumentParser()",
    "p.add_argument('labels', nargs='*')",
    "p.add_argument('--verbosity', type=int, default=1)",
    "p.add_argument('--settings', default='test_sqlite')",
    "p.add_argument('--parallel', type=int, default=0)",
    "a = p.parse_args()",
    "importlib.import_module(a.settings)",
    "print(\"Testing against Django installed in '%s'\" % os.path.join(os.path.dirname(here), 'django'))",
    "suite = unittest.defaultTestLoader.loadTestsFromNames(a.labels or ['utils_tests.test_text'])",
    "print('Creating test database for alias \\'default\\'...')",
    "r = unittest.TextTestRunner(verbosity=a.verbosity, stream=sys.stdout).run(suite)",
    "sys.exit(not r.wasSuccessful())",
    "",
  ].join("\n"),
};

/** A small project laid out like sympy: sympy/<pkg>/tests/test_*.py, run by bin/test with sympy's output. */
const SYMPY_LIKE: Record<string, string> = {
  "sympy/__init__.py": "",
  "sympy/core/__init__.py": "",
  "sympy/core/numbers.py": "def igcd(a, b):\n    return a  # bug\n\n\ndef ilcm(a, b):\n    return a * b // 1\n",
  "sympy/core/tests/__init__.py": "",
  "sympy/core/tests/test_numbers.py": "from sympy.core.numbers import ilcm\n\n\ndef test_ilcm():\n    assert ilcm(2, 3) == 6\n",
  "bin/test": [
    "#!/usr/bin/env python3",
    "# Like sympy's bin/test -C --verbose: one line per test function, a report per failure.",
    "import importlib, os, sys, traceback",
    "root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))",
    "sys.path.insert(0, root)",
    "paths = [a for a in sys.argv[1:] if not a.startswith('-')]",
    "print('============================= test process starts ==============================')",
    "failed, passed, reports = 0, 0, []",
    "for path in paths:",
    "    mod = importlib.import_module(path[:-3].replace('/', '.'))",
    "    tests = [n for n in dir(mod) if n.startswith('test_')]",
    "    print('%s[%d] ' % (path, len(tests)))",
    "    for name in tests:",
    "        try:",
    "            getattr(mod, name)()",
    "            print('%s ok' % name); passed += 1",
    "        except Exception:",
    "            print('%s F%s[FAIL]' % (name, ' ' * 40)); failed += 1",
    "            reports.append(('%s:%s' % (path, name), traceback.format_exc()))",
    "for where, tb in reports:",
    "    print('_' * 80)",
    "    print('_' * 13 + ' ' + where + ' ' + '_' * 13)",
    "    print(tb)",
    "print('============= tests finished: %d passed, %d failed, in 0.01 seconds ==============' % (passed, failed))",
    "sys.exit(1 if failed else 0)",
    "",
  ].join("\n"),
};

interface Project {
  repo: string;
  base: string;
  gold: string;
  test: string;
}

/** Commit `files` as a repo, then the gold and test patches as diffs against it; its bare mirror goes in `mirrors`. */
async function project(root: string, mirrors: string, repo: string, files: Record<string, string>, gold: Record<string, string>, tests: Record<string, string>): Promise<Project> {
  const work = join(root, repo.replace("/", "__"));
  for (const [path, content] of Object.entries(files)) {
    await mkdir(dirname(join(work, path)), { recursive: true });
    await writeFile(join(work, path), content);
    if (content.startsWith("#!")) await chmod(join(work, path), 0o755);
  }
  git(work, "init", "--quiet");
  git(work, "add", "-A");
  git(work, "commit", "--quiet", "-m", "base");
  const base = git(work, "rev-parse", "HEAD").trim();
  const diff = async (edits: Record<string, string>) => {
    for (const [path, content] of Object.entries(edits)) await writeFile(join(work, path), content);
    const out = git(work, "diff");
    git(work, "checkout", "--", ".");
    return out;
  };
  const result = { repo, base, gold: await diff(gold), test: await diff(tests) };
  execFileSync("git", ["clone", "--quiet", "--bare", work, join(mirrors, `${repo.replace("/", "__")}.git`)]);
  return result;
}

/** A row with exactly the fields of a SWE-bench Verified row (no test_cmd, no image_name). */
function verifiedRow(p: Project, id: string, version: string, f2p: string[], p2p: string[]) {
  return {
    repo: p.repo,
    instance_id: id,
    base_commit: p.base,
    patch: p.gold,
    test_patch: p.test,
    problem_statement: `fix ${id}`,
    hints_text: "",
    created_at: "2019-03-01T12:00:00Z",
    version,
    FAIL_TO_PASS: JSON.stringify(f2p),
    PASS_TO_PASS: JSON.stringify(p2p),
    environment_setup_commit: p.base,
    difficulty: "<15 min fix",
  };
}


describe.skipIf(!haveDocker)("official SWE-bench rows without test_cmd: Django's and sympy's runners, as the harness runs them", () => {
  let root: { path: string; cleanup: () => Promise<void> };
  let dataset: string;
  let mirrors: string;
  const runIds: string[] = [];

  beforeAll(async () => {
    root = await tempDir("proctor-swe-specs-");
    mirrors = join(root.path, "mirrors");
    await mkdir(mirrors, { recursive: true });
    const testText = DJANGO_LIKE["tests/utils_tests/test_text.py"] as string;
    const django = await project(
      root.path,
      mirrors,
      "django/django",
      DJANGO_LIKE,
      { "django/utils/text.py": (DJANGO_LIKE["django/utils/text.py"] as string).replace("return x  # bug: not capitalised", "return x and x[0].upper() + x[1:]") },
      { "tests/utils_tests/test_text.py": `${testText}\n    def test_capfirst(self):\n        self.assertEqual(text.capfirst('hello'), 'Hello')\n` },
    );
    const testNumbers = SYMPY_LIKE["sympy/core/tests/test_numbers.py"] as string;
    const sympy = await project(
      root.path,
      mirrors,
      "sympy/sympy",
      SYMPY_LIKE,
      { "sympy/core/numbers.py": (SYMPY_LIKE["sympy/core/numbers.py"] as string).replace("    return a  # bug", "    while b:\n        a, b = b, a % b\n    return a") },
      { "sympy/core/tests/test_numbers.py": testNumbers.replace("import ilcm", "import igcd, ilcm") + "\n\ndef test_igcd():\n    assert igcd(12, 18) == 6\n" },
    );
    const rows = [
      verifiedRow(django, "django__django-11099", "3.0", ["test_capfirst (utils_tests.test_text.TestUtilsText)"], ["test_lower (utils_tests.test_text.TestUtilsText)"]),
      verifiedRow(sympy, "sympy__sympy-20590", "1.7", ["test_igcd"], ["test_ilcm"]),
    ];
    dataset = join(root.path, "verified.jsonl");
    await writeFile(dataset, `${rows.map((r) => JSON.stringify(r)).join("\n")}\n`);
  }, 60_000);
  afterAll(async () => {
    removeRunContainers(runIds);
    await root?.cleanup();
  });

  async function run(agent: "oracle" | "nop" | { script: string }): Promise<Record<string, TrialResult>> {
    const loaded = await loadTasks([dataset], { reposDir: mirrors, cacheDir: join(root.path, "task-cache") });
    expect(loaded.errors.map((e) => e.message)).toEqual([]);
    const name = typeof agent === "string" ? agent : "code";
    const runId = `swe-specs-${name}-${process.pid}`;
    runIds.push(runId);
    const spec: AgentSpec = typeof agent === "string" ? { kind: agent } : { kind: "code", dir: await writeAgent(root.path, `agent-${runIds.length}`, agent.script) };
    const handle = startRun({ runId, runDir: join(root.path, "runs", runId), runtime: new DockerRuntime(), tasks: loaded.tasks, agent: spec, concurrency: 2, attempts: 1, defaultImage: null, cacheDir: join(root.path, "repo-cache") });
    await handle.done;
    expect(containersOf(runId)).toEqual([]);
    return byTask(await readResultsFile(handle.runDir));
  }

  test("oracle resolves both: Django's runtests.py with module labels, sympy's bin/test on the test file", async () => {
    const results = await run("oracle");
    const django = results["django__django-11099"];
    expect(django, JSON.stringify(django?.error)).toMatchObject({ status: "passed", grading: { resolved: true, tests: { "test_capfirst (utils_tests.test_text.TestUtilsText)": "PASSED", "test_lower (utils_tests.test_text.TestUtilsText)": "PASSED" } } });
    expect(django?.grading?.testCommand.split("\n").at(-1)).toBe("./tests/runtests.py --verbosity 2 --settings=test_sqlite --parallel 1 utils_tests.test_text");
    const sympy = results["sympy__sympy-20590"];
    expect(sympy, JSON.stringify(sympy?.error)).toMatchObject({ status: "passed", grading: { resolved: true, tests: { test_igcd: "PASSED", test_ilcm: "PASSED" } } });
    expect(sympy?.grading?.testCommand.split("\n").at(-1)).toBe("PYTHONWARNINGS='ignore::UserWarning,ignore::SyntaxWarning' bin/test -C --verbose sympy/core/tests/test_numbers.py");
  }, 600_000);

  test("the runner script and settings the test command runs stay the base commit's: a diff rewriting them refuses the attempt", async () => {
    // Reports every test ok, as Django's runner would for passing tests.
    const fake = ["import sys", "for t in ('test_capfirst', 'test_lower'):", "    print(t + ' (utils_tests.test_text.TestUtilsText) ... ok', file=sys.stderr)", "print('OK', file=sys.stderr)"].join("\n");
    const results = await run({ script: `cd "$PROCTOR_WORKDIR"; if [ -f tests/runtests.py ]; then cat > tests/runtests.py <<'PROCTOR_EOF'\n${fake}\nPROCTOR_EOF\nfi` });
    const django = results["django__django-11099"];
    expect(django).toMatchObject({ status: "error", reward: 0, error: { kind: "agent" } });
    expect(django?.error?.message).toMatch(/^tampered: \/testbed\/tests\/runtests\.py/);
  }, 600_000);

  test("nop resolves neither: the FAIL_TO_PASS test is named failing, PASS_TO_PASS passes", async () => {
    const results = await run("nop");
    expect(results["django__django-11099"]).toMatchObject({
      status: "failed",
      grading: { failToPass: { failure: ["test_capfirst (utils_tests.test_text.TestUtilsText)"] }, passToPass: { success: ["test_lower (utils_tests.test_text.TestUtilsText)"] } },
    });
    expect(results["sympy__sympy-20590"]).toMatchObject({ status: "failed", grading: { failToPass: { failure: ["test_igcd"] }, passToPass: { success: ["test_ilcm"] } } });
  }, 600_000);
});
