import { execFileSync } from "node:child_process";
import { mkdir, readFile, readdir, stat, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { describe, expect, test } from "vitest";
import { must, script, tempDir, writeTree, type FileSpec } from "../test/fixtures";
import { loadTb1Task, TB1_SOLUTION_COMMAND } from "./tb1";

const TASK_YAML = `
descriptions:
  - key: hard
    description: Do it the hard way.
  - key: base
    description: |
      Create /app/done.txt containing "ok".
author_email: ada@example.com
difficulty: medium
category: file-operations
tags: [files, bash]
parser_name: pytest
max_agent_timeout_sec: 180
max_test_timeout_sec: 30
run_tests_in_same_shell: false
`;

const RUN_TESTS = `#!/bin/bash
# TB1 convention: tests live at $TEST_DIR
test -f "$TEST_DIR/expected.txt" || { echo "expected.txt not uploaded"; exit 2; }
[ "$(cat done.txt 2>/dev/null)" = "$(cat "$TEST_DIR/expected.txt")" ]
`;

async function tb1(files: Record<string, FileSpec>, name = "tb1-task") {
  const root = await tempDir();
  const dir = join(root, name);
  await writeTree(dir, files);
  const cacheDir = join(root, "cache");
  return { dir, cacheDir, ...(await loadTb1Task(dir, { cacheDir })) };
}

const baseFiles = {
  "task.yaml": TASK_YAML,
  "Dockerfile": "FROM proctor/base:bookworm\nWORKDIR /app\n",
  "run-tests.sh": script(RUN_TESTS),
  "tests/expected.txt": "ok",
  "tests/test_outputs.py": "def test_x(): pass\n",
  "solution.sh": script("echo ok > done.txt\n"),
};

describe("loadTb1Task", () => {
  test("leaves tests, run-tests.sh, solution.sh and task.yaml out of the build unless the Dockerfile copies them", async () => {
    const excluded = async (dockerfile: string) => {
      const { task, errors } = await tb1({ ...baseFiles, Dockerfile: dockerfile, "app.py": "print()\n" });
      expect(errors).toEqual([]);
      return must(task).environment.buildContextExclude ?? [];
    };
    const all = ["run-tests.sh", "solution.sh", "task.yaml", "tests"];
    expect(await excluded("FROM proctor/base:bookworm\nWORKDIR /app\n")).toEqual(all);
    expect(await excluded("FROM proctor/base:bookworm\nCOPY app.py /app/\nRUN python3 /app/app.py\n")).toEqual(all);
    expect(await excluded("FROM proctor/base:bookworm\nCOPY --from=builder /out /app\n")).toEqual(all);
    // The whole context, a variable or the context root: everything stays.
    expect(await excluded("FROM proctor/base:bookworm\nCOPY . /app\n")).toEqual([]);
    expect(await excluded("FROM proctor/base:bookworm\nCOPY ./ /app/\n")).toEqual([]);
    expect(await excluded("FROM proctor/base:bookworm\nARG SRC=.\nCOPY $SRC /app\n")).toEqual([]);
    // A named source or a glob keeps what it reaches (JSON form, flags and continued lines too).
    expect(await excluded('FROM proctor/base:bookworm\nCOPY ["tests", "/opt/tests"]\n')).toEqual(["run-tests.sh", "solution.sh", "task.yaml"]);
    expect(await excluded("FROM proctor/base:bookworm\nADD --chown=1000 \\\n  *.sh /opt/\n")).toEqual(["task.yaml", "tests"]);
    expect(await excluded("FROM proctor/base:bookworm\nCOPY ./tests/data.txt task.yaml /opt/\n")).toEqual(["run-tests.sh", "solution.sh"]);
  });

  test("a compose build context other than the task root is left as it is", async () => {
    const { task, errors } = await tb1({
      ...baseFiles,
      "docker-compose.yaml": "services:\n  client:\n    build:\n      context: ./env\n",
      "env/Dockerfile": "FROM proctor/base:bookworm\n",
    });
    expect(errors).toEqual([]);
    expect(must(task).environment.buildContextExclude).toBeUndefined();
  });

  test("maps task.yaml, Dockerfile, run-tests.sh, tests/ and solution.sh", async () => {
    const { dir, task, errors } = await tb1(baseFiles);
    expect(errors).toEqual([]);
    expect(task).toMatchObject({
      id: "tb1-task",
      format: "tb1",
      sourcePath: dir,
      instruction: 'Create /app/done.txt containing "ok".\n',
      category: "file-operations",
      difficulty: "medium",
      tags: ["files", "bash"],
      environment: { dockerImage: null, buildContext: dir, allowInternet: true, workdir: null },
      agent: { timeoutSec: 180 },
      verifier: { mode: "reward-file", timeoutSec: 30 },
      workspace: null,
      extra: { author_email: "ada@example.com", parser_name: "pytest", run_tests_in_same_shell: false },
    });
    // The prepared tests dir holds tests/ plus run-tests.sh (executable), nothing else.
    const testsDir = must(task?.verifier.testsDir);
    expect((await readdir(testsDir)).sort()).toEqual(["expected.txt", "run-tests.sh", "test_outputs.py"]);
    expect((await stat(join(testsDir, "run-tests.sh"))).mode & 0o111).not.toBe(0);
    const solution = must(task?.solution);
    expect(solution.command).toBe(TB1_SOLUTION_COMMAND);
    expect(await readFile(join(solution.dir, "solution.sh"), "utf8")).toBe("echo ok > done.txt\n");
  });

  test("the verifier command turns run-tests.sh's exit code into reward.txt (1 on exit 0, else 0)", async () => {
    const loaded = await tb1(baseFiles);
    const { cacheDir } = loaded;
    const task = must(loaded.task);
    if (task.verifier.mode !== "reward-file") throw new Error("expected a reward-file verifier");
    const { command, testsDir } = task.verifier;
    const work = join(cacheDir, "..", "work");
    const logs = join(cacheDir, "..", "logs");
    await mkdir(work, { recursive: true });
    const verify = async () => {
      execFileSync("bash", ["-c", command], {
        cwd: work,
        env: { ...process.env, PROCTOR_TESTS_DIR: must(testsDir), PROCTOR_LOGS_DIR: logs },
      });
      return readFile(join(logs, "verifier", "reward.txt"), "utf8");
    };
    expect(await verify()).toBe("0\n");
    await writeFile(join(work, "done.txt"), "ok");
    expect(await verify()).toBe("1\n");
  });

  test("defaults: TB1's 360 s agent and 60 s test timeouts; `instruction` wins over descriptions", async () => {
    const { task, errors } = await tb1({ "task.yaml": "instruction: Say hi.\n", "run-tests.sh": script("true\n") });
    expect(errors).toEqual([]);
    expect(task).toMatchObject({ instruction: "Say hi.", agent: { timeoutSec: 360 }, verifier: { timeoutSec: 60 }, solution: null });
    expect(task?.environment.buildContext).toBeNull();
  });

  test("a tests dir change gives a new prepared dir; the old content is not reused", async () => {
    const first = await tb1(baseFiles);
    await writeFile(join(first.dir, "tests", "expected.txt"), "changed");
    const again = await loadTb1Task(first.dir, { cacheDir: first.cacheDir });
    const againDir = must(again.task?.verifier.testsDir);
    expect(againDir).not.toBe(first.task?.verifier.testsDir);
    expect(await readFile(join(againDir, "expected.txt"), "utf8")).toBe("changed");
    const same = await loadTb1Task(first.dir, { cacheDir: first.cacheDir });
    expect(same.task?.verifier.testsDir).toBe(againDir);
  });

  test("problems: missing run-tests.sh, bad timeout, no instruction", async () => {
    const { dir, task, errors } = await tb1({ "task.yaml": "max_agent_timeout_sec: soon\ntags: [a, 1]\n" });
    expect(task).toBeNull();
    const file = join(dir, "task.yaml");
    expect(errors.map((e) => e.message)).toEqual([
      `${file}: instruction is missing: give instruction (or descriptions[0].description) with what the agent is told`,
      `${file}: tags must be a list of strings, got ["a",1]`,
      `${file}: max_agent_timeout_sec must be a positive number, got "soon"`,
      `${dir}: run-tests.sh is missing: a Terminal-Bench 1 task is verified by run-tests.sh exiting 0`,
    ]);
  });

  test("a dir with run-tests.sh but no task.yaml says task.yaml is missing (and nothing else)", async () => {
    const { dir, errors } = await tb1({ "run-tests.sh": "true\n" });
    expect(errors.map((e) => e.message)).toEqual([`${dir}: task.yaml is missing: a Terminal-Bench 1 task needs task.yaml (instruction, timeouts)`]);
  });

  test("solution.yaml is reported as unsupported and the task is not loaded", async () => {
    const { dir, task, errors } = await tb1({ "task.yaml": "instruction: x\n", "run-tests.sh": "true\n", "solution.yaml": "- command: ls\n" });
    expect(task).toBeNull();
    expect(errors).toHaveLength(1);
    expect(errors[0]).toMatchObject({ name: "UnsupportedTaskError", file: join(dir, "solution.yaml") });
    expect(errors[0]?.message).toContain("solution.yaml (a list of terminal keystrokes) is not supported; convert it to a solution.sh script");
  });

  test("docker-compose: a single service's build context is used; several services are unsupported", async () => {
    const single = await tb1({
      "task.yaml": "instruction: x\n",
      "run-tests.sh": "true\n",
      "docker-compose.yaml": "services:\n  client:\n    build:\n      context: ./env\n    image: ${T_BENCH_TASK_DOCKER_CLIENT_IMAGE_NAME}\n",
      "env/Dockerfile": "FROM proctor/base:bookworm\n",
    });
    expect(single.errors).toEqual([]);
    expect(single.task?.environment).toMatchObject({ buildContext: join(single.dir, "env"), dockerImage: null });

    const multi = await tb1({
      "task.yaml": "instruction: x\n",
      "run-tests.sh": "true\n",
      "Dockerfile": "FROM x\n",
      "docker-compose.yaml": "services:\n  client:\n    build: .\n  db:\n    image: postgres\n",
    });
    expect(multi.task).toBeNull();
    expect(multi.errors.map((e) => e.message)).toEqual([
      `${join(multi.dir, "docker-compose.yaml")}: declares 2 services (client, db); only single-container tasks are supported`,
    ]);
  });

  test("invalid YAML says which line", async () => {
    const { dir, errors } = await tb1({ "task.yaml": "instruction: x\ntags: [a\n", "run-tests.sh": "true\n" });
    expect(errors[0]?.message).toMatch(new RegExp(`^${join(dir, "task.yaml")}: is not valid YAML \\(line \\d+\\)`));
  });
});
