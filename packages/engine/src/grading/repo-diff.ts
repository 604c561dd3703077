import { execFile } from "node:child_process";
import { cp, lstat, mkdir, readFile, readdir, readlink, rm } from "node:fs/promises";
import { dirname, join, posix } from "node:path";
import { promisify } from "node:util";
import { pytestSection, PYTEST_CONFIG_FILES } from "../swebench/pytest-config";
import { topLevelModule } from "./modules";

const run = promisify(execFile);

/** The agent's change to a repository: what fresh grading applies at the base commit. */
export interface RepoDiff {
  /** Files added or modified (links included; a nested repository's .git as one entry), relative to the repository root, sorted. */
  changed: string[];
  /** Tracked files the agent removed. */
  deleted: string[];
  /** What the diff must not do (each with why): it would change how the tests run. */
  tampered: string[];
  /** Why a pass of this diff is not clean (e.g. code that imports the test runner). */
  flags: string[];
  /** Files of the agent's left out (bytecode), each with why. */
  skipped: string[];
  /**
   * Modules the diff adds at the top of an import path (a `.py` file or a package in a directory
   * that is not itself a package: the repository root, a test or script directory), by name; the
   * caller refuses those the grader's Python can already import (they would shadow them).
   */
  topLevelModules: { path: string; name: string }[];
  /** Links among `changed`: the grader's kernel follows them once they are placed. */
  links: string[];
}

/** Python bytecode: never carried from the agent (an unchecked .pyc runs without looking at its source); Python rebuilds it. */
export function isBytecode(path: string): boolean {
  return /(^|\/)__pycache__(\/|$)|\.py[co]$/.test(path);
}

/**
 * Files the agent's outputs must not add, change or remove: each would change how the tests run
 * (pytest's configuration and plugins, Python start-up hooks, installed packages' metadata, where
 * entry points declare plugins). `before` / `after` are the file's text in the grader's copy (the
 * image or the base commit) and in the agent's, null when absent (or not a regular file). For a
 * config file shared with other tools only its pytest part counts.
 */
export function changesRunner(path: string, before: string | null, after: string | null): boolean {
  const base = posix.basename(path);
  const config = PYTEST_CONFIG_FILES.find((f) => f.path === base);
  if (config) return pytestSection(config.path, before) !== pytestSection(config.path, after);
  // A distribution's entry points declare pytest plugins in their [pytest11] group; the rest of
  // its metadata (console scripts, a venv's installed packages) does not reach the runner.
  if (base === "entry_points.txt") return pytestPlugins(before) !== pytestPlugins(after);
  return runnerFile(path, before === null) && before !== after;
}

function runnerFile(path: string, added: boolean): boolean {
  const base = posix.basename(path);
  return (
    base === "conftest.py" ||
    base === "pytest.py" ||
    base === "sitecustomize.py" ||
    base === "usercustomize.py" ||
    base.endsWith(".pth") ||
    /(^|\/)(site|user)customize\/__init__\.py$/.test(path) ||
    // A new package named like the test runner shadows it (pytest's own sources change legitimately).
    (added && /(^|\/)_?pytest\/__init__\.py$/.test(path))
  );
}

/** The [pytest11] entry points of an entry_points.txt (normalised), "" when none; a link or other non-text counts as itself. */
function pytestPlugins(text: string | null): string {
  if (text === null) return "";
  if (text.startsWith("\0")) return text;
  let inside = false;
  const found: string[] = [];
  for (const raw of text.split(/\r\n|\r|\n/)) {
    const line = raw.trim();
    if (line.startsWith("[")) inside = /^\[\s*pytest11\s*\]/.test(line);
    else if (inside && line && !line.startsWith("#") && !line.startsWith(";")) found.push(line.replace(/\s+/g, ""));
  }
  return found.sort().join("\n");
}

/** Whether `path`'s name makes it a file changesRunner() judges (so only those are read). */
export function mayChangeRunner(path: string): boolean {
  const base = posix.basename(path);
  return PYTEST_CONFIG_FILES.some((f) => f.path === base) || base === "entry_points.txt" || runnerFile(path, true);
}

