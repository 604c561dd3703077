import { writeFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import { describe, expect, test } from "vitest";
import { nativeFiles, script, tempDir, writeTree } from "../test/fixtures";
import { loadTasks } from "./sources";

/** A dir of task dirs: native a-one, a-two, b-one; TB1 tb-one. */
async function taskSet() {
  const root = await tempDir();
  const set = join(root, "set");
  for (const id of ["b-one", "a-two", "a-one"]) await writeTree(join(set, id), nativeFiles());
  await writeTree(join(set, "tb-one"), { "task.yaml": "instruction: hi\n", "run-tests.sh": script("true\n") });
  return { root, set, cacheDir: join(root, "cache") };
}

describe("loadTasks", () => {
  test("a dir of task dirs: native and TB1 detected, sorted by id", async () => {
    const { set, cacheDir } = await taskSet();
    const { tasks, errors } = await loadTasks([set], { cacheDir });
    expect(errors).toEqual([]);
    expect(tasks.map((t) => [t.id, t.format])).toEqual([
      ["a-one", "native"],
      ["a-two", "native"],
      ["b-one", "native"],
      ["tb-one", "tb1"],
    ]);
  });

  test("a single task dir, a term-executor root and a dir of tasks together", async () => {
    const { root, set, cacheDir } = await taskSet();
    await writeTree(join(root, "te"), {
      "tasks/te-task/workspace.yaml": "repo: o/r\nbase_commit: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n",
      "tasks/te-task/prompt.md": "x\n",
      "tasks/te-task/checks.txt": "true\n",
    });
    const { tasks, errors } = await loadTasks([join(set, "a-one"), join(root, "te")], { cacheDir });
    expect(errors).toEqual([]);
    expect(tasks.map((t) => [t.id, t.format])).toEqual([
      ["a-one", "native"],
      ["te-task", "term-executor"],
    ]);
  });

  test("the repository's example tasks load", async () => {
    const { tasks, errors } = await loadTasks([resolve(__dirname, "../../../examples/tasks")]);
    expect(errors).toEqual([]);
    expect(tasks.length).toBeGreaterThanOrEqual(4);
    expect(tasks.every((t) => t.format === "native" && t.solution !== null)).toBe(true);
  });

  test("include globs (any match) and exclude globs (exclude wins)", async () => {
    const { set, cacheDir } = await taskSet();
    const ids = async (include?: string[], exclude?: string[]) => (await loadTasks([set], { cacheDir, include, exclude })).tasks.map((t) => t.id);
    expect(await ids(["a-*"])).toEqual(["a-one", "a-two"]);
    expect(await ids(["a-*", "tb-*"])).toEqual(["a-one", "a-two", "tb-one"]);
    expect(await ids(undefined, ["*-one"])).toEqual(["a-two"]);
    expect(await ids(["a-*"], ["a-two"])).toEqual(["a-one"]);
  });

  test("tasks file: ids with comments and blank lines; an unknown id names file and line", async () => {
    const { root, set, cacheDir } = await taskSet();
    const file = join(root, "tasks.txt");
    await writeFile(file, "# smoke set\n\na-two\n  tb-one   # the TB1 one\nnope\n");
    const { tasks, errors } = await loadTasks([set], { cacheDir, tasksFile: file, exclude: ["tb-*"] });
    expect(tasks.map((t) => t.id)).toEqual(["a-two"]);
    expect(errors.map((e) => e.message)).toEqual([`${file}:5: task id "nope" is not in any source`]);
  });

  test("duplicate ids across sources are an error and neither copy is run", async () => {
    const { root, set, cacheDir } = await taskSet();
    await writeTree(join(root, "other", "a-one"), nativeFiles());
    const { tasks, errors } = await loadTasks([set, join(root, "other")], { cacheDir });
    expect(tasks.map((t) => t.id)).toEqual(["a-two", "b-one", "tb-one"]);
    expect(errors.map((e) => e.message)).toEqual([
      `${join(root, "other", "a-one")}: task id "a-one" is also loaded from ${join(set, "a-one")}: task ids must be unique across sources`,
    ]);
  });

  test("a broken task is reported while the others load", async () => {
    const { set, cacheDir } = await taskSet();
    await writeTree(join(set, "c-broken"), { "task.toml": "[agent]\ntimeout_sec = 0\n", "instruction.md": "x" });
    const { tasks, errors } = await loadTasks([set], { cacheDir });
    expect(tasks).toHaveLength(4);
    expect(errors.map((e) => e.detail)).toEqual([
      "[agent].timeout_sec must be a positive number, got 0",
      "tests/test.sh is missing: a native task is verified by tests/test.sh writing /logs/verifier/reward.txt",
    ]);
  });

  test("bad .jsonl rows, archives, missing paths and empty dirs give clear errors", async () => {
    const root = await tempDir();
    await writeTree(root, { "data.jsonl": "{}\n", "batch.tar.gz": "x", "empty/readme.txt": "" });
    const { tasks, errors } = await loadTasks([join(root, "data.jsonl"), join(root, "batch.tar.gz"), join(root, "missing"), join(root, "empty")]);
    expect(tasks).toEqual([]);
    // A .jsonl is a SWE-bench dataset: its bad row is reported field by field (swebench.test.ts has the rest).
    expect(errors[0]?.message).toBe(`${join(root, "data.jsonl")}:1: instance_id is missing`);
    expect(errors.map((e) => [e.name, e.message]).filter(([, m]) => !m?.includes("data.jsonl"))).toEqual([
      ["UnsupportedTaskError", `${join(root, "batch.tar.gz")}: archives are not supported as a task source yet: extract it and give the directory`],
      ["TaskLoadError", `${join(root, "missing")}: does not exist: give a task directory, a directory of tasks, or a term-executor archive directory`],
      [
        "TaskLoadError",
        `${join(root, "empty")}: holds no tasks: expected a task directory (task.toml/instruction.md or task.yaml), a directory of them, or tasks/<id>/workspace.yaml`,
      ],
    ]);
  });
});
