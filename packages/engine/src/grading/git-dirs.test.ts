import { execFileSync } from "node:child_process";
import { lstat, mkdir, readFile, symlink, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { describe, expect, test } from "vitest";
import { tempDir } from "../testing/fixtures";
import { findGitDirs, neutralizeGitDir, safeGitKey } from "./git-dirs";

describe("git repositories in the outputs, made inert", () => {
  test("configuration that names a program and runnable hooks go; the repository stays usable", async () => {
    const root = await tempDir("proctor-gitdirs-");
    try {
      const repo = join(root.path, "app");
      await mkdir(repo);
      const git = (...args: string[]) => execFileSync("git", ["-c", "user.name=t", "-c", "user.email=t@t", ...args], { cwd: repo, encoding: "utf8" });
      git("init", "-q", "-b", "main");
      await writeFile(join(repo, "answer.txt"), "42\n");
      git("add", ".");
      git("commit", "-qm", "answer");
      for (const [key, value] of [
        ["core.fsmonitor", "/app/.git/forge.sh"],
        ["core.hooksPath", "/app/.git/h"],
        ["filter.x.clean", "sh /app/clean.sh"],
        ["diff.x.textconv", "sh /app/conv.sh"],
        ["include.path", "/app/evil.cfg"],
        ["alias.st", "!sh /app/forge.sh"],
        ["commit.gpgSign", "true"],
        ["user.name", "Ada Lovelace"],
        ["remote.origin.url", "https://example.com/r.git"],
        ['branch.feature "x".merge', "refs/heads/feature"],
      ]) git("config", key as string, value as string);
      await writeFile(join(repo, ".git", "hooks", "post-index-change"), "#!/bin/sh\necho 1 > /logs/verifier/reward.txt\n", { mode: 0o755 });
      await symlink("/bin/sh", join(repo, ".git", "hooks", "pre-commit"));
      // A nested repository of the agent's, found too.
      await mkdir(join(repo, "vendor", "dep"), { recursive: true });
      execFileSync("git", ["init", "-q"], { cwd: join(repo, "vendor", "dep") });
      expect((await findGitDirs(repo)).sort()).toEqual([join(repo, ".git"), join(repo, "vendor", "dep", ".git")]);

      const dropped = await neutralizeGitDir(join(repo, ".git"));
      expect(dropped).toEqual(expect.arrayContaining(["core.fsmonitor", "core.hookspath", "filter.x.clean", "diff.x.textconv", "include.path", "alias.st", "commit.gpgsign", "hooks/post-index-change", "hooks/pre-commit"]));
      const kept = git("config", "--list", "--local");
      expect(kept).toMatch(/^user\.name=Ada Lovelace$/m);
      expect(kept).toMatch(/^remote\.origin\.url=https:\/\/example\.com\/r\.git$/m);
      expect(kept).toMatch(/^branch\.feature "x"\.merge=refs\/heads\/feature$/m);
      expect(kept).not.toMatch(/fsmonitor|hookspath|filter|textconv|include|alias|gpgsign/i);
      // The hook is still there to read, but git will not run it; the link to a program is gone.
      expect(await readFile(join(repo, ".git", "hooks", "post-index-change"), "utf8")).toContain("reward.txt");
      expect((await lstat(join(repo, ".git", "hooks", "post-index-change"))).mode & 0o111).toBe(0);
      await expect(lstat(join(repo, ".git", "hooks", "pre-commit"))).rejects.toThrow(/ENOENT/);
      expect(git("log", "--format=%s")).toBe("answer\n");
      expect(git("status", "--porcelain")).toBe("?? vendor/\n");
    } finally {
      await root.cleanup();
    }
  });

  test("only keys that are data to git are kept", () => {
    for (const key of ["core.bare", "remote.origin.fetch", "user.email", "color.ui", "pull.rebase", "extensions.objectformat", "diff.renames"]) expect(safeGitKey(key), key).toBe(true);
    for (const key of ["core.pager", "core.editor", "core.sshcommand", "diff.external", "log.showsignature", "credential.helper", "submodule.x.update", "gpg.program", "http.proxy", "url.x.insteadof"]) expect(safeGitKey(key), key).toBe(false);
  });
});
