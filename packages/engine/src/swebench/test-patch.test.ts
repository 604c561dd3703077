import { execFileSync } from "node:child_process";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { applyTestPatch, patchPaths, TestPatchError } from "./test-patch";

const git = (cwd: string, ...args: string[]) => execFileSync("git", ["-c", "user.name=t", "-c", "user.email=t@t", ...args], { cwd, encoding: "utf8" });

describe("test_patch on the host (git apply, --3way, patch --fuzz)", () => {
  let root: string;
  let bare: string;
  let base: string;
  beforeAll(async () => {
    root = await mkdtemp(join(tmpdir(), "proctor-testpatch-test-"));
    const work = join(root, "work");
    await mkdir(join(work, "tests"), { recursive: true });
    await writeFile(join(work, "tests", "test_a.py"), Array.from({ length: 20 }, (_, i) => `def test_${i}():\n    pass\n`).join("\n"));
    await writeFile(join(work, "tests", "old.py"), "x = 1\n");
    git(root, "init", "--quiet", work);
    git(work, "add", "-A");
    git(work, "commit", "--quiet", "-m", "base");
    base = git(work, "rev-parse", "HEAD").trim();
    bare = join(root, "acme__calc.git");
    git(root, "clone", "--quiet", "--bare", work, bare);
  });
  afterAll(async () => {
    await rm(root, { recursive: true, force: true });
  });

  test("paths of a git diff: new, changed, deleted and renamed files; paths outside the repo are refused", () => {
    const patch = "diff --git a/x.py b/x.py\nnew file mode 100644\n--- /dev/null\n+++ b/x.py\n@@ -0,0 +1 @@\n+a\ndiff --git a/old.py b/new.py\nsimilarity index 100%\nrename from old.py\nrename to new.py\n";
    expect(patchPaths(patch)).toEqual(["new.py", "old.py", "x.py"]);
    expect(() => patchPaths("--- a/../etc/passwd\n+++ b/../etc/passwd\n")).toThrow(TestPatchError);
  });

  test("a clean patch, a new file and a deletion give the final files and the deleted paths", async () => {
    const patch = [
      "diff --git a/tests/new_test.py b/tests/new_test.py",
      "new file mode 100644",
      "--- /dev/null",
      "+++ b/tests/new_test.py",
      "@@ -0,0 +1,2 @@",
      "+def test_new():",
      "+    assert True",
      "diff --git a/tests/old.py b/tests/old.py",
      "deleted file mode 100644",
      "--- a/tests/old.py",
      "+++ /dev/null",
      "@@ -1 +0,0 @@",
      "-x = 1",
      "",
    ].join("\n");
    const files = await applyTestPatch(bare, base, patch);
    expect(files.deleted).toEqual(["tests/old.py"]);
    expect(files.files.map((f) => [f.path, f.data.toString()])).toEqual([["tests/new_test.py", "def test_new():\n    assert True\n"]]);
  });

  test("a hunk whose context drifted applies with patch --fuzz; one that matches nowhere names the file and hunk", async () => {
    // Context lines differ from the file (a comment that is not there): git apply refuses, patch --fuzz takes it.
    const fuzzy = "--- a/tests/test_a.py\n+++ b/tests/test_a.py\n@@ -3,4 +3,4 @@\n \n-def test_1():\n+def test_1():  # changed\n     pass\n # not in the file\n";
    const files = await applyTestPatch(bare, base, fuzzy);
    expect(files.files[0]?.data.toString()).toContain("def test_1():  # changed");
    const broken = "--- a/tests/test_a.py\n+++ b/tests/test_a.py\n@@ -3,3 +3,3 @@\n-no such line\n-nor this\n+x\n+y\n context\n";
    const error = await applyTestPatch(bare, base, broken).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(TestPatchError);
    expect((error as Error).message).toMatch(/test_patch does not apply to base_commit [0-9a-f]{40}/);
    expect((error as Error).message).toContain("patch failed: tests/test_a.py:3");
    expect((error as Error).message).toMatch(/Hunk #1 FAILED at 3/);
  });
});
