import { execFileSync } from "node:child_process";
import { cp, mkdir, readFile } from "node:fs/promises";
import { join } from "node:path";
import { silentLogger, type Logger } from "@proctor/schema";
import { describe, expect, test } from "vitest";
import { must, script, tempDir, writeTree, type FileSpec } from "../test/fixtures";
import { loadTermExecutorTask, TERM_EXECUTOR_SOLUTION_COMMAND } from "./term-executor";
import { loadTermExecutorArchive } from "./submission";

const WORKSPACE = `
repo: psf/requests
version: 3.10
base_commit: 1234e56000000000000000000000000000000000
language: python
install:
  - pip install -e .
agent_timeout_sec: 900
test_timeout_sec: 120
install_timeout_sec: 300
difficulty: hard
difficulty_score: 3
install_config:
  python: "3.11"
`;

function archiveFiles(prefix = ""): Record<string, FileSpec> {
  return {
    [`${prefix}agent_code/agent.py`]: "print('hi')\n",
    [`${prefix}tasks/fix-bug/workspace.yaml`]: WORKSPACE,
    [`${prefix}tasks/fix-bug/prompt.md`]: "Fix the bug.\n",
    [`${prefix}tasks/fix-bug/tests/test_fix.sh`]: script("test -f fixed.txt\n"),
    [`${prefix}tasks/fix-bug/tests/unit/more checks.sh`]: script("grep -q ok fixed.txt\n"),
    [`${prefix}tasks/fix-bug/tests/unit/test_data.py`]: "DATA = 1\n",
    [`${prefix}tasks/from-checks/workspace.yaml`]: "repo: https://example.com/r.git\nbase_commit: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n",
    [`${prefix}tasks/from-checks/prompt.md`]: "Do it.\n",
    [`${prefix}tasks/from-checks/checks.txt`]: "# comment\n\npytest -q tests/test_a.py\n  cargo test  \n",
    [`${prefix}tasks/from-f2p/workspace.yaml`]:
      "repo: https://example.com/r.git\nbase_commit: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\nfail_to_pass:\n  - pytest t/test_fix.py\npass_to_pass:\n  - pytest t/test_ok.py\npatch: |\n  diff --git a/x b/x\ninstall_config:\n  install: pip install .\n",
    [`${prefix}tasks/from-f2p/prompt.md`]: "Fix.\n",
  };
}

async function archive(files: Record<string, FileSpec>) {
  const root = await tempDir();
  await writeTree(join(root, "archive"), files);
  return { root: join(root, "archive"), cacheDir: join(root, "cache") };
}

