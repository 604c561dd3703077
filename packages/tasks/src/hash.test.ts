import { chmod, cp, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { describe, expect, test } from "vitest";
import { must, nativeFiles, tempDir, writeTree } from "../test/fixtures";
import { canonicalJson, hashTask } from "./hash";
import { loadNativeTask } from "./native";
import { loadTb1Task } from "./tb1";

async function hashOf(dir: string): Promise<string> {
  const { task, errors } = await loadNativeTask(dir);
  expect(errors).toEqual([]);
  return hashTask(must(task));
}

describe("hashTask", () => {
  test("is stable when nothing changes, and across a copy of the task elsewhere", async () => {
    const root = await tempDir();
    const dir = await writeTree(join(root, "t"), nativeFiles({ "task.toml": "[agent]\ntimeout_sec = 60\n", "environment/Dockerfile": "FROM x\n" }));
    const first = await hashOf(dir);
    expect(first).toMatch(/^[0-9a-f]{64}$/);
    expect(await hashOf(dir)).toBe(first);
    await cp(dir, join(root, "moved", "t"), { recursive: true });
    expect(await hashOf(join(root, "moved", "t"))).toBe(first);
  });

  test("changes when a file's content, a file's x bit, a new file or a task.toml field changes", async () => {
    const root = await tempDir();
    const dir = await writeTree(join(root, "t"), nativeFiles({ "environment/Dockerfile": "FROM x\n" }));
    const seen = new Set([await hashOf(dir)]);
    const expectNew = async () => {
      const hash = await hashOf(dir);
      expect(seen.has(hash)).toBe(false);
      seen.add(hash);
    };
    await writeFile(join(dir, "environment/Dockerfile"), "FROM y\n");
    await expectNew();
    await chmod(join(dir, "tests/test.sh"), 0o644);
    await expectNew();
    await writeFile(join(dir, "tests/helper.py"), "");
    await expectNew();
    await writeFile(join(dir, "task.toml"), "[agent]\ntimeout_sec = 61\n");
    await expectNew();
  });

  test("a TB1 task hashes the same whatever cache dir its prepared tests live in", async () => {
    const root = await tempDir();
    const dir = await writeTree(join(root, "tb"), { "task.yaml": "instruction: hi\n", "run-tests.sh": "true\n", "tests/a.py": "" });
    const a = await loadTb1Task(dir, { cacheDir: join(root, "cache-a") });
    const b = await loadTb1Task(dir, { cacheDir: join(root, "cache-b") });
    const [ta, tb] = [must(a.task), must(b.task)];
    expect(ta.verifier.testsDir).not.toBe(tb.verifier.testsDir);
    expect(await hashTask(ta)).toBe(await hashTask(tb));
  });

  test("canonicalJson sorts keys at every level", () => {
    expect(canonicalJson({ b: 1, a: { d: [2, { z: 1, y: 2 }], c: null } })).toBe('{"a":{"c":null,"d":[2,{"y":2,"z":1}]},"b":1}');
  });
});
