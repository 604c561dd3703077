/**
 * SWE-bench checkouts: N instances of one repository, each at its own base commit, checked out by
 * Proctor's repo cache (`RepoCache.withCheckout` reading a `--repos-dir` bare mirror in place:
 * a fresh repository holding only base_commit, as every SWE-bench trial gets; timed twice per
 * instance: the first checkout of the commit, and a repeat one from its kept pack) against a fresh
 * `git clone` per instance plus `git checkout <commit>` (what a harness without a cache does),
 * from the same bare repository on this machine: through git's transport (`file://`, what a clone
 * from a server costs without the network), and as a local clone (hard-linked objects, the
 * cheapest clone there is). A `git worktree add` from the mirror is timed too, for reference
 * (Proctor cannot hand a worktree to a sandbox: its .git is a pointer into the host's mirror, and
 * the mirror holds every later commit).
 *
 * The repository is generated (git fast-import): --files Python-like files in 10 packages, then
 * --commits commits each editing 5 files. The instances' commits are spread over the history.
 * Each instance runs the four ways back to back, in rotating order, so load drift hits all alike.
 *
 *   node --conditions=@proctor/source --import tsx bench/swe-checkout/index.ts [--instances 20] [--commits 3000] [--files 400] [--dir /tmp] [--keep]
 */
import { execFileSync } from "node:child_process";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { RepoCache } from "../../packages/engine/src/index";
import { reportFigure } from "../lib/figures";

const { values } = parseArgs({
  options: {
    // 20 x (a 3,000-commit clone + the rest) plus building the repository: 2-3 minutes on a quiet
    // 2-core machine, about 5 loaded. 7.5 commits per file, inside the range of real SWE-bench
    // repositories (roughly 5 for django, 20-30 for flask or sympy). See README.md.
    instances: { type: "string", default: "20" },
    commits: { type: "string", default: "3000" },
    files: { type: "string", default: "400" },
    dir: { type: "string", default: tmpdir() },
    keep: { type: "boolean", default: false },
  },
});
const instances = Number(values.instances);
const commits = Number(values.commits);
const files = Number(values.files);
for (const [flag, n] of [["--instances", instances], ["--commits", commits], ["--files", files]] as const) {
  if (!Number.isInteger(n) || n < 1) {
    console.error(`${flag} must be a whole number >= 1`);
    process.exit(2);
  }
}

const work = mkdtempSync(join(values.dir, "proctor-bench-swe-checkout-"));
process.on("exit", () => {
  if (!values.keep) rmSync(work, { recursive: true, force: true });
});
process.on("SIGINT", () => process.exit(130));

const git = (args: string[], options: { cwd?: string; input?: string | Buffer } = {}) =>
  execFileSync("git", ["-c", "user.name=bench", "-c", "user.email=bench@example.com", "-c", "advice.detachedHead=false", ...args], {
    cwd: options.cwd,
    input: options.input,
    maxBuffer: 1024 * 1024 * 1024,
    encoding: "utf8",
  });

// ---------- the repository ----------

/** Deterministic xorshift: every run builds the same repository. */
let seed = 0x9e3779b9;
function random(): number {
  seed ^= seed << 13;
  seed ^= seed >>> 17;
  seed ^= seed << 5;
  return (seed >>> 0) / 0x100000000;
}
const WORDS = "def class return import self value data result path name item list dict for in if else while try except with as yield lambda".split(" ");
function lines(n: number): string {
  let out = "";
  for (let i = 0; i < n; i++) {
    const indent = "    ".repeat(Math.floor(random() * 3));
    out += `${indent}${Array.from({ length: 8 }, () => WORDS[Math.floor(random() * WORDS.length)]).join(" ")}\n`;
  }
  return out;
}

/** A fast-import stream: one commit with every file, then `commits` commits editing 5 files each. */
function fastImportStream(): string {
  const paths = Array.from({ length: files }, (_, i) => `pkg/mod${i % 10}/file_${i}.py`);
  const contents = paths.map(() => lines(40 + Math.floor(random() * 160)));
  const parts: string[] = [];
  const data = (text: string) => `data ${Buffer.byteLength(text)}\n${text}\n`;
  let time = 1_700_000_000;
  const commit = (message: string, changed: number[]) => {
    parts.push(`commit refs/heads/main\ncommitter bench <bench@example.com> ${time++} +0000\n${data(message)}`);
    for (const i of changed) parts.push(`M 100644 inline ${paths[i]}\n${data(contents[i] as string)}`);
    parts.push("\n");
  };
  commit("initial import", paths.map((_, i) => i));
  for (let c = 1; c <= commits; c++) {
    const changed = Array.from({ length: 5 }, () => Math.floor(random() * files));
    for (const i of changed) contents[i] += lines(5);
    commit(`change ${c}`, changed);
  }
  return parts.join("");
}

const source = join(work, "source");
git(["init", "--quiet", "--initial-branch=main", source]);
git(["fast-import", "--quiet"], { cwd: source, input: fastImportStream() });
const mirror = join(work, "mirrors", "acme__project.git");
git(["clone", "--quiet", "--bare", source, mirror]);
git(["--git-dir", mirror, "gc", "--quiet"]);
rmSync(source, { recursive: true, force: true });
const history = git(["--git-dir", mirror, "rev-list", "--reverse", "main"]).trim().split("\n");
const picks = Array.from({ length: instances }, (_, i) => history[Math.floor(((i + 1) * (history.length - 1)) / instances)] as string);
const packBytes = Number(/size-pack: (\d+)/.exec(git(["--git-dir", mirror, "count-objects", "-v"]))?.[1] ?? "0") * 1024;
console.log(`repository: ${history.length} commits, ${files} files, pack ${(packBytes / 1024 / 1024).toFixed(1)} MB; ${instances} instances; load average ${loadavg()[0]?.toFixed(1)}`);