/**
 * Where an output link may not point (resolved as written, from the link's own directory): the
 * tests and the verifier's logs (a link to the tests' expected answer is the answer), the
 * solution, the kernel's and the sandbox's own files.
 */
export const FORBIDDEN_TARGETS = ["/tests", "/logs", "/solution", "/proc", "/sys", "/dev", "/.proctor", "/run"];
const HARMLESS_DEVICES = new Set(["/dev/null", "/dev/zero", "/dev/random", "/dev/urandom", "/dev/stdin", "/dev/stdout", "/dev/stderr", "/dev/tty", "/dev/fd", "/proc/self/fd", "/proc/self/mounts", "/proc/mounts"]);

/**
 * In the agent's own sandbox: links into what the verifier alone brings or writes, and into file
 * systems the file audit does not watch (what the verifier reads there through a link is unseen).
 * /run is the image's own directory in a container, and packages link into it.
 */
export const SHARED_FORBIDDEN_TARGETS = ["/tests", "/logs/verifier", "/solution", "/dev", "/proc", "/sys"];

/** Why a link at sandbox path `at` with `target` is refused, or null. */
export function forbiddenLink(at: string, target: string, roots: readonly string[] = FORBIDDEN_TARGETS): string | null {
  return forbiddenPath(posix.resolve(posix.dirname(at), target), roots);
}

/** Why a link reaching sandbox path `resolved` (null: a loop) is refused, or null. */
export function forbiddenPath(resolved: string | null, roots: readonly string[] = FORBIDDEN_TARGETS): string | null {
  if (resolved === null) return "a link loop";
  if (HARMLESS_DEVICES.has(resolved)) return null;
  const root = roots.find((r) => resolved === r || resolved.startsWith(`${r}/`));
  return root ? `a link to ${resolved}` : null;
}

/**
 * Where `path` (absolute, in the sandbox) leads when the links `linkAt` knows are followed, as
 * the kernel follows them (a link's `..` from where the link points); null after 40 links.
 */
export async function resolveThrough(path: string, linkAt: (path: string) => Promise<string | null>, prefetch?: (paths: string[]) => Promise<void>): Promise<string | null> {
  let rest = path.split("/").filter(Boolean);
  let resolved = "/";
  let hops = 0;
  let fresh = true;
  while (rest.length > 0) {
    if (fresh && prefetch) {
      // Every prefix up to the first "..": asked together (after which a link may lead elsewhere).
      const prefixes: string[] = [];
      let at = resolved;
      for (const part of rest) {
        if (part === "..") break;
        if (part === ".") continue;
        at = posix.join(at, part);
        prefixes.push(at);
      }
      await prefetch(prefixes);
    }
    fresh = false;
    const [name, ...tail] = rest as [string, ...string[]];
    rest = tail;
    if (name === ".") continue;
    if (name === "..") {
      resolved = posix.dirname(resolved);
      fresh = true;
      continue;
    }
    const next = posix.join(resolved, name);
    const target = await linkAt(next);
    if (target === null) {
      resolved = next;
      continue;
    }
    if (++hops > 40) return null;
    rest = [...target.split("/").filter(Boolean), ...rest];
    if (target.startsWith("/")) resolved = "/";
    fresh = true;
  }
  return resolved;
}

/** The link target at host path `host`, or null when it is not a link. */
async function linkTarget(host: string): Promise<string | null> {
  const info = await lstat(host).catch(() => null);
  return info?.isSymbolicLink() ? readlink(host) : null;
}

const IMPORTS_RUNNER = /^\s*(?:from\s+_pytest\b|import\s+_pytest\b)/m;

async function git(args: string[], env: Record<string, string> = {}): Promise<string> {
  const { stdout } = await run("git", ["-c", "core.fsmonitor=", "-c", "core.hooksPath=/dev/null", "-c", "core.untrackedCache=false", "-c", "core.quotePath=false", ...args], {
    maxBuffer: 256 * 1024 * 1024,
    encoding: "utf8",
    env: { ...process.env, GIT_CONFIG_NOSYSTEM: "1", GIT_CONFIG_GLOBAL: "/dev/null", GIT_OPTIONAL_LOCKS: "0", GIT_TERMINAL_PROMPT: "0", ...env },
  });
  return stdout;
}

