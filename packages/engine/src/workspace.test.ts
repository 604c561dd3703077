import { execFileSync, spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdir, mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { basename, dirname, join } from "node:path";
import { ownedTempPrefix } from "@proctor/sandbox";
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { WorkspaceError } from "./errors";
import { RepoCache, repoUrl } from "./workspace";

let root: string;
let origin: string;
let first: string;
let second: string;
const git = (cwd: string, ...args: string[]) =>
  execFileSync("git", ["-c", "user.name=t", "-c", "user.email=t@t", ...args], { cwd, encoding: "utf8" }).trim();

beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), "proctor-repo-"));
  origin = join(root, "origin");
  execFileSync("git", ["init", "-q", "-b", "main", origin]);
  await writeFile(join(origin, "a.txt"), "one\n");
  git(origin, "add", ".");
  git(origin, "commit", "-qm", "first");
  first = git(origin, "rev-parse", "HEAD");
  await writeFile(join(origin, "a.txt"), "two\n");
  git(origin, "commit", "-qam", "second");
  second = git(origin, "rev-parse", "HEAD");
});
afterAll(async () => {
  await rm(root, { recursive: true, force: true });
});

describe("RepoCache", () => {
  test("a checkout's temp dir is named after this process; a killed process's leftover checkout is removed, a live one's kept", async () => {
    const temp = await mkdtemp(join(tmpdir(), "proctor-ws-test-"));
    const saved = process.env.TMPDIR;
    process.env.TMPDIR = temp; // os.tmpdir() reads it on every call
    try {
      const leftover = join(temp, `${ownedTempPrefix("proctor-ws-", 4_194_000, "12345")}Ab3dE9`); // no such pid
      const live = join(temp, `${ownedTempPrefix("proctor-ws-")}Lm8nO1`); // this process, another checkout in flight
      for (const dir of [leftover, live]) await mkdir(join(dir, "repo"), { recursive: true });
      const cache = new RepoCache(join(root, "cache-sweep"));
      const used = await cache.withCheckout(origin, first, async (dir) => dirname(dir));
      expect(basename(used).startsWith(ownedTempPrefix("proctor-ws-"))).toBe(true);
      expect(existsSync(used)).toBe(false);
      expect(existsSync(leftover)).toBe(false);
      expect(existsSync(live)).toBe(true);
    } finally {
      if (saved === undefined) delete process.env.TMPDIR;
      else process.env.TMPDIR = saved;
      await rm(temp, { recursive: true, force: true });
    }
  });

  test("checks out the exact base commit from a local path and from file://, as a standalone repo", async () => {
    const cache = new RepoCache(join(root, "cache"));
    for (const url of [origin, `file://${origin}`]) {
      const seen = await cache.withCheckout(url, first, async (dir) => ({
        content: await readFile(join(dir, "a.txt"), "utf8"),
        head: git(dir, "rev-parse", "HEAD"),
        remotes: git(dir, "remote"),
        dir,
      }));
      expect(seen).toMatchObject({ content: "one\n", head: first, remotes: "" });
      expect(existsSync(seen.dir)).toBe(false);
    }
    // A later commit in the same cache needs a new fetch, and gets it.
    const content = await cache.withCheckout(origin, second, (dir) => readFile(join(dir, "a.txt"), "utf8"));
    expect(content).toBe("two\n");
  });

  test("the checkout holds no object of a later commit (the future fix cannot be read)", async () => {
    // The fix lands after base, on main, on another branch and under a tag: the cache holds it all.
    const fixed = join(root, "fixed");
    execFileSync("git", ["init", "-q", "-b", "main", fixed]);
    await writeFile(join(fixed, "bug.py"), "def f():\n    return 1  # BUG\n");
    git(fixed, "add", ".");
    git(fixed, "commit", "-qm", "base");
    const base = git(fixed, "rev-parse", "HEAD");
    git(fixed, "checkout", "-qb", "fix-branch");
    await writeFile(join(fixed, "bug.py"), "def f():\n    return 2  # FUTURE-FIX-MARKER\n");
    git(fixed, "commit", "-qam", "the fix FUTURE-FIX-MARKER");
    git(fixed, "tag", "-a", "v1", "-m", "FUTURE-FIX-MARKER tag");
    git(fixed, "checkout", "-q", "main");
    git(fixed, "merge", "-q", "fix-branch");
    const later = git(fixed, "rev-parse", "HEAD");
    const cache = new RepoCache(join(root, "cache-future"));
    await cache.ensure(fixed, later);
    expect(git(cache.pathFor(fixed), "cat-file", "--batch-all-objects", "--batch")).toContain("FUTURE-FIX-MARKER");

    const seen = await cache.withCheckout(fixed, base, async (dir) => ({
      all: git(dir, "cat-file", "--batch-all-objects", "--batch-check=%(objectname)"),
      contents: git(dir, "cat-file", "--batch-all-objects", "--batch"),
      reachable: git(dir, "rev-list", "--objects", "--no-object-names", base),
      refs: git(dir, "for-each-ref", "--format=%(refname)"),
      log: git(dir, "log", "--all", "--format=%H"),
      config: git(dir, "config", "--list", "--local"),
      files: ["FETCH_HEAD", "ORIG_HEAD", "packed-refs", "logs", join("objects", "info", "alternates")].filter((f) => existsSync(join(dir, ".git", f))),
      worktree: git(dir, "status", "--porcelain"),
    }));
    const future = git(fixed, "rev-list", "--objects", "--no-object-names", `${base}..v1`, `${base}..${later}`).split("\n");
    expect(future.length).toBeGreaterThan(2);
    expect(seen.log).toBe(base);
    expect(seen.refs).toBe("");
    expect(seen.files).toEqual([]);
    expect(seen.worktree).toBe("");
    expect(seen.config).not.toMatch(/remote|url|cache-future/);
    // Every object in the checkout is reachable from base, and none of the later ones is there.
    expect(seen.all.split("\n").sort()).toEqual(seen.reachable.split("\n").sort());
    for (const id of future) expect(seen.all).not.toContain(id);
    expect(seen.contents).not.toContain("FUTURE-FIX-MARKER");
  });

  test("a bare mirror (--repos-dir) is read in place: nothing in it changes, and the checkout is self-contained and never names it", async () => {
    const mirror = join(root, "mirror-in-place.git");
    execFileSync("git", ["clone", "-q", "--bare", origin, mirror]);
    const snapshot = () =>
      execFileSync("find", [mirror, "-printf", "%P %s %T@\\n"], { encoding: "utf8" }).split("\n").sort().join("\n");
    const before = snapshot();
    const cache = new RepoCache(join(root, "cache-mirror"));
    const seen = await cache.withCheckout(mirror, first, async (dir) => {
      // Only what the checkout holds: no alternate from this process's environment either.
      const { GIT_ALTERNATE_OBJECT_DIRECTORIES: _a, GIT_OBJECT_DIRECTORY: _o, ...env } = process.env;
      const inDir = (...args: string[]) => execFileSync("git", args, { cwd: dir, env, encoding: "utf8" }).trim();
      return {
        fsck: inDir("fsck", "--full", "--strict"),
        all: inDir("cat-file", "--batch-all-objects", "--batch-check=%(objectname)"),
        reachable: inDir("rev-list", "--objects", "--no-object-names", first),
        shallow: await readFile(join(dir, ".git", "shallow"), "utf8"),
        // grep exits 1 when nothing matches, the outcome wanted: read what it lists.
        namesMirror: spawnSync("grep", ["-rlaF", "mirror-in-place", join(dir, ".git")], { encoding: "utf8" }).stdout.trim(),
        alternates: existsSync(join(dir, ".git", "objects", "info", "alternates")),
        hooks: existsSync(join(dir, ".git", "hooks")),
        status: inDir("status", "--porcelain"),
      };
    });
    expect(seen.fsck).toBe("");
    expect(seen.all.split("\n").sort()).toEqual(seen.reachable.split("\n").sort());
    expect(seen.shallow).toBe(`${first}\n`);
    expect(seen.alternates).toBe(false);
    expect(seen.hooks).toBe(false);
    expect(seen.status).toBe("");
    expect(seen.namesMirror).toBe("");
    expect(snapshot()).toBe(before);
  });

  test("a repeated checkout reuses the commit's kept pack and starts clean: edits, files and objects of the last one do not leak", async () => {
    const cache = new RepoCache(join(root, "cache-repeat"));
    const kept = join(root, "cache-repeat", "commit-packs", first);
    await cache.withCheckout(origin, first, async (dir) => {
      await writeFile(join(dir, "a.txt"), "EDITED-BY-AGENT\n");
      await writeFile(join(dir, "new.txt"), "NEW-FILE\n");
      git(dir, "add", "-A");
      git(dir, "commit", "-qm", "agent commit LEAK-MARKER");
    });
    const packs = await readdir(kept);
    expect(packs.sort()).toEqual([expect.stringMatching(/^pack-[0-9a-f]+\.idx$/), expect.stringMatching(/^pack-[0-9a-f]+\.pack$/)]);
    const seen = await cache.withCheckout(origin, first, async (dir) => ({
      content: await readFile(join(dir, "a.txt"), "utf8"),
      extra: existsSync(join(dir, "new.txt")),
      head: git(dir, "rev-parse", "HEAD"),
      status: git(dir, "status", "--porcelain"),
      all: git(dir, "cat-file", "--batch-all-objects", "--batch-check=%(objectname)"),
      reachable: git(dir, "rev-list", "--objects", "--no-object-names", first),
      contents: git(dir, "cat-file", "--batch-all-objects", "--batch"),
      packs: await readdir(join(dir, ".git", "objects", "pack")),
    }));
    expect(seen).toMatchObject({ content: "one\n", extra: false, head: first, status: "" });
    expect(seen.all.split("\n").sort()).toEqual(seen.reachable.split("\n").sort());
    expect(seen.contents).not.toMatch(/LEAK-MARKER|EDITED-BY-AGENT|NEW-FILE/);
    // The same pack as kept: this checkout was not rebuilt from the mirror.
    expect(seen.packs.sort()).toEqual(packs.sort());
  });

  test("a mirror whose path has a colon or a quote (git's alternates separators) checks out too", async () => {
    const mirror = join(root, 'odd:"dir', "acme__odd.git");
    execFileSync("git", ["clone", "-q", "--bare", origin, mirror]);
    const cache = new RepoCache(join(root, "cache-odd"));
    const content = await cache.withCheckout(mirror, second, (dir) => readFile(join(dir, "a.txt"), "utf8"));
    expect(content).toBe("two\n");
  });

  test("concurrent first checkouts of one commit all succeed and keep one pack", async () => {
    const cache = new RepoCache(join(root, "cache-concurrent"));
    const seen = await Promise.all(
      Array.from({ length: 4 }, () => cache.withCheckout(origin, second, async (dir) => ({ head: git(dir, "rev-parse", "HEAD"), status: git(dir, "status", "--porcelain") }))),
    );
    expect(seen).toEqual(Array.from({ length: 4 }, () => ({ head: second, status: "" })));
    const kept = join(root, "cache-concurrent", "commit-packs");
    // No staging directory left behind by the checkouts that lost the race to keep it.
    expect(await readdir(kept)).toEqual([second]);
    expect(await readdir(join(kept, second))).toHaveLength(2);
  });

  test("kept commit packs are bounded: the least recently used goes first", async () => {
    const cache = new RepoCache(join(root, "cache-bounded"), { maxCommitPacks: 1 });
    const kept = join(root, "cache-bounded", "commit-packs");
    await cache.withCheckout(origin, first, async () => undefined);
    expect(await readdir(kept)).toEqual([first]);
    const content = await cache.withCheckout(origin, second, (dir) => readFile(join(dir, "a.txt"), "utf8"));
    expect(content).toBe("two\n");
    expect(await readdir(kept)).toEqual([second]);
  });

  test("a base_commit that is not a full commit id is refused before git runs (no option injection)", async () => {
    const cache = new RepoCache(join(root, "cache-inject"));
    const marker = join(root, "pwned");
    for (const bad of [`--upload-pack=touch ${marker}`, "main", first.slice(0, 12), `${first}^`]) {
      await expect(cache.ensure(origin, bad)).rejects.toThrow(/not a full commit id/);
      await expect(cache.withCheckout(origin, bad, async () => undefined)).rejects.toThrow(WorkspaceError);
    }
    expect(existsSync(marker)).toBe(false);
    expect(existsSync(join(root, "cache-inject"))).toBe(false);
  });

  test("a repo naming a command transport (ext::) runs nothing, whatever the host's git config allows", async () => {
    const cache = new RepoCache(join(root, "cache-ext"));
    const marker = join(root, "pwned-ext");
    const url = `ext::sh -c touch% ${marker}`;
    const saved = process.env.GIT_CONFIG_PARAMETERS;
    // As if the host's config allowed every protocol: Proctor's own allowlist still wins.
    process.env.GIT_CONFIG_PARAMETERS = "'protocol.allow'='always'";
    try {
      await expect(cache.ensure(url, first)).rejects.toThrow(WorkspaceError);
    } finally {
      if (saved === undefined) delete process.env.GIT_CONFIG_PARAMETERS;
      else process.env.GIT_CONFIG_PARAMETERS = saved;
    }
    expect(existsSync(marker)).toBe(false);
  });

  test("a SHA-256 repository (64-digit base_commit) is cached and checked out too", async () => {
    const repo = join(root, "sha256");
    execFileSync("git", ["init", "-q", "--object-format=sha256", "-b", "main", repo]);
    await writeFile(join(repo, "a.txt"), "sha256\n");
    git(repo, "add", ".");
    git(repo, "commit", "-qm", "one");
    const commit = git(repo, "rev-parse", "HEAD");
    expect(commit).toMatch(/^[0-9a-f]{64}$/);
    const cache = new RepoCache(join(root, "cache-sha256"));
    const seen = await cache.withCheckout(repo, commit, async (dir) => ({ head: git(dir, "rev-parse", "HEAD"), content: await readFile(join(dir, "a.txt"), "utf8") }));
    expect(seen).toEqual({ head: commit, content: "sha256\n" });
  });

  test("an unknown commit or repository is a WorkspaceError naming it", async () => {
    const cache = new RepoCache(join(root, "cache2"));
    await expect(cache.ensure(origin, "0".repeat(40))).rejects.toThrow(WorkspaceError);
    await expect(cache.ensure(join(root, "missing"), first)).rejects.toThrow(/cannot fetch .*missing/);
  });

  test("repo strings: URLs kept, local paths made absolute, owner/name goes to GitHub", () => {
    expect(repoUrl("https://example.com/x.git")).toBe("https://example.com/x.git");
    expect(repoUrl(origin)).toBe(origin);
    expect(repoUrl("astropy/astropy", root)).toBe("https://github.com/astropy/astropy.git");
  });
});