describe("loadTermExecutorArchive", () => {
  test.each([
    ["at the root", ""],
    ["one directory down", "submission-1/"],
  ])("loads tasks/ and agent_code/ %s", async (_label, prefix) => {
    const { root, cacheDir } = await archive(archiveFiles(prefix));
    const { tasks, agentDir, errors } = await loadTermExecutorArchive(root, { cacheDir });
    expect(errors).toEqual([]);
    expect(agentDir).toBe(join(root, prefix, "agent_code"));
    expect(tasks.map((t) => t.id)).toEqual(["fix-bug", "from-checks", "from-f2p"]);

    const [fixBug, fromChecks, fromF2p] = tasks;
    const taskDir = join(root, prefix, "tasks", "fix-bug");
    expect(fixBug).toMatchObject({
      format: "term-executor",
      sourcePath: taskDir,
      instruction: "Fix the bug.\n",
      difficulty: "hard",
      agent: { timeoutSec: 900 },
      environment: { allowInternet: false, dockerImage: null },
      // Numbers-looking strings are kept as written: a sha like 1234e56000000000000000000000000000000000 must not become 1.234e59.
      workspace: { repo: "https://github.com/psf/requests", baseCommit: "1234e56000000000000000000000000000000000", version: "3.10", language: "python", install: ["pip install -e ."], installTimeoutSec: 300 },
      verifier: {
        mode: "checks",
        testsDir: join(taskDir, "tests"),
        timeoutSec: 240,
        checks: [
          { name: "test_fix.sh", command: 'bash "$PROCTOR_WORKDIR"/test_fix.sh', timeoutSec: 120 },
          { name: "unit/more checks.sh", command: `bash "$PROCTOR_WORKDIR"/'unit/more checks.sh'`, timeoutSec: 120 },
        ],
      },
      extra: { difficulty_score: 3, install_config: { python: "3.11" } },
    });
    expect(fromChecks).toMatchObject({
      verifier: {
        testsDir: null,
        timeoutSec: 600,
        checks: [
          { name: "check_2.sh", command: "set -e\npytest -q tests/test_a.py", timeoutSec: 300 },
          { name: "check_3.sh", command: "set -e\ncargo test", timeoutSec: 300 },
        ],
      },
      agent: { timeoutSec: 600 },
    });
    expect(fromF2p).toMatchObject({
      workspace: { install: ["pip install ."] },
      verifier: {
        checks: [
          { name: "fail_to_pass_0.sh", command: "set -e\npytest t/test_fix.py" },
          { name: "pass_to_pass_1.sh", command: "set -e\npytest t/test_ok.py" },
        ],
      },
      solution: { command: TERM_EXECUTOR_SOLUTION_COMMAND },
    });
    expect(await readFile(join(must(fromF2p?.solution).dir, "solution.patch"), "utf8")).toBe("diff --git a/x b/x\n");
  });

  test("checks run from the repo root once the tests/ files are written into it: pass when the work is done, fail otherwise", async () => {
    const { root, cacheDir } = await archive(archiveFiles());
    const { tasks } = await loadTermExecutorArchive(root, { cacheDir });
    const task = must(tasks[0]);
    if (task.verifier.mode !== "checks") throw new Error("expected checks");
    const { checks, testsDir } = task.verifier;
    const work = join(cacheDir, "..", "work");
    await mkdir(work, { recursive: true });
    await cp(must(testsDir), work, { recursive: true });
    const exitCodes = () =>
      checks.map((check) => {
        try {
          execFileSync("bash", ["-c", check.command], { cwd: work, stdio: "ignore", env: { ...process.env, PROCTOR_WORKDIR: work } });
          return 0;
        } catch (error) {
          return (error as { status: number }).status;
        }
      });
    expect(exitCodes()).toEqual([1, 2]);
    await writeTree(work, { "fixed.txt": "ok\n" });
    expect(exitCodes()).toEqual([0, 0]);
  });

  test("a task that fails to parse is reported, the others still load", async () => {
    const { root, cacheDir } = await archive({
      ...archiveFiles(),
      "tasks/broken/workspace.yaml": "repo: [not, a, string]\n",
      "tasks/broken/prompt.md": "x\n",
      "tasks/broken/checks.txt": "true\n",
      "tasks/no-yaml/prompt.md": "x\n",
      "tasks/no-yaml/checks.txt": "true\n",
    });
    const { tasks, errors } = await loadTermExecutorArchive(root, { cacheDir });
    expect(tasks.map((t) => t.id)).toEqual(["fix-bug", "from-checks", "from-f2p"]);
    expect(errors.map((e) => e.message)).toEqual([
      `${join(root, "tasks/broken/workspace.yaml")}: repo must be a non-empty string, got ["not","a","string"]`,
      `${join(root, "tasks/broken/workspace.yaml")}: base_commit is missing: give the commit to check out so every trial starts from the same code`,
      `${join(root, "tasks/no-yaml")}: workspace.yaml is missing: a term-executor task needs workspace.yaml (repo, base_commit, install)`,
    ]);
    expect(errors.map((e) => e.taskId)).toEqual(["broken", "broken", "no-yaml"]);
  });

  test("zero checks is an error, not a pass", async () => {
    const { root, cacheDir } = await archive({
      "tasks/empty/workspace.yaml": "repo: o/r\nbase_commit: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n",
      "tasks/empty/prompt.md": "x\n",
      "tasks/empty/checks.txt": "# nothing here\n\n",
      "tasks/empty/tests/data.json": "{}",
    });
    const { tasks, errors, agentDir } = await loadTermExecutorArchive(root, { cacheDir });
    expect(tasks).toEqual([]);
    expect(agentDir).toBeNull();
    expect(errors.map((e) => e.message)).toEqual([
      `${join(root, "tasks/empty")}: has no checks: add tests/*.sh scripts, a checks.txt, or fail_to_pass/pass_to_pass in workspace.yaml (a task without checks cannot pass)`,
    ]);
  });

  test("a task directory whose name is not a safe id is an error", async () => {
    const { root, cacheDir } = await archive({
      "tasks/has space/workspace.yaml": "repo: o/r\nbase_commit: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n",
      "tasks/has space/prompt.md": "x\n",
      "tasks/has space/checks.txt": "true\n",
    });
    const { tasks, errors } = await loadTermExecutorArchive(root, { cacheDir });
    expect(tasks).toEqual([]);
    expect(errors.map((e) => e.message)).toEqual([
      `${join(root, "tasks/has space")}: directory name "has space" is not a valid task id: use 1-128 of [A-Za-z0-9._-], starting with a letter or digit`,
    ]);
  });

  test("a layout without tasks/ or agent_code/ is reported", async () => {
    const { root } = await archive({ "readme.txt": "hi" });
    const result = await loadTermExecutorArchive(root);
    expect(result.errors.map((e) => e.message)).toEqual([`${root}: has no tasks/ or agent_code/ directory, at its root or one directory down`]);
  });

  test("tests/*.sh take precedence over checks.txt, with a warning", async () => {
    const { root, cacheDir } = await archive({
      "tasks/t/workspace.yaml": "repo: o/r\nbase_commit: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n",
      "tasks/t/prompt.md": "x\n",
      "tasks/t/checks.txt": "false\n",
      "tasks/t/tests/a.sh": "true\n",
    });
    const warnings: string[] = [];
    const logger: Logger = { ...silentLogger, warn: (m) => void warnings.push(m) };
    const { task } = await loadTermExecutorTask(join(root, "tasks/t"), { cacheDir, logger });
    expect(task?.verifier.mode === "checks" && task.verifier.checks.map((c) => c.command)).toEqual(['bash "$PROCTOR_WORKDIR"/a.sh']);
    expect(warnings).toEqual(["checks.txt ignored: tests/*.sh scripts take precedence"]);
  });

  test("allowLocalRepos: false refuses a local repository path", async () => {
    const { root } = await archive({
      "tasks/t/workspace.yaml": "repo: /srv/private-repo\nbase_commit: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n",
      "tasks/t/prompt.md": "x\n",
      "tasks/t/checks.txt": "true\n",
    });
    expect((await loadTermExecutorTask(join(root, "tasks/t"))).errors).toEqual([]);
    const { errors } = await loadTermExecutorTask(join(root, "tasks/t"), { allowLocalRepos: false });
    expect(errors.map((e) => e.detail)).toEqual(['repo must be an http(s), ssh or git@ URL here, got "/srv/private-repo": local repositories are refused unless the server runs with --allow-local-repos']);
  });

  test("base_commit must be a full commit id: an option-looking or abbreviated one is a load error naming the file and field", async () => {
    for (const bad of ["--upload-pack=touch /tmp/x", "main", "1234e56"]) {
      const root = await tempDir();
      await writeTree(root, {
        "tasks/t/workspace.yaml": `repo: https://example.com/r.git\nbase_commit: "${bad}"\n`,
        "tasks/t/prompt.md": "Fix it.\n",
        "tasks/t/checks.txt": "true\n",
      });
      const { errors } = await loadTermExecutorTask(join(root, "tasks/t"));
      expect(errors.map((e) => e.message).join("\n")).toMatch(/workspace\.yaml: base_commit must be a full commit id/);
    }
  });
});
