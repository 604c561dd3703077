import { execFile } from "node:child_process";
import { chmod, lstat, readdir, rm, writeFile } from "node:fs/promises";
import { join, posix } from "node:path";
import { promisify } from "node:util";

const run = promisify(execFile);

/**
 * Git repositories in the agent's outputs, made inert for the tests. A test that runs the image's
 * `git status` or `git diff` in the workdir reads the repository's own configuration, which can
 * name programs git then runs as root in the grader (`core.fsmonitor`, a filter's `clean`, a
 * diff driver's `textconv`, `core.hooksPath`, an `include.path` bringing more), and runs its
 * hooks (`post-index-change` fires on a plain `git status`). The graded copy keeps only
 * configuration that names no program (format, remotes, branches, identity, display settings)
 * and hooks that git will not run (not executable; links removed). History, index and refs stay.
 */

/** Configuration keys (as `git config -l` names them) that are data to git, never a program. */
const SAFE_KEYS = [
  /^core\.(repositoryformatversion|filemode|bare|logallrefupdates|ignorecase|precomposeunicode|symlinks|autocrlf|eol|safecrlf|quotepath|abbrev|compression|loosecompression|bigfilethreshold|sharedrepository|checkstat|trustctime|untrackedcache|splitindex|commitgraph|multipackindex|warnambiguousrefs|protecthfs|protectntfs|packedgitlimit|packedgitwindowsize|deltabasecachelimit)$/,
  /^extensions\.[a-z]+$/,
  /^remote\..+\.(url|pushurl|fetch|push|mirror|tagopt|prune|prunetags|skipdefaultupdate|skipfetchall|promisor|partialclonefilter)$/,
  /^branch\..+\.(remote|pushremote|merge|rebase|description)$/,
  /^submodule\..+\.(url|path|active|branch|shallow|ignore|fetchrecursesubmodules)$/,
  /^(user|author|committer)\.(name|email)$/,
  /^init\.defaultbranch$/,
  /^(gc|pack|index|fetch|transfer|pull|push|merge|rebase|status|color|log|advice|i18n|diff|commit|tag|format|rerere|help|column|blame|grep|am|apply|checkout|clone|feature|maintenance|safe|versionsort)\.[a-z]+$/,
  /^color\.[a-z]+\.[a-z]+$/,
];
/** Two-part keys of the sections above that do run something (gpg, an external diff, an editor). */
const UNSAFE_NAMES = /gpg|sign|external|tool|editor|pager|program|command|hook|cmd|helper|filter|textconv|driver|exec|proxy|askpass/;

export function safeGitKey(key: string): boolean {
  return SAFE_KEYS.some((re) => re.test(key)) && !UNSAFE_NAMES.test(key.split(".").slice(1).join("."));
}

/** Whether host dir `dir` is a git directory (a `.git`, a bare repository, a worktree's admin dir). */
async function isGitDir(dir: string): Promise<boolean> {
  const [head, config, objects, refs, commondir] = await Promise.all(["HEAD", "config", "objects", "refs", "commondir"].map((n) => lstat(join(dir, n)).catch(() => null)));
  return Boolean(head?.isFile() && ((config?.isFile() && (objects?.isDirectory() || refs?.isDirectory())) || commondir?.isFile()));
}

/** Every git directory under host dir `root` (staged outputs; links never followed), as host paths. */
export async function findGitDirs(root: string): Promise<string[]> {
  const found: string[] = [];
  async function walk(dir: string): Promise<void> {
    if (await isGitDir(dir)) {
      found.push(dir);
      return;
    }
    for (const entry of await readdir(dir, { withFileTypes: true }).catch(() => [])) {
      if (entry.isDirectory()) await walk(join(dir, entry.name));
    }
  }
  const info = await lstat(root).catch(() => null);
  if (info?.isDirectory()) await walk(root);
  return found;
}

/** A config value or subsection in git's quoted form. */
const quote = (value: string) => `"${value.replace(/\\/g, "\\\\").replace(/"/g, '\\"').replace(/\n/g, "\\n").replace(/\t/g, "\\t")}"`;

/** Rewrites host config file `path` with only its safe keys; returns the keys it dropped. */
async function sanitizeConfig(path: string): Promise<string[]> {
  const info = await lstat(path).catch(() => null);
  if (!info) return [];
  if (!info.isFile()) {
    await rm(path, { recursive: true, force: true });
    return [posix.basename(path)];
  }
  let listed: string;
  try {
    // The host's git reads the file only (no includes, no system or user config); nothing runs.
    ({ stdout: listed } = await run("git", ["config", "--file", path, "--no-includes", "--list", "-z"], {
      encoding: "utf8",
      maxBuffer: 64 * 1024 * 1024,
      env: { ...process.env, GIT_CONFIG_NOSYSTEM: "1", GIT_CONFIG_GLOBAL: "/dev/null" },
    }));
  } catch {
    // Git cannot read it, so the grader's git could not either: nothing of it is kept.
    await writeFile(path, "");
    return ["(unreadable configuration)"];
  }
  const dropped: string[] = [];
  const sections = new Map<string, string[]>();
  for (const record of listed.split("\0").filter(Boolean)) {
    const cut = record.indexOf("\n");
    const key = cut < 0 ? record : record.slice(0, cut);
    const value = cut < 0 ? "true" : record.slice(cut + 1);
    if (!safeGitKey(key)) {
      dropped.push(key);
      continue;
    }
    const first = key.indexOf(".");
    const last = key.lastIndexOf(".");
    const header = first === last ? `[${key.slice(0, first)}]` : `[${key.slice(0, first)} ${quote(key.slice(first + 1, last))}]`;
    sections.set(header, [...(sections.get(header) ?? []), `\t${key.slice(last + 1)} = ${quote(value)}`]);
  }
  if (dropped.length > 0) await writeFile(path, [...sections].map(([header, lines]) => `${header}\n${lines.join("\n")}\n`).join(""));
  return dropped;
}

/** Makes the git directory at host path `dir` inert (see above); returns what it changed, for a note. */
export async function neutralizeGitDir(dir: string): Promise<string[]> {
  const changed: string[] = [];
  // A staged copy's links point at this host's files: never read, changed or removed through.
  const realDir = async (path: string) => {
    const info = await lstat(path).catch(() => null);
    if (info && !info.isDirectory()) {
      await rm(path, { force: true });
      changed.push(posix.basename(path));
      return false;
    }
    return info !== null;
  };
  const configs = [join(dir, "config"), join(dir, "config.worktree")];
  if (await realDir(join(dir, "worktrees"))) {
    for (const entry of await readdir(join(dir, "worktrees"), { withFileTypes: true })) {
      if (entry.isDirectory()) configs.push(join(dir, "worktrees", entry.name, "config.worktree"));
    }
  }
  for (const config of configs) for (const key of await sanitizeConfig(config)) changed.push(key);
  const hooks = join(dir, "hooks");
  if (!(await realDir(hooks))) return changed;
  for (const entry of await readdir(hooks, { withFileTypes: true })) {
    const path = join(hooks, entry.name);
    if (entry.isSymbolicLink() || !entry.isFile()) {
      await rm(path, { recursive: true, force: true });
      changed.push(`hooks/${entry.name}`);
    } else if (((await lstat(path)).mode & 0o111) !== 0) {
      await chmod(path, 0o644);
      if (!entry.name.endsWith(".sample")) changed.push(`hooks/${entry.name}`);
    }
  }
  return changed;
}
