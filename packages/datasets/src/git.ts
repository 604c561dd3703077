import { spawn } from "node:child_process";
import { mkdir, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { FetchError } from "./errors";
import { isCommitId } from "./spec";

interface GitResult {
  code: number;
  stdout: string;
  stderr: string;
}

export interface GitOptions {
  /** Kill git after this long. Default 10 min. */
  timeoutMs?: number;
  signal?: AbortSignal;
}

/** Run the system git with a fixed locale, no prompts, and the `ext::` transport off. */
function git(args: string[], cwd: string | undefined, repository: string, options: GitOptions): Promise<GitResult> {
  return new Promise((done, fail) => {
    const child = spawn("git", ["-c", "protocol.ext.allow=never", "-c", "advice.detachedHead=false", ...args], {
      cwd,
      env: { ...process.env, LC_ALL: "C", GIT_TERMINAL_PROMPT: "0", GIT_ASKPASS: "", SSH_ASKPASS: "", GCM_INTERACTIVE: "never" },
      stdio: ["ignore", "pipe", "pipe"],
      timeout: options.timeoutMs ?? 10 * 60_000,
      ...(options.signal ? { signal: options.signal } : {}),
    });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (c: Buffer) => (stdout += c.toString()));
    child.stderr.on("data", (c: Buffer) => (stderr += c.toString()));
    child.on("error", (error: NodeJS.ErrnoException) => {
      if (error.code === "ENOENT") fail(new FetchError("git is not installed (or not on PATH): install it (e.g. apt-get install git) to fetch datasets", "git", repository, { cause: error }));
      else if (error.name === "AbortError") fail(error);
      else fail(new FetchError(`git failed for ${repository}: ${error.message}`, "git", repository, { cause: error }));
    });
    child.on("close", (code, signal) => done({ code: code ?? (signal ? 128 : 1), stdout, stderr: signal === "SIGTERM" && code === null ? `${stderr}\ntimed out` : stderr }));
  });
}

/** The line of git's stderr that says why (its last `fatal:` line, else its last line). */
function why(stderr: string): string {
  const lines = stderr.split("\n").map((l) => l.trim()).filter((l) => l !== "" && !l.startsWith("warning:") && !l.startsWith("hint:"));
  const fatal = lines.filter((l) => /^(fatal|error):/.test(l));
  return (fatal[0] ?? lines.at(-1) ?? "git gave no reason").replace(/^(fatal|error):\s*/, "");
}

const MISSING_COMMIT = /not our ref|couldn't find remote ref|no such remote ref|unadvertised object|did not send all necessary objects|reference is not a tree|unable to read tree|invalid reference/i;
const UNREACHABLE = /could not resolve host|unable to connect|connection refused|connection timed out|timed out|network is unreachable|does not appear to be a git repository|repository not found|could not read from remote|unable to access|no such file or directory|not found|unable to look up|terminal prompts disabled|authentication failed|permission denied/i;

function failure(result: GitResult, repository: string, what: string): FetchError {
  const reason = why(result.stderr);
  if (MISSING_COMMIT.test(result.stderr)) {
    return new FetchError(`could not fetch ${what}: the repository has no such commit (${reason}); it may have been force-pushed away: ask the dataset's maintainers for a new pin, or run a version already in the cache`, "commit", repository);
  }
  if (UNREACHABLE.test(result.stderr)) {
    return new FetchError(`could not fetch ${what}: the repository cannot be reached (${reason}); check the URL and the network (datasets already in the cache run offline: proctor datasets list shows them)`, "unreachable", repository);
  }
  return new FetchError(`could not fetch ${what}: git failed (${reason})`, "git", repository);
}

/**
 * `ref` (a branch, a tag, or null for the default branch) as a full commit id, with `git
 * ls-remote`. A full commit id is returned as it is, without asking the network.
 */
export async function resolveRef(repository: string, ref: string | null, options: GitOptions = {}): Promise<string> {
  if (ref !== null && isCommitId(ref)) return ref;
  const wanted = ref ?? "HEAD";
  const result = await git(["ls-remote", "--end-of-options", repository, wanted], undefined, repository, options);
  if (result.code !== 0) throw failure(result, repository, `${repository} (${wanted})`);
  const lines = result.stdout.split("\n").filter(Boolean).map((l) => l.split("\t") as [string, string]);
  const pick = (names: string[]) => names.map((n) => lines.find(([, r]) => r === n)?.[0]).find(Boolean);
  const commit = ref === null ? pick(["HEAD"]) : pick([`refs/tags/${ref}^{}`, `refs/tags/${ref}`, `refs/heads/${ref}`, ref]);
  if (!commit) throw new FetchError(`could not fetch ${repository}: it has no branch or tag "${wanted}"; give a commit id (40 hex digits) or an existing ref`, "commit", repository);
  return commit;
}

/**
 * Fetch `commit` of `repository` into a new repository at `dir` (shallow, one commit; sparse to
 * `paths` unless one of them is the root `""`) and check it out. Throws FetchError (`unreachable`,
 * `commit`, `git`); the caller checks the paths exist.
 */
export async function fetchCommit(repository: string, commit: string, paths: readonly string[], dir: string, options: GitOptions = {}): Promise<void> {
  const what = `${repository} at ${commit.slice(0, 12)}`;
  if (!isCommitId(commit)) throw new FetchError(`could not fetch ${repository}: "${commit}" is not a full commit id`, "commit", repository);
  const step = async (args: string[]) => {
    const result = await git(args, dir, repository, options);
    if (result.code !== 0) throw failure(result, repository, what);
    return result;
  };
  await mkdir(dir, { recursive: true });
  await step(["init", "-q"]);
  await step(["remote", "add", "origin", "--end-of-options", repository]);
  if (!paths.includes("")) {
    // Non-cone patterns anchored at the root: exactly these directories are checked out.
    // Pattern characters in a path stand for themselves.
    await writeFile(join(dir, ".git", "info", "sparse-checkout"), paths.map((p) => `/${p.replace(/[*?[\\]/g, "\\$&")}/\n`).join(""));
    await step(["config", "core.sparseCheckout", "true"]);
  }
  // --filter lets a server that allows it skip the blobs of other paths; one that does not ignores it.
  await step(["fetch", "-q", "--depth=1", "--no-tags", "--filter=blob:none", "origin", "--end-of-options", commit]);
  // `commit` is a checked full commit id (isCommitId), never an option.
  await step(["checkout", "-q", "--detach", commit]);
  const head = (await step(["rev-parse", "HEAD"])).stdout.trim();
  if (head !== commit) throw new FetchError(`could not fetch ${what}: the checkout is at ${head}`, "git", repository);
}