/** A file's text for comparing runner files: a link counts as its target's name (never followed), anything else as absent. */
export async function textOf(path: string): Promise<string | null> {
  const info = await lstat(path).catch(() => null);
  if (info?.isSymbolicLink()) return `\0link ${await readlink(path)}`;
  if (!info?.isFile()) return null;
  if (info.size > 4 * 1024 * 1024) return `\0large ${info.size}`;
  return readFile(path, "utf8");
}

/**
 * Compares `tree` (the agent's repository as it left it, without .git; links as links) with
 * `base` (a checkout of the base commit, with .git) the way `git status` does: tracked files that
 * differ or are gone, and new files the base commit's ignore rules do not exclude. Runs the
 * host's git with no user or system config and no hooks; nothing in `tree` is executed.
 * `protect`: files (relative) the tests' run relies on that must stay the base commit's (the test
 * runner script the command runs, the packages the test files are in).
 */
export async function diffRepository(base: string, tree: string, protect: readonly string[] = [], workdir = "/"): Promise<RepoDiff> {
  // Links in the agent's tree, followed where the grader will have them (under workdir).
  const inTree = (path: string) => (path === workdir ? "" : path.startsWith(`${workdir.replace(/\/+$/, "")}/`) ? path.slice(workdir.replace(/\/+$/, "").length + 1) : null);
  const linkAt = async (path: string) => {
    const rel = inTree(path);
    return rel ? linkTarget(join(tree, rel)) : null;
  };
  // A fresh index with no stat data: git compares every tracked file by content, never trusting
  // a size or a time (an in-place edit of the same size at the same second is still an edit).
  const index = join(base, ".git", "proctor-content-index");
  let out: string;
  try {
    await git(["--git-dir", join(base, ".git"), "read-tree", "HEAD"], { GIT_INDEX_FILE: index });
    out = await git(["--git-dir", join(base, ".git"), "--work-tree", tree, "status", "--porcelain=v1", "-z", "--untracked-files=all", "--no-renames", "--ignore-submodules=all"], { GIT_INDEX_FILE: index });
  } finally {
    await rm(index, { force: true });
  }
  const changed: string[] = [];
  const deleted: string[] = [];
  const kinds = new Map<string, "added" | "modified" | "deleted">();
  const tampered: string[] = [];
  const flags: string[] = [];
  const skipped: string[] = [];
  const nestedGit: string[] = [];
  for (const record of out.split("\0")) {
    if (record.length < 4) continue;
    const code = record.slice(0, 2);
    const path = record.slice(3).replace(/\/$/, "");
    if (code === "??") {
      // A directory git lists as one entry (a nested repository): every file in it is the
      // agent's and is screened as such; its own .git comes whole, to be made inert (git-dirs.ts).
      if ((await lstat(join(tree, path)).catch(() => null))?.isDirectory()) {
        for (const file of await filesUnder(tree, path)) {
          if (posix.basename(file) === ".git") nestedGit.push(file);
          else kinds.set(file, "added");
        }
      } else kinds.set(path, "added");
    } else if (code.includes("D")) kinds.set(path, "deleted");
    else kinds.set(path, "modified");
  }
  const topLevelModules: { path: string; name: string }[] = [];
  const links: string[] = [];
  const protectedSet = new Set(protect);
  for (const [path, kind] of kinds) {
    if (kind !== "deleted" && isBytecode(path)) {
      skipped.push(`${path} (bytecode is not carried)`);
      continue;
    }
    (kind === "deleted" ? deleted : changed).push(path);
    if (protectedSet.has(path)) tampered.push(`${path} (the tests' run relies on the base commit's)`);
    else if (mayChangeRunner(path)) {
      const before = kind === "added" ? null : await textOf(join(base, path));
      const after = kind === "deleted" ? null : await textOf(join(tree, path));
      if (changesRunner(path, before, after)) tampered.push(`${path} (changes how the tests run)`);
    }
    if (kind === "deleted") continue;
    const info = await lstat(join(tree, path)).catch(() => null);
    if (info?.isSymbolicLink()) {
      links.push(path);
      const at = posix.join(workdir, path);
      const why = forbiddenLink(at, await readlink(join(tree, path))) ?? forbiddenPath(await resolveThrough(at, linkAt));
      if (why) tampered.push(`${path} (${why})`);
      // A link named like a module is one (`pluggy.py -> x.py`, `pluggy -> pkg/`).
      const module = kind === "added" ? topLevelModule(path, true) : null;
      if (module && !(await lstat(join(tree, posix.dirname(path), "__init__.py")).catch(() => null))) topLevelModules.push(module);
      continue;
    }
    if (path.endsWith(".py") && !/(^|\/)_pytest\//.test(path)) {
      const text = await textOf(join(tree, path));
      if (text !== null && IMPORTS_RUNNER.test(text)) flags.push(`${path} imports the test runner (_pytest)`);
    }
    if (kind === "added") {
      const module = topLevelModule(path);
      if (module && !(await lstat(join(tree, posix.dirname(module.path), "__init__.py")).catch(() => null))) topLevelModules.push(module);
    }
  }
  return { changed: [...changed, ...nestedGit].sort(), deleted: deleted.sort(), tampered: tampered.sort(), flags, skipped: skipped.sort(), topLevelModules, links };
}

