import { isCleanPass, type RunBudgetState, type RunCost, type TrialResult } from "@proctor/schema";
import {
  bootstrapMeanCI,
  compareRuns,
  costSummary,
  flakyTasks,
  meanOverTasks,
  passAtKTable,
  taskOutcomes,
  wilsonInterval,
  type FlakyTask,
  type Interval,
  type MeanWithError,
  type PassAtK,
  type RunComparison,
  type TaskOutcome,
} from "@proctor/reward";
import { agentLabel, modelLabel, type LoadedRun } from "./load";
import { diffPins, pinsOf } from "./pins";
import { competitionReport, type CompetitionRow, type CompetitionTotals } from "./competition";

/** A trial that did not pass, or passed with something to audit, and why. */
export interface Problem {
  trialId: string;
  taskId: string;
  attempt: number;
  category: string | null;
  status: TrialResult["status"];
  /** The error's kind (infra, setup, agent, verifier), null for a plain failure. */
  kind: string | null;
  /** One line: the error message, or what failed (reward, exit code, timeout, failed checks). */
  reason: string;
  /** Integrity findings: `tampered: <paths>`, `survivors: <n> (<commands>)`, `flagged`. */
  flags: string[];
  /** Where the verifier's output is, relative to the run dir. */
  verifierLog: string;
}

export interface CategoryRow {
  category: string;
  total: number;
  passed: number;
  failed: number;
  errored: number;
  passRate: number | null;
}

export interface RunReport {
  runId: string;
  dir: string;
  agent: string;
  model: string | null;
  status: string;
  durationMs: number;
  startedAt: string;
  trials: { planned: number; total: number; passed: number; failed: number; errored: number };
  /** passed / finished trials, errors count as not passed; Wilson CI. */
  passRate: { value: number | null; passed: number; total: number; of: string; ci: Interval | null };
  /** Mean reward over tasks ± standard error, with a seeded bootstrap CI over tasks. */
  meanReward: MeanWithError & { ci: Interval | null };
  attempts: number;
  passAtK: PassAtK[];
  byCategory: CategoryRow[];
  errorsByKind: Record<string, number>;
  tasks: TaskOutcome[];
  problems: Problem[];
  /** Competition tasks: per-competition score and medals, and the any-medal rate ± SEM over seeds. */
  competitions: { rows: CompetitionRow[]; totals: CompetitionTotals | null };
  /** What the trials cost (model tokens + compute) per run, task and pass; null when nothing was priced (no model usage, no compute price). */
  cost: RunCost | null;
  /** The run's budgets, what is spent and whether one stopped the run; null without a budget. */
  budget: RunBudgetState | null;
}

export interface ComparisonReport {
  a: RunReport;
  b: RunReport;
  comparison: RunComparison;
  /** Each pin that differs between the runs (Proctor, agent, model, task content, images, origins); empty when they agree. */
  pinsDiffer: string[];
}

/** One line saying why a trial did not pass. */
export function trialReason(r: TrialResult): string {
  if (r.error) return r.error.message;
  const parts: string[] = [];
  const c = r.competition;
  if (c) parts.push(c.valid ? `score ${c.score} ${c.metric}: no medal` : `invalid submission: ${c.note ?? "the grader said so"}`);
  else if (r.status === "failed") parts.push(`reward ${r.reward ?? "-"}`);
  if (r.agent?.timedOut) parts.push("agent timed out");
  else if (r.agent?.exitCode !== null && r.agent?.exitCode !== undefined && r.agent.exitCode !== 0) parts.push(`agent exit code ${r.agent.exitCode}`);
  const failedChecks = (r.checks ?? []).filter((c) => !c.passed).map((c) => (c.timedOut ? `${c.name} (timed out)` : c.name));
  if (failedChecks.length > 0) parts.push(`failed checks: ${failedChecks.join(", ")}`);
  // A fail graded without files the agent changed elsewhere: say so, it may be why.
  const note = r.integrity?.note;
  if (r.status === "failed" && note?.startsWith("graded with only ")) parts.push(note);
  return parts.join("; ");
}

/** Integrity findings worth a reader's attention. */
export function trialFlags(r: TrialResult): string[] {
  const flags: string[] = [];
  const integrity = r.integrity;
  if (!integrity) return flags;
  if (integrity.tampered.length > 0) flags.push(`tampered: ${integrity.tampered.join(", ")}`);
  if (integrity.survivors.length > 0) {
    const commands = integrity.survivors.slice(0, 3).map((s) => s.command.split(" ")[0]).join(", ");
    flags.push(`survivors: ${integrity.survivors.length} (${commands}${integrity.survivors.length > 3 ? ", ..." : ""})`);
  }
  if (integrity.flagged) flags.push(`flagged: ${(integrity.flags ?? []).join("; ") || "passed with agent processes alive"} (not counted as a pass)`);
  return flags;
}

/** The reason and the integrity flags it does not already say, in one line. */
export function fullReason(r: TrialResult): string {
  const reason = trialReason(r);
  return [reason, ...trialFlags(r).filter((f) => !reason.includes(f))].filter(Boolean).join("; ");
}

