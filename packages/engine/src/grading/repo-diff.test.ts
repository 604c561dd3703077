import { execFileSync } from "node:child_process";
import { existsSync } from "node:fs";
import { cp, mkdir, stat, symlink, utimes, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { describe, expect, test } from "vitest";
import { tempDir } from "../testing/fixtures";
import { argumentChunks } from "./sandbox-tools";
import { diffRepository, forbiddenLink, forbiddenPath, resolveThrough, screenStaged } from "./repo-diff";

describe("links in what the agent left", () => {
  test("followed through the agent's other links as the kernel would: a link to / then x/tests is a link into /tests", async () => {
    const links = new Map([
      ["/app/.r", "/"],
      ["/app/summary.csv", "/app/.r/tests/expected.csv"],
      ["/app/up", "../.."],
      ["/app/loop", "/app/loop"],
    ]);
    const linkAt = async (p: string) => links.get(p) ?? null;
    expect(forbiddenLink("/app/summary.csv", "/app/.r/tests/expected.csv")).toBeNull(); // the text alone says nothing
    expect(await resolveThrough("/app/summary.csv", linkAt)).toBe("/tests/expected.csv");
    expect(forbiddenPath(await resolveThrough("/app/summary.csv", linkAt))).toBe("a link to /tests/expected.csv");
    expect(await resolveThrough("/app/up/logs/verifier/reward.txt", linkAt)).toBe("/logs/verifier/reward.txt");
    expect(forbiddenPath(await resolveThrough("/app/loop", linkAt))).toBe("a link loop");
    expect(forbiddenPath(await resolveThrough("/app/data/x.csv", linkAt))).toBeNull();
    expect(forbiddenPath("/dev/null")).toBeNull();
  });

  test("a staged output is screened with its links followed inside it", async () => {
    const root = await tempDir("proctor-screen-");
    try {
      const staged = join(root.path, "app");
      await mkdir(staged);
      await symlink("/", join(staged, ".r"));
      await symlink("/app/.r/tests/expected.csv", join(staged, "summary.csv"));
      await symlink("data.csv", join(staged, "latest.csv"));
      await writeFile(join(staged, "data.csv"), "a,b\n");
      const tampered: string[] = [];
      await screenStaged(staged, "/app", [], tampered);
      expect(tampered).toEqual(["/app/summary.csv (a link to /tests/expected.csv)"]);
    } finally {
      await root.cleanup();
    }
  });

  test("arguments are split into groups an exec can take, whatever the agent named", () => {
    const names = Array.from({ length: 3000 }, (_, i) => `${"m".repeat(1270)}${i}`);
    const chunks = argumentChunks(names);
    expect(chunks.flat()).toEqual(names);
    for (const chunk of chunks) expect(chunk.reduce((n, a) => n + a.length + 1, 0)).toBeLessThanOrEqual(64 * 1024);
    expect(argumentChunks([])).toEqual([]);
  });
});

describe("what the agent changed in a repository", () => {
  test("is decided by content: an in-place edit of the same size with the same modification time is a change", async () => {
    const root = await tempDir("proctor-diff-");
    try {
      const base = join(root.path, "base");
      const tree = join(root.path, "tree");
      const git = (cwd: string, ...args: string[]) => execFileSync("git", ["-c", "user.name=t", "-c", "user.email=t@t", ...args], { cwd, encoding: "utf8" });
      await mkdir(base);
      await writeFile(join(base, "calc.py"), "def add(a, b):\n    return a - b\n");
      await writeFile(join(base, "same.py"), "x = 1\n");
      git(base, "init", "-q");
      git(base, "add", ".");
      git(base, "commit", "-qm", "base");
      await cp(base, tree, { recursive: true, preserveTimestamps: true, filter: (src) => !src.includes(".git") });
      const when = (await stat(join(tree, "calc.py"))).mtime;
      await writeFile(join(tree, "calc.py"), "def add(a, b):\n    return a + b\n");
      await utimes(join(tree, "calc.py"), when, when);
      const diff = await diffRepository(base, tree);
      expect(diff.changed).toEqual(["calc.py"]);
      expect(diff.deleted).toEqual([]);
      // The content-only index is Proctor's, never left in the checkout that goes to the grader.
      expect(existsSync(join(base, ".git", "proctor-content-index"))).toBe(false);
    } finally {
      await root.cleanup();
    }
  });
});
