import { open, readdir } from "node:fs/promises";
import { join, posix } from "node:path";
import { SANDBOX_PATHS } from "@proctor/sandbox";
import type { TaskSpec } from "@proctor/schema";

export type GradingMode = "fresh" | "shared";

/** Where a trial is graded and why. */
export interface GradingPlan {
  mode: GradingMode;
  why: string;
  /**
   * Fresh mode: the sandbox paths brought from the agent's sandbox (for a repository task, the
   * workdir, as a diff against the base commit). Shared mode: the paths the verifier may load
   * although the agent changed them (the workdir, declared outputs, paths the tests name).
   */
  outputs: string[];
  /** Fresh mode for a repository task: the outputs are the repository's diff. */
  repository: boolean;
}

/** What decided the mode when nothing was asked for explicitly. */
export interface PlanInput {
  task: TaskSpec;
  /** The agent sandbox's workdir (the image's WORKDIR when the task names none). */
  workdir: string;
  /** `--grading` for the whole run, or null. */
  runGrading: GradingMode | null;
}

/** Directories a task's tests may name without reading anything the agent produced outside its workdir. */
const HARNESS_ROOTS = [SANDBOX_PATHS.tests, SANDBOX_PATHS.logs, "/tmp", "/var/tmp", "/dev", "/proc", "/sys", "/usr/bin/env"];
/** Test files larger than this are not read for paths (fixtures, data). */
const SCAN_MAX_BYTES = 1024 * 1024;
const SCAN_MAX_FILES = 2000;

/**
 * Absolute paths in a text: a `/` that starts a word (not inside a URL, a relative path, or after
 * an expansion such as `$HOME/.x`, `${W}/x`, `"$W"/x`, or in `1/2`), followed by path characters.
 */
const ABSOLUTE_PATH = /(?<![\w.:/~$}-])(?<![}\w]["'])\/[A-Za-z0-9._+-]+(?:\/[A-Za-z0-9._+-]+)*/g;

function under(path: string, root: string): boolean {
  const r = root.replace(/\/+$/, "") || "/";
  return r === "/" || path === r || path.startsWith(`${r}/`);
}

/** Paths the task's test files name outside the workdir and the verifier's own directories (sorted, at most `limit`). */
export async function pathsNamedByTests(testsDir: string | null, workdir: string, limit = 20): Promise<string[]> {
  if (testsDir === null) return [];
  const found = new Set<string>();
  let files = 0;
  async function walk(dir: string): Promise<void> {
    let entries;
    try {
      entries = await readdir(dir, { withFileTypes: true });
    } catch {
      return;
    }
    for (const entry of entries) {
      if (files >= SCAN_MAX_FILES || found.size >= limit) return;
      const path = join(dir, entry.name);
      if (entry.isDirectory()) await walk(path);
      else if (entry.isFile()) {
        files++;
        for (const named of await namedIn(path)) {
          if (named.length > 1 && ![workdir, ...HARNESS_ROOTS].some((root) => under(named, root))) found.add(posix.normalize(named));
        }
      }
    }
  }
  await walk(testsDir);
  return [...found].sort().slice(0, limit);
}

async function namedIn(file: string): Promise<string[]> {
  const handle = await open(file, "r").catch(() => null);
  if (!handle) return [];
  try {
    const { size } = await handle.stat();
    if (size > SCAN_MAX_BYTES) return [];
    const data = await handle.readFile();
    if (data.includes(0)) return [];
    // A shebang names the interpreter, not something the agent produced.
    const text = data.toString("utf8").replace(/^#!.*$/gm, "");
    return text.match(ABSOLUTE_PATH) ?? [];
  } finally {
    await handle.close();
  }
}

/**
 * Where to grade: the run's `--grading`, else the task's `[verifier] grading`, else by kind:
 * repositories and term-executor checks are graded fresh (the diff at the base commit, the
 * workdir); other tasks fresh when their outputs are known (declared, or the workdir when the
 * tests name nothing outside it), and in the agent's sandbox (audited) when their tests read
 * paths elsewhere.
 */
export async function planGrading(input: PlanInput): Promise<GradingPlan> {
  const { task, workdir, runGrading } = input;
  const verifier = task.verifier;
  const repository = task.workspace !== null;
  const declared = verifier.outputs ?? [];
  const freshOutputs = declared.length > 0 ? declared : [workdir];
  const asked = runGrading ?? (verifier.grading && verifier.grading !== "auto" ? verifier.grading : null);
  const source = runGrading ? `--grading ${runGrading}` : `task.toml [verifier] grading = "${asked}"`;
  const named = asked === "fresh" || repository || verifier.mode === "checks" || declared.length > 0 ? [] : await pathsNamedByTests(verifier.testsDir, workdir);
  const sharedOutputs = [...new Set([workdir, ...declared, ...named])];

  if (asked === "fresh") return { mode: "fresh", why: source, outputs: freshOutputs, repository };
  if (asked === "shared") return { mode: "shared", why: source, outputs: sharedOutputs, repository };
  if (repository) return { mode: "fresh", why: "a repository task: its diff is graded at the base commit", outputs: [workdir], repository };
  if (verifier.mode === "checks") return { mode: "fresh", why: "a checks task: the workdir is graded", outputs: freshOutputs, repository };
  if (declared.length > 0) return { mode: "fresh", why: "the task declares its outputs ([verifier] outputs)", outputs: declared, repository };
  if (named.length === 0) return { mode: "fresh", why: `the tests name nothing outside ${workdir}`, outputs: freshOutputs, repository };
  const shown = named.slice(0, 3).join(", ") + (named.length > 3 ? ", ..." : "");
  return { mode: "shared", why: `the tests read ${shown} outside ${workdir}`, outputs: sharedOutputs, repository };
}
