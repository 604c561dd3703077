import { describe, expect, test } from "vitest";
import { join } from "node:path";
import { nativeFiles, script, tempDir, writeTree } from "../test/fixtures";
import { isTermExecutorRoot, loadTermExecutorArchive } from "./submission";

describe("submission archives: tasks/ in any task format beside agent_code/", () => {
  test("Harbor / Terminal-Bench 2 task directories load beside a term-executor task; a dir of no known format is named with what a task holds", async () => {
    const root = await tempDir();
    await writeTree(root, {
      ...Object.fromEntries(Object.entries(nativeFiles()).map(([p, f]) => [`tasks/harbor-task/${p}`, f])),
      "tasks/harbor-task/task.toml": 'version = "1.0"\n[agent]\ntimeout_sec = 60\n',
      "tasks/te-task/workspace.yaml": "repo: https://github.com/psf/requests\nbase_commit: 1234e56000000000000000000000000000000000\n",
      "tasks/te-task/prompt.md": "Fix it.\n",
      "tasks/te-task/tests/run.sh": script("true\n"),
      "tasks/stray/notes.txt": "not a task\n",
      "agent_code/run.sh": script("#!/bin/bash\ntrue\n"),
    });
    expect(await isTermExecutorRoot(root)).toBe(true);
    const loaded = await loadTermExecutorArchive(root, { cacheDir: join(root, ".cache"), allowLocalRepos: false });
    expect(loaded.tasks.map((t) => [t.id, t.format])).toEqual([["harbor-task", "native"], ["te-task", "term-executor"]]);
    expect(loaded.agentDir).toBe(join(root, "agent_code"));
    expect(loaded.errors.map((e) => e.message)).toEqual([
      expect.stringMatching(/tasks\/stray: is not a task directory: expected task\.toml \+ instruction\.md \+ tests\/test\.sh \(Harbor \/ Terminal-Bench 2\), task\.yaml \(Terminal-Bench 1\) or workspace\.yaml \+ prompt\.md \(term-executor\)$/),
    ]);
  });

  test("tasks/ holding only native tasks (no agent_code/) is a submission root too", async () => {
    const root = await tempDir();
    await writeTree(root, Object.fromEntries(Object.entries(nativeFiles()).map(([p, f]) => [`bundle/tasks/one/${p}`, f])));
    expect(await isTermExecutorRoot(root)).toBe(true);
    const loaded = await loadTermExecutorArchive(root);
    expect(loaded.tasks.map((t) => t.id)).toEqual(["one"]);
    expect(loaded.agentDir).toBeNull();
  });
});