function problemsOf(results: readonly TrialResult[], firstFailures: Readonly<Record<string, string>> = {}): Problem[] {
  return results
    .filter((r) => r.status !== "passed" || trialFlags(r).length > 0)
    .sort((x, y) => (x.taskId < y.taskId ? -1 : x.taskId > y.taskId ? 1 : x.attempt - y.attempt))
    .map((r) => ({
      trialId: r.trialId,
      taskId: r.taskId,
      attempt: r.attempt,
      category: r.category,
      status: r.status,
      kind: r.error?.kind ?? null,
      reason: firstFailures[r.trialId] ? `${trialReason(r)}; first failure: ${firstFailures[r.trialId]}` : trialReason(r),
      // An agent error "tampered: <paths>" already says what the flag would.
      flags: trialFlags(r).filter((f) => !trialReason(r).includes(f)),
      verifierLog: `trials/${r.trialId}/verifier/${r.competition ? "grade-stdout.txt" : "test-stdout.txt"}`,
    }));
}

/** The statistics and problem list of one run. `seed` makes the bootstrap reproducible. */
export function buildRunReport(run: LoadedRun, options: { seed?: number; resamples?: number } = {}): RunReport {
  const s = run.summary;
  const tasks = taskOutcomes(run.results);
  const attempts = run.config?.attempts ?? Math.max(1, ...tasks.map((t) => t.attempts));
  const mean = meanOverTasks(tasks);
  const finished = run.results.length;
  const passed = run.results.filter(isCleanPass).length;
  const byCategory = new Map<string, CategoryRow>();
  for (const r of run.results) {
    const category = r.category ?? "uncategorized";
    const row = byCategory.get(category) ?? { category, total: 0, passed: 0, failed: 0, errored: 0, passRate: null };
    row.total++;
    if (isCleanPass(r)) row.passed++;
    else if (r.status === "failed" || r.status === "passed") row.failed++;
    else row.errored++;
    row.passRate = row.passed / row.total;
    byCategory.set(category, row);
  }
  const errorsByKind: Record<string, number> = {};
  for (const r of run.results) if (r.status === "error") errorsByKind[r.error?.kind ?? "unknown"] = (errorsByKind[r.error?.kind ?? "unknown"] ?? 0) + 1;
  return {
    runId: run.runId,
    dir: run.dir,
    agent: agentLabel(run),
    model: modelLabel(run),
    status: s.status,
    durationMs: s.durationMs,
    startedAt: s.startedAt,
    trials: { planned: s.trials.planned, total: finished, passed, failed: run.results.filter((r) => r.status === "failed").length, errored: run.results.filter((r) => r.status === "error").length },
    passRate: { value: finished === 0 ? null : passed / finished, passed, total: finished, of: "finished trials (errors count as not passed)", ci: wilsonInterval(passed, finished) },
    meanReward: { ...mean, ci: bootstrapMeanCI(tasks.map((t) => t.meanReward), { seed: options.seed, resamples: options.resamples }) },
    attempts,
    passAtK: attempts > 1 ? passAtKTable(tasks, attempts) : [],
    byCategory: [...byCategory.values()].sort((x, y) => (x.category < y.category ? -1 : 1)),
    errorsByKind,
    tasks,
    problems: problemsOf(run.results, run.firstFailures),
    competitions: competitionReport(run.results),
    cost: run.results.some((r) => r.agent?.usage || r.compute?.costUsd !== undefined) ? costSummary(run.results, run.config?.pricing?.source ?? s.cost?.source ?? null) : null,
    budget: s.budget ?? null,
  };
}

/** Two runs on the same tasks: both reports and the paired comparison (B against A). */
export function buildComparison(a: LoadedRun, b: LoadedRun, options: { seed?: number; resamples?: number } = {}): ComparisonReport {
  return { a: buildRunReport(a, options), b: buildRunReport(b, options), comparison: compareRuns(a.results, b.results, options), pinsDiffer: diffPins(pinsOf(a), pinsOf(b)) };
}

/**
 * Flaky task definitions across >= 3 runs of a reference agent: the oracle must always pass and
 * nop must never pass, so a task whose outcome flips between such runs is flaky as defined.
 */
export interface FlakyReport {
  /** Run ids by reference agent; other agents' runs are not looked at. */
  runs: { oracle: string[]; nop: string[]; other: string[] };
  /** True when 3 or more oracle runs or 3 or more nop runs were given. */
  checked: boolean;
  tasks: FlakyTask[];
}

function referenceAgent(run: LoadedRun): "oracle" | "nop" | null {
  const kind = run.config?.agent.kind ?? run.results.find((r) => r.agent?.name)?.agent?.name;
  return kind === "oracle" || kind === "nop" ? kind : null;
}

/** The flaky-task section for 3 or more runs of which some are oracle/nop runs; null otherwise (nothing to say). */
export function buildFlakyReport(runs: readonly LoadedRun[]): FlakyReport | null {
  if (runs.length < 3) return null;
  const byAgent: FlakyReport["runs"] = { oracle: [], nop: [], other: [] };
  const reference: { agent: "oracle" | "nop"; results: readonly TrialResult[] }[] = [];
  for (const run of runs) {
    const agent = referenceAgent(run);
    byAgent[agent ?? "other"].push(run.runId);
    if (agent) reference.push({ agent, results: run.results });
  }
  if (reference.length === 0) return null;
  const checked = byAgent.oracle.length >= 3 || byAgent.nop.length >= 3;
  return { runs: byAgent, checked, tasks: checked ? flakyTasks(reference) : [] };
}
