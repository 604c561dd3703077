import { execFile } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync } from "node:fs";
import { mkdir, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { isAbsolute, join, resolve } from "node:path";
import { promisify } from "node:util";
import { COMMIT_ID } from "@proctor/schema";
import { WorkspaceError } from "./errors";

const run = promisify(execFile);

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

async function git(args: string[], options: { cwd?: string; timeoutMs?: number; signal?: AbortSignal } = {}): Promise<string> {
  const { stdout } = await run("git", args, {
    cwd: options.cwd,
    timeout: options.timeoutMs,
    signal: options.signal,
    maxBuffer: 16 * 1024 * 1024,
    env: { ...process.env, GIT_TERMINAL_PROMPT: "0", GIT_ASKPASS: "true", GIT_ALLOW_PROTOCOL: ALLOWED_PROTOCOLS },
  });
  return stdout;
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

  constructor(readonly dir: string) {}

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
   * it. The directory's repository holds only `commit` and what it reaches (a depth-1 fetch: no
   * later commit, branch, tag, reflog or remote), so an agent cannot read the future fix.
   */
  async withCheckout<T>(
    url: string,
    commit: string,
    use: (dir: string) => Promise<T>,
    options: { timeoutMs?: number; signal?: AbortSignal } = {},
  ): Promise<T> {
    const bare = await this.ensure(url, commit, options);
    const parent = await mkdtemp(join(tmpdir(), "proctor-ws-"));
    const dir = join(parent, "repo");
    try {
      try {
        await git(["init", "--quiet", `--object-format=${objectFormat(commit)}`, "--end-of-options", dir], options);
        // The cache is ours: let its upload-pack serve the exact commit (not only branch tips).
        await git(["-c", "uploadpack.allowAnySHA1InWant=true", "fetch", "--quiet", "--depth=1", "--no-tags", `file://${bare}`, "--end-of-options", commit], { ...options, cwd: dir });
        // checkout takes no --end-of-options: give it the constant FETCH_HEAD, then confirm HEAD.
        await git(["-c", "advice.detachedHead=false", "checkout", "--quiet", "--detach", "FETCH_HEAD"], { ...options, cwd: dir });
        const head = (await git(["rev-parse", "--verify", "HEAD^{commit}"], { ...options, cwd: dir })).trim();
        if (head.toLowerCase() !== commit.toLowerCase()) throw new Error(`the checkout is at ${head}, not ${commit}`);
        // Nothing that names the cache or another commit: no FETCH_HEAD, no reflog.
        await rm(join(dir, ".git", "FETCH_HEAD"), { force: true });
        await rm(join(dir, ".git", "logs"), { recursive: true, force: true });
      } catch (error) {
        throw new WorkspaceError(`cannot check out ${commit} of ${url}: ${describe(error)}`, url, { cause: error });
      }
      return await use(dir);
    } finally {
      await rm(parent, { recursive: true, force: true });
    }
  }
}