// ---------- the three ways ----------

const checkouts = join(work, "checkouts");
const cache = new RepoCache(join(work, "repo-cache"));

/** The tree must be there and at the commit, or the timing means nothing. */
function confirm(dir: string, commit: string): void {
  const head = git(["rev-parse", "HEAD"], { cwd: dir }).trim();
  if (head !== commit || !existsSync(join(dir, "pkg", "mod0", "file_0.py"))) throw new Error(`checkout at ${head}, expected ${commit}`);
}

/** A first checkout of the commit (its pack built from the mirror), then a repeat one (the kept pack). */
async function proctor(commit: string): Promise<{ first: number; repeat: number }> {
  const once = async () => {
    const start = performance.now();
    let elapsed = 0;
    await cache.withCheckout(mirror, commit, async (dir) => {
      elapsed = performance.now() - start;
      confirm(dir, commit);
    });
    return elapsed;
  };
  const first = await once();
  return { first, repeat: await once() };
}

function clone(commit: string, n: number, local: boolean): number {
  const dir = join(checkouts, `clone-${n}`);
  const start = performance.now();
  git(["clone", "--quiet", "--no-checkout", local ? mirror : `file://${mirror}`, dir]);
  git(["checkout", "--quiet", "--detach", commit], { cwd: dir });
  const elapsed = performance.now() - start;
  confirm(dir, commit);
  rmSync(dir, { recursive: true, force: true });
  return elapsed;
}

function worktree(commit: string, n: number): number {
  const dir = join(checkouts, `worktree-${n}`);
  const start = performance.now();
  git(["--git-dir", mirror, "worktree", "add", "--quiet", "--detach", dir, commit]);
  const elapsed = performance.now() - start;
  confirm(dir, commit);
  git(["--git-dir", mirror, "worktree", "remove", "--force", dir]);
  return elapsed;
}

// One untimed pass each (on the root commit, which no instance uses, so every instance's first
// checkout really is one): the page cache and git's own start-up are warm for all of them.
await proctor(history[0] as string);
clone(history[0] as string, -1, false);
clone(history[0] as string, -1, true);
worktree(history[0] as string, -1);

const totals = { proctor: 0, repeat: 0, clone: 0, localClone: 0, worktree: 0 };
type Way = "proctor" | "clone" | "localClone" | "worktree";
const ways: Way[] = ["proctor", "clone", "localClone", "worktree"];
const loadBefore = loadavg()[0] ?? 0;
for (const [n, commit] of picks.entries()) {
  const order = [...ways.slice(n % ways.length), ...ways.slice(0, n % ways.length)];
  for (const way of order) {
    if (way === "proctor") {
      const { first, repeat } = await proctor(commit);
      totals.proctor += first;
      totals.repeat += repeat;
    } else {
      totals[way] += way === "worktree" ? worktree(commit, n) : clone(commit, n, way === "localClone");
    }
  }
}
const loadAfter = loadavg()[0] ?? 0;

const per = (ms: number) => ms / instances;
console.log(
  `per instance: Proctor first checkout ${per(totals.proctor).toFixed(0)} ms, repeat checkout ${per(totals.repeat).toFixed(0)} ms; ` +
    `git clone file:// + checkout ${per(totals.clone).toFixed(0)} ms, local git clone + checkout ${per(totals.localClone).toFixed(0)} ms, ` +
    `git worktree add ${per(totals.worktree).toFixed(0)} ms (reference)`,
);
console.log(
  `ratio Proctor / clone: first ${(totals.proctor / totals.clone).toFixed(2)}x, repeat ${(totals.repeat / totals.clone).toFixed(2)}x (target <= 0.2x); ` +
    `Proctor / local clone: first ${(totals.proctor / totals.localClone).toFixed(2)}x, repeat ${(totals.repeat / totals.localClone).toFixed(2)}x; ` +
    `worktree / clone: ${(totals.worktree / totals.clone).toFixed(2)}x; load average ${loadBefore.toFixed(1)} -> ${loadAfter.toFixed(1)}`,
);
for (const [way, what] of [["proctor", "first checkout of each base commit"], ["repeat", "repeat checkout (kept pack)"]] as const) {
  for (const [baseline, label] of [["clone", "git clone file:// + checkout"], ["localClone", "local git clone (hard links) + checkout"]] as const) {
    reportFigure({
      bench: "swe-checkout",
      figure: `SWE checkout, ${instances} instances of one repo (${history.length} commits, ${files} files): repo cache ${what} vs ${label}`,
      proctor: { value: per(totals[way]), unit: "ms" },
      baseline: { value: per(totals[baseline]), unit: "ms", label },
      ratio: totals[way] / totals[baseline],
      ratioMeaning: "Proctor time / clone time",
      target: baseline === "clone" ? { on: "ratio", op: "<=", value: 0.2 } : null,
    });
  }
}