/** Every entry under `tree`/`dir` that is not a directory (files, links, others), relative to `tree`; a `.git` is listed as itself, not walked. Links are never followed. */
async function filesUnder(tree: string, dir: string): Promise<string[]> {
  const out: string[] = [];
  async function walk(rel: string): Promise<void> {
    for (const entry of await readdir(join(tree, rel), { withFileTypes: true })) {
      const child = posix.join(rel, entry.name);
      if (entry.name === ".git") out.push(child);
      else if (entry.isDirectory()) await walk(child);
      else out.push(child);
    }
  }
  await walk(dir);
  return out;
}

/** Copies `paths` (relative; files, links or whole directories such as a nested repository, links never followed) from `tree` into `dest`, keeping their places. */
export async function stageFiles(tree: string, paths: readonly string[], dest: string): Promise<void> {
  await mkdir(dest, { recursive: true });
  for (const path of paths) {
    const target = join(dest, path);
    await mkdir(dirname(target), { recursive: true });
    await cp(join(tree, path), target, { verbatimSymlinks: true, errorOnExist: false, force: true, recursive: true });
  }
}

/**
 * Walks a staged output (a host copy of the agent's file or directory at sandbox path `at`,
 * never following links): removes Python bytecode from it, refuses links into Proctor's and the
 * kernel's paths (`tampered`), and returns the runner files in it (sandbox paths), for the
 * caller to compare with the grader's copies. `skipped` gets what went, `links` every link.
 */
export async function screenStaged(staged: string, at: string, skipped: string[], tampered: string[], links: string[] = []): Promise<{ path: string; host: string }[]> {
  const found: { path: string; host: string }[] = [];
  // Links in the output, followed where the grader will have them (a link to "/" then "x/tests").
  const linkAt = async (path: string) => (path === at ? linkTarget(staged) : path.startsWith(`${at}/`) ? linkTarget(join(staged, path.slice(at.length + 1))) : null);
  async function walk(host: string, path: string): Promise<void> {
    const info = await lstat(host);
    if (isBytecode(path)) {
      await rm(host, { recursive: true, force: true });
      skipped.push(`${path} (bytecode is not carried)`);
      return;
    }
    if (info.isSymbolicLink()) {
      links.push(path);
      const why = forbiddenLink(path, await readlink(host)) ?? forbiddenPath(await resolveThrough(path, linkAt));
      if (why) tampered.push(`${path} (${why})`);
      return;
    }
    if (info.isDirectory()) {
      for (const name of await readdir(host)) await walk(join(host, name), posix.join(path, name));
      return;
    }
    if (mayChangeRunner(path)) found.push({ path, host });
  }
  await walk(staged, at);
  return found;
}
