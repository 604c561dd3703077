import { readFile, readdir, stat } from "node:fs/promises";
import { basename, join, resolve } from "node:path";
import { RunConfig, RunSummary, TrialResult } from "@proctor/schema";
import { summarize } from "@proctor/reward";
import { RunReadError } from "./errors";
import { readFirstFailure } from "./failure";

/** Everything a report needs from one run directory. */
export interface LoadedRun {
  dir: string;
  runId: string;
  /** run.json without its hash; null when absent (a run dir copied without it). */
  config: RunConfig | null;
  summary: RunSummary;
  /** Last line per trial id, in the order they finished. */
  results: TrialResult[];
  /** results.jsonl lines that did not parse (a half-written last line while the run is going). */
  skippedLines: number;
  /**
   * run.json and summary.json as written (parsed JSON, before the schema dropped fields this
   * version does not know): the leaderboard reads optional fields such as a dataset's `origins`
   * and cost totals from here when the schema does not carry them.
   */
  raw?: { config: unknown; summary: unknown };
  /** After `withFirstFailures(run)`: the first failure (test or line) the verifier's output of each failed trial names, by trial id (the first 200 failed trials). */
  firstFailures?: Record<string, string>;
}

/** How many failed trials' verifier outputs a report reads for their first failure. */
const FAILURES_READ = 200;

async function readText(file: string): Promise<string | null> {
  try {
    return await readFile(file, "utf8");
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return null;
    throw new RunReadError(`${file}: cannot read it: ${(error as Error).message}`, { cause: error });
  }
}

/** Parses results.jsonl; lines that are not a TrialResult are counted, not thrown. */
export function parseResults(text: string): { results: TrialResult[]; skipped: number } {
  const byTrial = new Map<string, TrialResult>();
  let skipped = 0;
  for (const line of text.split("\n")) {
    if (line.trim() === "") continue;
    let value: unknown;
    try {
      value = JSON.parse(line);
    } catch {
      skipped++;
      continue;
    }
    const parsed = TrialResult.safeParse(value);
    if (!parsed.success) {
      skipped++;
      continue;
    }
    byTrial.delete(parsed.data.trialId);
    byTrial.set(parsed.data.trialId, parsed.data);
  }
  return { results: [...byTrial.values()], skipped };
}

/** True when `dir` looks like a run directory (run.json, results.jsonl or summary.json). */
export async function isRunDir(dir: string): Promise<boolean> {
  for (const name of ["run.json", "results.jsonl", "summary.json"]) {
    const s = await stat(join(dir, name)).catch(() => null);
    if (s?.isFile()) return true;
  }
  return false;
}

/**
 * Reads a run directory. summary.json is taken as written; without one (or one this version does
 * not understand) the summary is computed from results.jsonl.
 */
export async function loadRun(dir: string): Promise<LoadedRun> {
  const root = resolve(dir);
  if (!(await isRunDir(root))) throw new RunReadError(`${dir}: not a run directory (no run.json, results.jsonl or summary.json)`);
  const configText = await readText(join(root, "run.json"));
  let config: RunConfig | null = null;
  const raw: { config: unknown; summary: unknown } = { config: null, summary: null };
  if (configText !== null) {
    try {
      raw.config = JSON.parse(configText) as unknown;
      const parsed = RunConfig.safeParse(raw.config);
      config = parsed.success ? parsed.data : null;
    } catch {
      config = null;
    }
  }
  const { results, skipped } = parseResults((await readText(join(root, "results.jsonl"))) ?? "");
  const summaryText = await readText(join(root, "summary.json"));
  let summary: RunSummary | null = null;
  if (summaryText !== null) {
    try {
      raw.summary = JSON.parse(summaryText) as unknown;
      const parsed = RunSummary.safeParse(raw.summary);
      summary = parsed.success ? parsed.data : null;
    } catch {
      summary = null; // rewritten atomically, but a copy may be cut short
    }
  }
  const runId = summary?.runId ?? config?.runId ?? basename(root);
  if (summary === null) {
    const times = results.map((r) => r.startedAt).sort();
    const ends = results.map((r) => r.finishedAt).sort();
    summary = summarize({
      runId,
      results,
      plannedTrials: config ? config.tasks.length * config.attempts : results.length,
      attempts: config?.attempts ?? 1,
      startedAt: times[0] ?? new Date(0).toISOString(),
      now: ends[ends.length - 1] ?? times[0] ?? new Date(0).toISOString(),
      status: "running",
    });
  }
  return { dir: root, runId, config, summary, results, skippedLines: skipped, raw };
}

/** The run with the first failure of each failed trial (the first 200) read from its verifier output. */
export async function withFirstFailures(run: LoadedRun): Promise<LoadedRun> {
  const firstFailures: Record<string, string> = {};
  for (const r of run.results.filter((x) => x.status === "failed").slice(0, FAILURES_READ)) {
    const found = await readFirstFailure(r, join(run.dir, "trials", r.trialId));
    if (found) firstFailures[r.trialId] = found.name === "tests' output" ? found.message : `${found.name}: ${found.message}`;
  }
  return { ...run, firstFailures };
}

/**
 * The run directories named: a run dir stands for itself, any other dir for the run dirs directly
 * inside it (newest name last, as run ids start with a timestamp).
 */
export async function findRunDirs(paths: readonly string[]): Promise<string[]> {
  const out: string[] = [];
  for (const path of paths) {
    const root = resolve(path);
    if (await isRunDir(root)) {
      out.push(root);
      continue;
    }
    const entries = await readdir(root, { withFileTypes: true }).catch((error: unknown) => {
      throw new RunReadError(`${path}: cannot list it: ${(error as Error).message}`, { cause: error });
    });
    for (const entry of entries.filter((e) => e.isDirectory()).sort((a, b) => (a.name < b.name ? -1 : 1))) {
      if (await isRunDir(join(root, entry.name))) out.push(join(root, entry.name));
    }
  }
  return out;
}

/** A short name for the agent of a run: oracle, nop, the code dir's name, or a custom agent's. */
export function agentLabel(run: Pick<LoadedRun, "config" | "results">): string {
  const fromResult = run.results.find((r) => r.agent?.name)?.agent?.name;
  const spec = run.config?.agent;
  if (!spec) return fromResult ?? "-";
  if (spec.kind === "code") return `code:${basename(spec.dir)}`;
  if (spec.kind === "custom") return spec.name;
  return fromResult ?? spec.kind;
}

/** The model a model-driven agent used, when the results say. */
export function modelLabel(run: Pick<LoadedRun, "results">): string | null {
  return run.results.find((r) => r.agent?.model)?.agent?.model ?? null;
}
