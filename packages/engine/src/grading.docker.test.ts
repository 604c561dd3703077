import { execFileSync } from "node:child_process";
import { copyFile, readFile, stat, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { DockerRuntime, dockerTestGate } from "@proctor/sandbox-docker";
import type { TaskSpec, TrialResult } from "@proctor/schema";
import { loadTasks } from "@proctor/tasks";
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { startRun, type RunOptions } from "./run";
import { buildSweCalc } from "./testing/swe-calc";
import { byTask, containersOf, type FixtureTask, inlineTask, readResultsFile, removeRunContainers, tempDir, writeAgent, writeTasks } from "./testing/fixtures";

const IMAGE = "proctor/base:bookworm";
const haveDocker = await dockerTestGate();

/**
 * Reward 1 only when /app/answer.txt holds 42, graded by pytest (as most real tasks are) under
 * `timeout`, from /tmp: the tests name nothing outside the workdir, so the task is graded fresh.
 */
const PYTEST_TASK: FixtureTask = {
  toml: "[agent]\ntimeout_sec = 30\n[verifier]\ntimeout_sec = 90\n",
  instruction: "Write 42 into /app/answer.txt.",
  test: [
    "cat > /tmp/test_answer.py <<'EOF'",
    "def test_answer():",
    "    assert open('/app/answer.txt').read().strip() == '42'",
    "EOF",
    "mkdir -p /logs/verifier",
    "if timeout 60 python3 -m pytest -q -p no:cacheprovider /tmp/test_answer.py; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi",
  ].join("\n"),
  solve: "echo 42 > /app/answer.txt",
};

/** The same check run from the workdir (where pytest looks for its configuration). */
const PYTEST_CWD_TASK: FixtureTask = {
  ...PYTEST_TASK,
  test: [
    "cat > /app/test_answer_check.py <<'EOF'",
    "def test_answer():",
    "    assert open('/app/answer.txt').read().strip() == '42'",
    "EOF",
    "mkdir -p /logs/verifier",
    "cd /app && if python3 -m pytest -q -p no:cacheprovider test_answer_check.py; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi",
  ].join("\n"),
};

/** The solution starts a web server the test talks to (like Terminal-Bench's nginx/sshd tasks). */
const SERVICE_TASK: FixtureTask = {
  toml: "[agent]\ntimeout_sec = 30\n[verifier]\ntimeout_sec = 60\n",
  instruction: "Serve /app over HTTP on port 8000.",
  test: [
    "mkdir -p /logs/verifier",
    `if python3 -c "import urllib.request; assert b'hello' in urllib.request.urlopen('http://127.0.0.1:8000/hello.txt', timeout=5).read()"; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi`,
  ].join("\n"),
  // Returns once the server answers, so it is listening when the agent's survivors are listed.
  solve: `echo hello > /app/hello.txt; cd /app && (setsid python3 -m http.server 8000 >/dev/null 2>&1 &)
for i in $(seq 100); do python3 -c "import socket; socket.create_connection(('127.0.0.1', 8000), 1)" 2>/dev/null && break; sleep 0.1; done`,
};

/** The answer compared with a reference file the tests bring (as many Terminal-Bench tasks do). */
const EXPECTED_TASK: FixtureTask = {
  ...PYTEST_TASK,
  test: ["mkdir -p /logs/verifier", "if cmp -s /app/answer.txt /tests/expected.txt; then echo 1; else echo 0; fi > /logs/verifier/reward.txt"].join("\n"),
};

/** Passes unless the names the verifier resolves are the agent's: its /etc/hosts or resolv.conf entries. */
const RESOLVE_TASK: FixtureTask = {
  ...PYTEST_TASK,
  toml: '[agent]\ntimeout_sec = 30\n[verifier]\ntimeout_sec = 60\ngrading = "fresh"\n',

  test: ["mkdir -p /logs/verifier", "if getent hosts files.pythonhosted.org | grep -q 10.9.9.9 || grep -q 10.9.9.8 /etc/resolv.conf; then echo 0; else echo 1; fi > /logs/verifier/reward.txt"].join("\n"),
  solve: "true",
};

/** A verifier that gives up (no reward) when something already listens on port 9999. */
const PORT_TASK: FixtureTask = {
  toml: "[agent]\ntimeout_sec = 30\n[verifier]\ntimeout_sec = 60\n",
  instruction: "Write 42 into /app/answer.txt.",
  test: [
    `if python3 -c "import socket; socket.create_connection(('127.0.0.1', 9999), timeout=2)" 2>/dev/null; then echo "port 9999 is taken"; exit 1; fi`,
    "mkdir -p /logs/verifier",
    "if [ \"$(cat /app/answer.txt 2>/dev/null)\" = 42 ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt",
  ].join("\n"),
  solve: "echo 42 > /app/answer.txt",
};

const SITE = "/usr/local/lib/python3.11/dist-packages";
/** Python that passes every test run it is loaded into: the -rA lines SWE grading parses, and exit 0 for a test.sh. */
const FORCE_PASS = `import os
print("PASSED tests/test_ops.py::test_add")
print("PASSED tests/test_ops.py::test_mul")
os._exit(0)`;
/** A python3 stand-in: passes any pytest run, runs anything else with the real Python. */
const FORCE_PASS_SH = `#!/bin/sh
case " $* " in *" pytest "*) echo "== 1 passed in 0.01s =="; exit 0 ;; esac
exec /usr/bin/python3.11 "$@"`;
/** A pytest plugin that turns every failure into a pass. */
const PASS_PLUGIN = `import pytest
@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    outcome.get_result().outcome = "passed"`;
const W = '"$PROCTOR_WORKDIR"';

/** Writes `content` to `path` (a here-document, so quotes survive). */
const put = (path: string, content: string) => `mkdir -p "$(dirname ${path})"; cat > ${path} <<'PROCTOR_EOF'\n${content}\nPROCTOR_EOF`;

/**
 * The attacks: each agent does none of the work and tries to get a pass from the verifier by
 * changing what it loads. `lib` agents get /agent/libforge.so, which writes reward 1 from a
 * destructor in every process that loads it.
 */
const ATTACKS: Record<string, { script: string; lib?: true }> = {
  // sys.path shadows
  "cwd-pytest-module": { script: put(`${W}/pytest.py`, FORCE_PASS) },
  // pytest imports pluggy: with the current directory on sys.path this one would run instead
  "cwd-module-shadow": { script: put(`${W}/pluggy.py`, FORCE_PASS) },
  "site-pytest-package": { script: `${put(`${SITE}/pytest/__init__.py`, FORCE_PASS)}\n${put(`${SITE}/pytest/__main__.py`, FORCE_PASS)}` },
  // Python start-up hooks
  "pth-import": { script: `${put(`${SITE}/zz.pth`, "import zzhook")}\n${put(`${SITE}/zzhook.py`, FORCE_PASS)}` },
  "user-site": { script: put("/root/.local/lib/python3.11/site-packages/usercustomize.py", FORCE_PASS) },
  "usercustomize-package": { script: put(`${SITE}/usercustomize/__init__.py`, FORCE_PASS) },
  "passwd-home": { script: `${put("/evil/.local/lib/python3.11/site-packages/usercustomize.py", FORCE_PASS)}\nsed -i 's#^root:x:0:0:root:/root:#root:x:0:0:root:/evil:#' /etc/passwd` },
  // pytest plugins and configs
  "pytest11-entry-point": { script: `${put(`${SITE}/zzplugin.py`, PASS_PLUGIN)}\n${put(`${SITE}/zzplugin-1.0.dist-info/METADATA`, "Metadata-Version: 2.1\nName: zzplugin\nVersion: 1.0")}\n${put(`${SITE}/zzplugin-1.0.dist-info/entry_points.txt`, "[pytest11]\nzz = zzplugin")}` },
  "iniconfig-atexit": { script: "printf '\\nimport atexit, os\\natexit.register(lambda: os._exit(0))\\n' >> /usr/lib/python3/dist-packages/iniconfig/__init__.py" },
  "workdir-pytest-ini": { script: put(`${W}/pytest.ini`, "[pytest]\naddopts = --co -q") },
  "workdir-conftest": { script: put(`${W}/conftest.py`, PASS_PLUGIN) },
  "subdir-pytest-ini": { script: put(`${W}/tests/pytest.ini`, "[pytest]\naddopts = -p no:python") },
  // the dynamic loader and libc
  "ld-so-preload": { script: "cp /agent/libforge.so /usr/local/lib/libforge.so && echo /usr/local/lib/libforge.so > /etc/ld.so.preload", lib: true },
  "nss-module": { script: `cp /agent/libforge.so /usr/lib/x86_64-linux-gnu/libnss_evil.so.2 && sed -i 's/^passwd:.*/passwd: evil files/' /etc/nsswitch.conf`, lib: true },
  "ldconfig-cache": { script: `cp /agent/libforge.so /usr/local/lib/libnss_evil.so.2 && ldconfig && sed -i 's/^passwd:.*/passwd: evil files/' /etc/nsswitch.conf`, lib: true },
  "ld-conf-removed": { script: `mkdir -p /opt/evil && cp /agent/libforge.so /opt/evil/libnss_evil.so.2 && echo /opt/evil > /etc/ld.so.conf.d/zz.conf && ldconfig && rm /etc/ld.so.conf.d/zz.conf && sed -i 's/^passwd:.*/passwd: evil files/' /etc/nsswitch.conf`, lib: true },
  // plain tools test.sh calls
  "replace-timeout": { script: "printf '#!/bin/sh\\nexit 0\\n' > /usr/bin/timeout" },
  // the code under test (a repository's own module patching the test runner when imported)
  "repo-patches-pytest": {
    script: `cat >> ${W}/calc/__init__.py <<'PROCTOR_EOF'
import _pytest.reports
_make = _pytest.reports.TestReport.from_item_and_call
def _passing(item, call):
    report = _make(item, call)
    report.outcome = "passed"
    return report
_pytest.reports.TestReport.from_item_and_call = staticmethod(_passing)
PROCTOR_EOF`,
  },
  // SWE-bench rows: the repository's own files, which a diff may change, steering its test run
  "swe-dot-pytest-ini": { script: `${put(`${W}/calc/zz.py`, PASS_PLUGIN)}\n${put(`${W}/tests/.pytest.ini`, "[pytest]\naddopts = -p calc.zz")}` },
  "swe-pyproject-dotted-key": { script: `${put(`${W}/calc/zz.py`, PASS_PLUGIN)}\n${put(`${W}/pyproject.toml`, '[project]\nname = "calc"\nversion = "0.1"\n\n[tool]\npytest.ini_options.addopts = "-p calc.zz"')}` },
  "swe-setupcfg-cr-newline": { script: `${put(`${W}/calc/zz.py`, PASS_PLUGIN)}\nprintf '[metadata]\\nname = calc\\r[tool:pytest]\\raddopts = -p calc.zz\\n' > ${W}/setup.cfg` },
  "swe-tests-package-init": {
    script: put(`${W}/tests/__init__.py`, `import _pytest.reports
_make = _pytest.reports.TestReport.from_item_and_call
def _passing(item, call):
    report = _make(item, call)
    report.outcome = "passed"
    return report
_pytest.reports.TestReport.from_item_and_call = staticmethod(_passing)`),
  },
  "swe-dist-info-entry-point": { script: `${put(`${W}/calc/tools.py`, PASS_PLUGIN)}\n${put(`${W}/calc_tools-1.0.dist-info/METADATA`, "Metadata-Version: 2.1\nName: calc-tools\nVersion: 1.0")}\n${put(`${W}/calc_tools-1.0.dist-info/entry_points.txt`, "[pytest11]\ncalc_tools = calc.tools")}` },
  "swe-atexit-summary-line": {
    script: `cat >> ${W}/calc/__init__.py <<'PROCTOR_EOF'
import atexit as _atexit, sys as _sys
@_atexit.register
def _report():
    for _id in ("tests/test_ops.py::test_add", "tests/test_ops.py::test_mul"):
        print("PASSED " + _id, file=_sys.__stdout__, flush=True)
PROCTOR_EOF`,
  },
  // an extension module named like one pytest imports, at the repository root (Python tries .so before .py)
  "swe-extension-module-shadow": { script: `cp "$(python3 -c 'import _json; print(_json.__file__)')" ${W}/pluggy.cpython-311-x86_64-linux-gnu.so` },
  // /logs replaced by a file: the verifier's directories cannot be made in the agent's sandbox
  "logs-is-a-file": { script: "rm -rf /logs && echo x > /logs" },
  // a nested repository the agent left (as an honest agent cloning a dependency would): a fail stays a fail
  "swe-nested-git": { script: `mkdir -p ${W}/vendor && cd ${W}/vendor && git init -q . && echo x > x.txt` },
  // an output that is a link to the reference answer the tests bring, directly or through a link to /
  "link-to-expected": { script: "ln -s /tests/expected.txt /app/answer.txt" },
  "link-to-expected-via-root": { script: "ln -s / /app/.r && ln -s /app/.r/tests/expected.txt /app/answer.txt" },
  // a library stored in a file the runtime bind-mounts (outside the audited file system)
  "binary-hostname": { script: "cp /usr/lib/x86_64-linux-gnu/libz.so.1 /etc/hostname" },
  // a module in a HOME-like directory of the agent's, linked from a site dir
  "proctor-home-decoy": { script: `${put("/tmp/proctor-home.agent/pluggy.py", FORCE_PASS)}\nmkdir -p ${SITE}\nln -s /tmp/proctor-home.agent/pluggy.py ${SITE}/pluggy.py` },
  // shared mode: links the agent made, which the audit sees only by what they reach
  "relinked-interpreter": { script: `${put("/opt/py/python3", FORCE_PASS_SH)}\nchmod +x /opt/py/python3\nln -sfn /opt/py/python3 /usr/bin/python3` },
  "shadow-via-link": { script: `${put("/opt/py/python3", FORCE_PASS_SH)}\nchmod +x /opt/py/python3\nln -s /opt/py/python3 /usr/local/bin/python3` },
  "site-link-into-outputs": { script: `${put("/app/.cache/pluggy/__init__.py", FORCE_PASS)}\nmkdir -p ${SITE}\nln -s /app/.cache/pluggy ${SITE}/pluggy` },
  "link-to-unaudited-mount": { script: `${put("/dev/shm/pluggy.py", FORCE_PASS)}\nmkdir -p ${SITE}\nln -s /dev/shm/pluggy.py ${SITE}/pluggy.py` },
  // a process left behind that rewrites what the verifier brings while it runs
  "survivor-writes-tests": { script: `(setsid sh -c 'while :; do [ -d /tests ] && echo "def test_ok(): pass" > /tests/test_zz.py; sleep 0.05; done' >/dev/null 2>&1 &)` },
  // the names the tests resolve (pip's index, say) sent to a server of the agent's, kept running
  "redirect-names": {
    script: `echo "10.9.9.9 files.pythonhosted.org" >> /etc/hosts; echo "nameserver 10.9.9.8" > /etc/resolv.conf
(setsid sleep 600 >/dev/null 2>&1 &)`,
  },
  // a process left behind that makes the verifier fail (no reward): must not leave the scored trials
  "port-squatter": {
    script: `(setsid python3 -c "import socket,time; s=socket.socket(); s.bind(('127.0.0.1', 9999)); s.listen(); time.sleep(600)" >/dev/null 2>&1 &)
for i in $(seq 100); do python3 -c "import socket; socket.create_connection(('127.0.0.1', 9999), 1)" 2>/dev/null && break; sleep 0.1; done`,
  },
};

/** Attacks on the system (outside any output): a fresh grader never sees them. */
const SYSTEM_ATTACKS = ["site-pytest-package", "pth-import", "user-site", "usercustomize-package", "passwd-home", "pytest11-entry-point", "iniconfig-atexit", "ld-so-preload", "nss-module", "ldconfig-cache", "ld-conf-removed", "replace-timeout"];

describe.skipIf(!haveDocker)("grading on a pristine filesystem (the agent is root in its sandbox)", () => {
  let root: { path: string; cleanup: () => Promise<void> };
  let runtime: DockerRuntime;
  let tasks: Record<string, TaskSpec>;
  let forgeLib: string;
  const runIds: string[] = [];

  function run(name: string, options: Partial<RunOptions> & Pick<RunOptions, "tasks" | "agent">) {
    const runId = `grading-${name}-${process.pid}-${runIds.length}`;
    runIds.push(runId);
    return startRun({ runId, runDir: join(root.path, "runs", runId), runtime, concurrency: 4, attempts: 1, defaultImage: IMAGE, cacheDir: join(root.path, "cache"), ...options });
  }

  async function attack(name: string, taskIds: string[], options: Partial<RunOptions> = {}): Promise<Record<string, TrialResult>> {
    const spec = ATTACKS[name];
    if (!spec) throw new Error(`no attack ${name}`);
    const agent = await writeAgent(root.path, `${name}-${runIds.length}`, spec.script);
    if (spec.lib) await copyFile(forgeLib, join(agent, "libforge.so"));
    const handle = run(name, { tasks: taskIds.map((id) => tasks[id] as TaskSpec), agent: { kind: "code", dir: agent }, ...options });
    await handle.done;
    expect(containersOf(handle.runId)).toEqual([]);
    return byTask(await readResultsFile(handle.runDir));
  }

  /** Not a clean pass: reward 0 (or an agent error saying tampered), or a pass flagged for audit. */
  function expectNoCleanPass(result: TrialResult | undefined, label: string): void {
    expect(result, label).toBeDefined();
    if (result?.status === "passed") expect(result.integrity?.flagged, `${label}: an unflagged pass`).toBe(true);
    else expect(result?.reward ?? 0, label).toBe(0);
  }

  beforeAll(async () => {
    root = await tempDir("proctor-grading-");
    runtime = new DockerRuntime();
    // A library whose destructor writes reward 1: loaded into the verifier's shell, it forges a pass.
    const source = join(root.path, "forge.c");
    execFileSync("sh", ["-c", `cat > "$1" <<'EOF'
#include <stdio.h>
#include <sys/stat.h>
__attribute__((destructor)) static void forge(void) {
  mkdir("/logs/verifier", 0777);
  FILE *f = fopen("/logs/verifier/reward.txt", "w");
  if (f) { fputs("1\\n", f); fclose(f); }
}
EOF`, "sh", source]);
    forgeLib = join(root.path, "libforge.so");
    execFileSync("cc", ["-shared", "-fPIC", "-o", forgeLib, source]);

    const dir = await writeTasks(join(root.path, "tasks"), { "pytest-answer": PYTEST_TASK, "pytest-cwd": PYTEST_CWD_TASK, service: SERVICE_TASK, "port-check": PORT_TASK, expected: EXPECTED_TASK, resolve: RESOLVE_TASK });
    await writeFile(join(dir, "expected", "tests", "expected.txt"), "42\n");
    const loaded = await loadTasks([dir]);
    expect(loaded.errors).toEqual([]);
    tasks = Object.fromEntries(loaded.tasks.map((t) => [t.id, t]));
    // The same answer graded by checks (term-executor style).
    tasks["checks-answer"] = inlineTask("checks-answer", join(root.path, "inline"), {
      environment: { ...loaded.tasks[0]!.environment },
      agent: { timeoutSec: 30 },
      verifier: { mode: "checks", testsDir: null, timeoutSec: 60, env: {}, isolateProcesses: true, allowChanges: [], checks: [{ name: "answer", command: 'test "$(cat /app/answer.txt 2>/dev/null)" = 42', timeoutSec: 30 }] },
      solution: { dir: join(root.path, "inline"), command: "echo 42 > /app/answer.txt" },
    });
    // A SWE-bench row: fix mul; the new test_mul must pass and test_add keep passing.
    const swe = await buildSweCalc(join(root.path, "swe"));
    const dataset = await swe.writeDataset([{ id: "calc-mul", patch: swe.patches.fixMul, testPatch: swe.patches.testMul, failToPass: ["tests/test_ops.py::test_mul"], passToPass: ["tests/test_ops.py::test_add"] }]);
    const rows = await loadTasks([dataset], { reposDir: swe.mirrors, cacheDir: join(root.path, "task-cache") });
    expect(rows.errors).toEqual([]);
    tasks["calc-mul"] = rows.tasks[0] as TaskSpec;
  }, 600_000);

  afterAll(async () => {
    removeRunContainers(runIds);
    await root?.cleanup();
  });

  test("honest agents pass, graded fresh: the oracle on every kind of task, a service its solution left running stays reachable", async () => {
    const handle = run("oracle", { tasks: Object.values(tasks), agent: { kind: "oracle" } });
    await handle.done;
    const results = byTask(await readResultsFile(handle.runDir));
    for (const id of Object.keys(tasks)) {
      expect(results[id]?.error, id).toBeNull();
      expect(results[id], id).toMatchObject({ status: "passed", reward: 1, integrity: { tampered: [], flagged: false, grading: { mode: "fresh" } } });
    }
    expect(results["calc-mul"]?.integrity?.grading).toMatchObject({ outputs: ["repository diff of /testbed"], joinedNetwork: false });
    expect(results["pytest-answer"]?.integrity).toMatchObject({ isolation: "isolated", grading: { outputs: ["/app"], why: "the tests name nothing outside /app" } });
    const service = results.service?.integrity;
    expect(service).toMatchObject({ isolation: "shared", grading: { joinedNetwork: true } });
    expect(service?.survivors.some((p) => p.command.includes("http.server") && p.ports.includes(8000)), JSON.stringify(service?.survivors)).toBe(true);
    // Each sandbox's logs come from where they were written: the verifier's from the grader.
    expect(await readFile(join(handle.runDir, "trials", "pytest-answer__1", "logs", "verifier", "reward.txt"), "utf8")).toBe("1\n");
  }, 600_000);

  test("honest agents pass with --isolate-verifier too (the service, killed by design, excepted)", async () => {
    const ids = Object.keys(tasks).filter((id) => id !== "service");
    const handle = run("oracle-strict", { tasks: ids.map((id) => tasks[id] as TaskSpec), agent: { kind: "oracle" }, isolateVerifier: true });
    await handle.done;
    const results = byTask(await readResultsFile(handle.runDir));
    for (const id of ids) expect(results[id], id).toMatchObject({ status: "passed", reward: 1, integrity: { isolation: "isolated", flagged: false } });
  }, 600_000);

  test.each(SYSTEM_ATTACKS)("%s: changes outside the outputs never reach a fresh grader (reward 0), Harbor and SWE-bench tasks alike", async (name) => {
    const ids = name === "iniconfig-atexit" || name === "replace-timeout" ? ["pytest-answer", "checks-answer"] : ["pytest-answer", "checks-answer", "calc-mul"];
    const results = await attack(name, ids);
    for (const id of ids) expect(results[id], `${name} on ${id}`).toMatchObject({ status: "failed", reward: 0, integrity: { grading: { mode: "fresh" } } });
    // With every agent process ended first the grader is the same: a few classes are enough to show it.
    if (!["site-pytest-package", "ld-so-preload", "replace-timeout"].includes(name)) return;
    const strict = await attack(name, ["pytest-answer"], { isolateVerifier: true });
    expect(strict["pytest-answer"], `${name} strict`).toMatchObject({ status: "failed", reward: 0 });
  }, 600_000);

  test.each(SYSTEM_ATTACKS)("%s in the agent's own sandbox (--grading shared): the file audit finds it (tampered, reward 0)", async (name) => {
    const results = await attack(name, ["pytest-answer"], { grading: "shared" });
    const result = results["pytest-answer"];
    expect(result, name).toMatchObject({ status: "error", reward: 0, error: { kind: "agent" }, integrity: { grading: { mode: "shared", audited: true } } });
    expect(result?.error?.message, name).toMatch(/^tampered: \//);
  }, 600_000);

  test.each(["relinked-interpreter", "shadow-via-link", "site-link-into-outputs", "link-to-unaudited-mount", "survivor-writes-tests", "binary-hostname", "proctor-home-decoy"])(
    "%s in the agent's own sandbox (--grading shared): tampered, reward 0",
    async (name) => {
      const results = await attack(name, ["pytest-answer"], { grading: "shared" });
      const result = results["pytest-answer"];
      expect(result, name).toMatchObject({ status: "error", reward: 0, error: { kind: "agent" }, integrity: { grading: { mode: "shared" } } });
      expect(result?.error?.message, name).toMatch(/^tampered: \//);
    },
    600_000,
  );

  test("honest agents pass clean in their own sandbox too: the audit finds nothing of theirs the verifier loaded", async () => {
    const ids = ["pytest-answer", "pytest-cwd", "service", "checks-answer"];
    const handle = run("oracle-shared", { tasks: ids.map((id) => tasks[id] as TaskSpec), agent: { kind: "oracle" }, grading: "shared" });
    await handle.done;
    const results = byTask(await readResultsFile(handle.runDir));
    for (const id of ids) {
      expect(results[id]?.error, id).toBeNull();
      expect(results[id], id).toMatchObject({ status: "passed", reward: 1, integrity: { flagged: false, tampered: [], grading: { mode: "shared", audited: true } } });
    }
  }, 600_000);

  test("a new module in the workdir named like one pytest imports is refused before the tests, in the fresh grader and in the agent's own sandbox", async () => {
    for (const grading of [undefined, "shared"] as const) {
      const results = await attack("cwd-module-shadow", ["pytest-answer", "pytest-cwd"], grading ? { grading } : {});
      for (const id of ["pytest-answer", "pytest-cwd"]) {
        expect(results[id], `${id} ${grading ?? "fresh"}`).toMatchObject({ status: "error", reward: 0, error: { kind: "agent" } });
        expect(results[id]?.error?.message).toMatch(/^tampered: \/app\/pluggy\.py \(a new module named like pluggy, which the tests' Python imports from elsewhere\)/);
      }
    }
  }, 600_000);

  test.each(["workdir-pytest-ini", "workdir-conftest"])("%s: a test-runner file in the outputs is an agent error 'tampered', reward 0", async (name) => {
    const results = await attack(name, ["pytest-cwd", "calc-mul"]);
    for (const id of ["pytest-cwd", "calc-mul"]) {
      expect(results[id], `${name} on ${id}`).toMatchObject({ status: "error", reward: 0, error: { kind: "agent" } });
      expect(results[id]?.error?.message).toMatch(/^tampered: \/(app|testbed)\/(pytest\.ini|conftest\.py)/);
    }
  }, 600_000);

  test("SWE-bench: a diff adding tests/pytest.ini or pytest.py is tampered; a repository module patching pytest's reports passes only flagged", async () => {
    for (const name of ["subdir-pytest-ini", "cwd-pytest-module"]) {
      const results = await attack(name, ["calc-mul"]);
      expect(results["calc-mul"], name).toMatchObject({ status: "error", reward: 0, error: { kind: "agent" } });
      expect(results["calc-mul"]?.error?.message, name).toMatch(/^tampered: \/testbed\/(tests\/pytest\.ini|pytest\.py)/);
    }
    const results = await attack("repo-patches-pytest", ["calc-mul"]);
    expectNoCleanPass(results["calc-mul"], "repo-patches-pytest");
    expect(results["calc-mul"]?.integrity?.flags?.join(" ")).toMatch(/calc\/__init__\.py imports the test runner/);
  }, 600_000);

  test.each(["swe-dot-pytest-ini", "swe-pyproject-dotted-key", "swe-setupcfg-cr-newline", "swe-tests-package-init", "swe-dist-info-entry-point", "swe-atexit-summary-line", "cwd-module-shadow"])(
    "SWE-bench: %s (a diff steering the repository's test run) gets no clean pass",
    async (name) => {
      const results = await attack(name, ["calc-mul"]);
      expectNoCleanPass(results["calc-mul"], name);
      expect(results["calc-mul"]?.error?.kind ?? "none", name).not.toBe("infra");
    },
    600_000,
  );

  test("SWE-bench: a new top-level module named like one Python already imports is refused, an extension module too", async () => {
    for (const name of ["cwd-module-shadow", "swe-extension-module-shadow"]) {
      const results = await attack(name, ["calc-mul"]);
      expect(results["calc-mul"], name).toMatchObject({ status: "error", reward: 0, error: { kind: "agent" } });
      expect(results["calc-mul"]?.error?.message, name).toMatch(/^tampered: \/testbed\/pluggy\.(py|cpython-311-x86_64-linux-gnu\.so) \(a new module named like pluggy/);
    }
  }, 600_000);

  test("an agent that makes its own sandbox unusable for the verifier (/logs a file) gets an agent error, graded shared or restarted for strict isolation", async () => {
    for (const options of [{ grading: "shared" }, { grading: "shared", isolateVerifier: true }] as const) {
      const results = await attack("logs-is-a-file", ["pytest-answer"], options);
      expect(results["pytest-answer"], JSON.stringify(options)).toMatchObject({ status: "error", error: { kind: "agent" } });
      expect(results["pytest-answer"]?.reward ?? 0).toBe(0);
    }
  }, 600_000);

  test("SWE-bench: a nested git repository left in the workdir is graded (a fail, not an infrastructure error)", async () => {
    const results = await attack("swe-nested-git", ["calc-mul"]);
    expect(results["calc-mul"]).toMatchObject({ status: "failed", reward: 0, error: null });
  }, 600_000);

  test("an output linking to the tests' reference answer is refused, in the fresh grader and in the agent's own sandbox", async () => {
    for (const name of ["link-to-expected", "link-to-expected-via-root"]) {
      for (const grading of [undefined, "shared"] as const) {
        const results = await attack(name, ["expected"], grading ? { grading } : {});
        expect(results.expected, `${name} ${grading ?? "fresh"}`).toMatchObject({ status: "error", reward: 0, error: { kind: "agent" } });
        expect(results.expected?.error?.message, `${name} ${grading ?? "fresh"}`).toMatch(/^tampered: \/app\/answer\.txt.*a link to \/tests\/expected\.txt/);
      }
    }
  }, 600_000);

  test("a grader joined to the network of the agent's leftover processes resolves names as the sandbox started, not with the agent's /etc/hosts and resolv.conf", async () => {
    const results = await attack("redirect-names", ["resolve"]);
    expect(results.resolve).toMatchObject({ status: "passed", reward: 1, integrity: { flagged: false, grading: { mode: "fresh", joinedNetwork: true } } });
  }, 600_000);

  test("a verifier error caused while the agent's processes live is the agent's error (it stays in the scored trials)", async () => {
    const results = await attack("port-squatter", ["port-check"]);
    expect(results["port-check"]).toMatchObject({ status: "error", reward: null, error: { kind: "agent" } });
    expect(results["port-check"]?.error?.message).toMatch(/agent process\(es\) alive during verification/);
  }, 600_000);

  test("a solution that installs a Debian package the tests run: graded fresh it fails and the result says what was left out; a task asking for shared grading passes clean", async () => {
    const apt = (grading: string): FixtureTask => ({
      toml: `[agent]\ntimeout_sec = 300\n[verifier]\ntimeout_sec = 60\n${grading}[environment]\nallow_internet = true\n`,
      instruction: "Install jq.",
      test: "mkdir -p /logs/verifier; if echo '{\"a\": 42}' | jq -e '.a == 42' >/dev/null; then echo 1; else echo 0; fi > /logs/verifier/reward.txt",
      solve: "export DEBIAN_FRONTEND=noninteractive; apt-get update -qq && apt-get install -y -qq --no-install-recommends jq >/dev/null",
    });
    const dir = await writeTasks(join(root.path, "apt-tasks"), { "apt-fresh": apt(""), "apt-shared": apt('grading = "shared"\n') });
    const loaded = await loadTasks([dir]);
    const handle = run("apt", { tasks: loaded.tasks, agent: { kind: "oracle" } });
    await handle.done;
    const results = byTask(await readResultsFile(handle.runDir));
    expect(results["apt-fresh"]).toMatchObject({ status: "failed", reward: 0, integrity: { grading: { mode: "fresh" } } });
    expect(results["apt-fresh"]?.integrity?.note).toMatch(/^graded with only \/app: the agent also changed .*\/usr\/bin\/jq.*declare them in \[verifier\] outputs or set \[verifier\] grading = "shared"/);
    // apt-get changed the loader cache and dpkg's state too: neither is held against it.
    expect(results["apt-shared"]?.error).toBeNull();
    expect(results["apt-shared"]).toMatchObject({ status: "passed", reward: 1, integrity: { flagged: false, tampered: [], grading: { mode: "shared", audited: true } } });
  }, 600_000);

  test("an agent killed by the OOM killer is an agent error that says 'out of memory'", async () => {
    const agent = await writeAgent(root.path, "hog", "python3 -c 'x = bytearray(1024 * 1024 * 1024)'; echo survived");
    const base = tasks["pytest-answer"] as TaskSpec;
    const small = { ...base, environment: { ...base.environment, memoryMb: 64 } };
    const handle = run("hog", { tasks: [small], agent: { kind: "code", dir: agent } });
    await handle.done;
    const [result] = await readResultsFile(handle.runDir);
    expect(result).toMatchObject({ status: "error", error: { kind: "agent" } });
    expect(result?.error?.message).toMatch(/^out of memory: .* 64 MB/);
  }, 300_000);

  test("a sandbox writing past its storage limit has its agent stopped with an agent error", async () => {
    const agent = await writeAgent(root.path, "filler", "for i in $(seq 1 40); do head -c 10000000 /dev/urandom > /app/fill-$i; sleep 0.5; done");
    const base = tasks["pytest-answer"] as TaskSpec;
    const handle = run("filler", { tasks: [{ ...base, environment: { ...base.environment, storageMb: 50 } }], agent: { kind: "code", dir: agent } });
    await handle.done;
    const [result] = await readResultsFile(handle.runDir);
    expect(result).toMatchObject({ status: "error", error: { kind: "agent" } });
    expect(result?.error?.message).toMatch(/^disk limit exceeded: the sandbox wrote \d+ MB, above its 50 MB limit/);
  }, 300_000);

  test("a 3 GB sparse file in /logs/agent is collected only up to the run's log limit", async () => {
    const agent = await writeAgent(root.path, "sparse", "truncate -s 3G /logs/agent/huge.log; echo 42 > /app/answer.txt");
    const handle = run("sparse", { tasks: [tasks["pytest-answer"] as TaskSpec], agent: { kind: "code", dir: agent }, limits: { logBytes: 5 * 1024 * 1024 } });
    await handle.done;
    const [result] = await readResultsFile(handle.runDir);
    expect(result).toMatchObject({ status: "passed", reward: 1 });
    const trial = join(handle.runDir, "trials", "pytest-answer__1");
    expect((await stat(join(trial, "logs", "agent", "huge.log"))).size).toBeLessThanOrEqual(5 * 1024 * 1024);
    expect(await readFile(join(trial, "logs", "agent.TRUNCATED"), "utf8")).toBe(
      "/logs/agent went past the 5242880 byte cap on collected logs (limits.logBytes): /logs/agent/huge.log was cut and nothing after it copied\n",
    );
    await expect(stat(join(trial, "logs", "verifier.TRUNCATED"))).rejects.toThrow(/ENOENT/);
    expect(await readFile(join(trial, "verifier", "reward.txt"), "utf8")).toBe("1\n");
  }, 300_000);
});
