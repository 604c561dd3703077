import { execFile } from "node:child_process";
import { createHash } from "node:crypto";
import { constants as fsConstants, existsSync } from "node:fs";
import { copyFile, link, mkdir, mkdtemp, readdir, rename, rm, stat, utimes, writeFile } from "node:fs/promises";
import { isAbsolute, join, resolve } from "node:path";
import { promisify } from "node:util";
import { makeOwnedTempDir, removeOrphanTempDirs } from "@proctor/sandbox";
import { COMMIT_ID, silentLogger, type Logger } from "@proctor/schema";
import { WorkspaceError } from "./errors";

const run = promisify(execFile);
/** Start of a checkout's temp dir name (named after its process: see @proctor/sandbox ownedTempPrefix). */
export const CHECKOUT_TEMP_PREFIX = "proctor-ws-";

/**
 * Transports git may use for a task's repo, whatever the host's git config says: never `ext::`
 * (it runs a command) or other helpers a task could name.
 */
const ALLOWED_PROTOCOLS = "file:git:http:https:ssh";

/** Where a workspace repo string points: a URL git understands, or an absolute local path. */
export function repoUrl(repo: string, baseDir = process.cwd()): string {
  if (/^[a-z][a-z0-9+.-]*:\/\//i.test(repo) || /^[^/]+@[^:]+:/.test(repo)) return repo;
  const local = isAbsolute(repo) ? repo : resolve(baseDir, repo);
  if (existsSync(local)) return local;
  // SWE-bench names repos as owner/name on GitHub.
  if (/^[A-Za-z0-9_.-]+\/[A-Za-z0-9_.-]+$/.test(repo)) return `https://github.com/${repo}.git`;
  return local;
}

interface GitOptions {
  cwd?: string;
  timeoutMs?: number;
  signal?: AbortSignal;
  /** Written to git's stdin. */
  input?: string;
  env?: Record<string, string>;
}

async function git(args: string[], options: GitOptions = {}): Promise<string> {
  const pending = run("git", args, {
    cwd: options.cwd,
    timeout: options.timeoutMs,
    signal: options.signal,
    maxBuffer: 16 * 1024 * 1024,
    env: { ...process.env, GIT_TERMINAL_PROMPT: "0", GIT_ASKPASS: "true", GIT_ALLOW_PROTOCOL: ALLOWED_PROTOCOLS, ...options.env },
  });
  if (options.input !== undefined) {
    // git exiting early (an error) closes its stdin: its exit status says why, not this EPIPE.
    pending.child.stdin?.on("error", () => undefined);
    pending.child.stdin?.end(options.input);
  }
  const { stdout } = await pending;
  return stdout;
}

/** One entry of GIT_ALTERNATE_OBJECT_DIRECTORIES: git splits on ':' unless the entry is C-quoted. */
function alternateEntry(path: string): string {
  return /[:"\\]/.test(path) ? `"${path.replace(/["\\]/g, "\\$&")}"` : path;
}

/** Hard link when the cache and the checkout share a filesystem, else a copy (reflink where it can). */
async function linkOrCopy(from: string, to: string): Promise<void> {
  try {
    await link(from, to);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== "EXDEV" && (error as NodeJS.ErrnoException).code !== "EPERM") throw error;
    await copyFile(from, to, fsConstants.COPYFILE_FICLONE);
  }
}

/** Nothing but a full commit id reaches git. */
function assertCommitId(commit: string, url: string): void {
  if (!COMMIT_ID.test(commit)) {
    throw new WorkspaceError(`base_commit ${JSON.stringify(commit.slice(0, 80))} is not a full commit id (40 or 64 hex digits); give the exact commit, not a branch, tag or abbreviation`, url);
  }
}

/** A 64-digit id names a SHA-256 repository: the cache and the checkout must be one too. */
function objectFormat(commit: string): "sha1" | "sha256" {
  return commit.length === 64 ? "sha256" : "sha1";
}

function describe(error: unknown): string {
  const e = error as { stderr?: string; message?: string };
  return (e.stderr?.trim() || e.message || String(error)).split("\n").slice(-3).join(" | ");
}

/**
 * Host-side bare-repository cache, one per repository URL, shared by every trial of a run
 * (and by later runs). Fetches are serialized per repository within this process.
 */
export class RepoCache {
  private readonly locks = new Map<string, Promise<unknown>>();
  private readonly maxCommitPacks: number;
  private readonly logger: Logger;
  private swept: Promise<void> | undefined;

  /**
   * `maxCommitPacks`: how many base commits' packs to keep for repeated checkouts (default 64).
   * `logger`: told about checkouts of killed processes that could not be removed.
   */
  constructor(
    readonly dir: string,
    options: { maxCommitPacks?: number; logger?: Logger } = {},
  ) {
    this.logger = options.logger ?? silentLogger;
    this.maxCommitPacks = options.maxCommitPacks ?? 64;
    if (!Number.isInteger(this.maxCommitPacks) || this.maxCommitPacks < 1) {
      throw new RangeError(`RepoCache maxCommitPacks must be a whole number >= 1, got ${String(options.maxCommitPacks)}`);
    }
  }

  /** Path of the bare repo caching `url`. */
  pathFor(url: string): string {
    const slug = url.replace(/\.git$/, "").split(/[/:]/).filter(Boolean).slice(-2).join("-").replace(/[^A-Za-z0-9._-]/g, "_");
    return join(this.dir, `${slug}-${createHash("sha256").update(url).digest("hex").slice(0, 12)}.git`);
  }

  private async serialize<T>(key: string, fn: () => Promise<T>): Promise<T> {
    const previous = this.locks.get(key) ?? Promise.resolve();
    const next = previous.then(fn, fn);
    this.locks.set(key, next.catch(() => undefined));
    return next;
  }

  /** Make sure the cache holds `commit` of `url` and return the bare repo's path. */
  async ensure(url: string, commit: string, options: { timeoutMs?: number; signal?: AbortSignal } = {}): Promise<string> {
    assertCommitId(commit, url);
    // A local bare mirror (SWE-bench's --repos-dir) is its own cache: read it in place, never copy or write it.
    if (isAbsolute(url) && existsSync(join(url, "objects")) && existsSync(join(url, "HEAD")) && !existsSync(join(url, ".git"))) {
      const present = await git(["--git-dir", url, "cat-file", "-e", "--end-of-options", `${commit}^{commit}`], options).then(() => true, () => false);
      if (!present) throw new WorkspaceError(`the mirror ${url} has no commit ${commit}: update it (git --git-dir ${url} fetch origin '+refs/heads/*:refs/heads/*') or check base_commit`, url);
      return url;
    }
    const bare = this.pathFor(url);
    return this.serialize(bare, async () => {
      const has = () => git(["--git-dir", bare, "cat-file", "-e", "--end-of-options", `${commit}^{commit}`], options).then(() => true, () => false);
      if (!existsSync(join(bare, "HEAD"))) {
        await mkdir(this.dir, { recursive: true });
        await git(["init", "--quiet", "--bare", `--object-format=${objectFormat(commit)}`, "--end-of-options", bare], options);
        await git(["--git-dir", bare, "remote", "add", "--end-of-options", "origin", url], options);
      } else if (await has()) {
        return bare;
      }
      // The exact commit first (cheap on servers that allow it), else everything.
      const exact = await git(["--git-dir", bare, "fetch", "--quiet", "origin", "--end-of-options", commit], options).then(() => null, (e: unknown) => e);
      if (exact === null && (await has())) return bare;
      try {
        await git(["--git-dir", bare, "fetch", "--quiet", "--tags", "origin", "+refs/heads/*:refs/heads/*"], options);
      } catch (error) {
        throw new WorkspaceError(`cannot fetch ${url}: ${describe(error)}`, url, { cause: error });
      }
      if (!(await has())) {
        throw new WorkspaceError(`${url} has no commit ${commit} (fetched every branch and tag); check base_commit`, url);
      }
      return bare;
    });
  }

  /**
   * Check `commit` of `url` out into a fresh temporary directory, call `use` with it, then remove
   * it. The directory's repository holds only `commit` and its tree (as a depth-1 fetch would: no
   * later commit, branch, tag, reflog, remote or alternate), so an agent cannot read the future fix.
   */
  async withCheckout<T>(
    url: string,
    commit: string,
    use: (dir: string) => Promise<T>,
    options: { timeoutMs?: number; signal?: AbortSignal } = {},
  ): Promise<T> {
    const bare = await this.ensure(url, commit, options);
    const id = commit.toLowerCase();
    // Checkouts left by processes killed mid-checkout (a repo's worth each), once per cache.
    this.swept ??= removeOrphanTempDirs(CHECKOUT_TEMP_PREFIX).then(
      ({ failed }) => failed.forEach(({ path, error }) => this.logger.warn("a killed process's checkout could not be removed", { dir: path, error })),
      (error: unknown) => this.logger.warn("looking for killed processes' checkouts failed", { error: (error as Error).message }),
    );
    await this.swept;
    const parent = await makeOwnedTempDir(CHECKOUT_TEMP_PREFIX);
    const dir = join(parent, "repo");
    const gitDir = join(dir, ".git");
    try {
      try {
        // No template: no sample hooks to upload.
        await git(["init", "--quiet", "--template=", `--object-format=${objectFormat(commit)}`, "--end-of-options", dir], options);
        await this.commitPack(bare, id, gitDir, options);
        // A detached HEAD at the commit, its parents a shallow boundary (what a depth-1 fetch leaves).
        await writeFile(join(gitDir, "shallow"), `${id}\n`);
        await writeFile(join(gitDir, "HEAD"), `${id}\n`);
        // Fails unless HEAD names a commit whose tree is all in the new pack.
        await git(["read-tree", "--reset", "-u", "HEAD"], { ...options, cwd: dir });
      } catch (error) {
        throw new WorkspaceError(`cannot check out ${commit} of ${url}: ${describe(error)}`, url, { cause: error });
      }
      return await use(dir);
    } finally {
      await rm(parent, { recursive: true, force: true });
    }
  }

  /**
   * Put the pack of `commit` and its tree (nothing else) into `gitDir`. Built once per commit with
   * pack-objects reading the mirror as an alternate named only in its environment (nothing in the
   * new repository points at the mirror, and nothing is written to it); existing deltas within
   * the set are reused and no new ones searched (--window=0), so nothing is recompressed but the
   * objects whose delta base lies outside the commit. Kept under `commit-packs/<commit>` (a commit
   * id names its whole tree, whichever repository it came from) for the next checkout of it.
   */
  private async commitPack(bare: string, id: string, gitDir: string, options: { timeoutMs?: number; signal?: AbortSignal }): Promise<void> {
    const packs = join(gitDir, "objects", "pack");
    const kept = join(this.dir, "commit-packs", id);
    if (await reuseKept(kept, packs)) return;
    await git(["--git-dir", gitDir, "pack-objects", "--quiet", "--revs", "--window=0", "--delta-base-offset", join(packs, "pack")], {
      ...options,
      input: `--shallow ${id}\n${id}\n`,
      env: { GIT_ALTERNATE_OBJECT_DIRECTORIES: alternateEntry(resolve(bare, "objects")) },
    });
    await this.keep(packs, kept);
  }

  /** Keep the pack just built (atomically: staged, then renamed), then drop the least recently used beyond the limit. */
  private async keep(packs: string, kept: string): Promise<void> {
    const root = join(this.dir, "commit-packs");
    await mkdir(root, { recursive: true });
    const staging = await mkdtemp(join(root, ".new-"));
    try {
      for (const name of await packFiles(packs)) await linkOrCopy(join(packs, name), join(staging, name));
      await rename(staging, kept).catch((error: NodeJS.ErrnoException) => {
        // Another checkout of the same commit kept its (identical) pack first.
        if (error.code !== "ENOTEMPTY" && error.code !== "EEXIST") throw error;
      });
    } finally {
      await rm(staging, { recursive: true, force: true });
    }
    const entries = (await readdir(root)).filter((name) => COMMIT_ID.test(name));
    if (entries.length <= this.maxCommitPacks) return;
    // Never the one just kept, whatever the clock's resolution says about ties.
    const others = entries.filter((name) => join(root, name) !== kept);
    const aged = await Promise.all(others.map(async (name) => ({ name, at: (await stat(join(root, name)).catch(() => null))?.mtimeMs ?? 0 /* removed meanwhile */ })));
    aged.sort((a, b) => a.at - b.at);
    for (const { name } of aged.slice(0, entries.length - this.maxCommitPacks)) await rm(join(root, name), { recursive: true, force: true });
  }
}

/** The .pack and .idx of a pack directory. */
async function packFiles(dir: string): Promise<string[]> {
  return (await readdir(dir)).filter((name) => /^pack-[0-9a-f]+\.(?:pack|idx)$/.test(name));
}

/** Link a kept commit pack into `packs`; false when there is none (or another process evicted it meanwhile). */
async function reuseKept(kept: string, packs: string): Promise<boolean> {
  let names: string[];
  try {
    names = await packFiles(kept);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return false;
    throw error;
  }
  if (names.length !== 2) return false;
  try {
    for (const name of names) await linkOrCopy(join(kept, name), join(packs, name));
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== "ENOENT") throw error;
    for (const name of await packFiles(packs)) await rm(join(packs, name), { force: true });
    return false;
  }
  const now = new Date();
  // Marks it recently used; evicted meanwhile is fine, the pack is already linked.
  await utimes(kept, now, now).catch((error: NodeJS.ErrnoException) => {
    if (error.code !== "ENOENT") throw error;
  });
  return true;
}
