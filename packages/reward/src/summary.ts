import { isCleanPass, type CostGroup, type GroupSummary, type Rate, type RunBudgetState, type RunCost, type RunSummary, type TrialResult } from "@proctor/schema";
import { mean, passAtKEstimate, standardError } from "./stats";

export interface SummarizeInput {
  runId: string;
  /** Finished trials in the order they were recorded; for a repeated trialId the last one wins. */
  results: readonly TrialResult[];
  /** Tasks x attempts the run means to execute. */
  plannedTrials: number;
  /** Attempts per task; pass@k is computed for k = 1..attempts when attempts > 1. */
  attempts: number;
  startedAt: string | Date;
  now: string | Date;
  status: RunSummary["status"];
  /** Where the run's prices come from (run.json `pricing.source`); summary.json's `cost` records it. */
  priceSource?: { name: string; version: string } | null;
  /** The run's budgets and which one stopped it (null: none yet); summary.json's `budget` adds what is spent. */
  budget?: Pick<RunBudgetState, "maxCostUsd" | "maxTokens" | "trialMaxCostUsd" | "onBudget" | "exhausted">;
}

export const UNCATEGORIZED = "uncategorized";
export const UNKNOWN_DIFFICULTY = "unknown";

/** The reward a finished trial contributes to means: an error, and a pass flagged for audit, score 0. */
export function scoredReward(result: TrialResult): number {
  if (result.status === "error" || (result.status === "passed" && !isCleanPass(result))) return 0;
  // A passed/failed trial without a numeric reward (e.g. graded by check scripts) scores its verdict.
  return result.reward ?? (result.status === "passed" ? 1 : 0);
}

function rate(numerator: number, denominator: number, of: string): Rate {
  return { value: denominator === 0 ? null : numerator / denominator, numerator, denominator, of };
}

function toIso(time: string | Date): string {
  return typeof time === "string" ? new Date(time).toISOString() : time.toISOString();
}

/** Keeps the last result per trialId (a resume may append a duplicate line). */
export function latestResults(results: readonly TrialResult[]): TrialResult[] {
  const byTrial = new Map<string, TrialResult>();
  for (const result of results) {
    byTrial.delete(result.trialId);
    byTrial.set(result.trialId, result);
  }
  return [...byTrial.values()];
}

function group(results: readonly TrialResult[]): GroupSummary {
  let passed = 0;
  let flagged = 0;
  let failed = 0;
  let errored = 0;
  for (const r of results) {
    if (isCleanPass(r)) passed++;
    else if (r.status === "passed") flagged++;
    else if (r.status === "failed") failed++;
    else errored++;
  }
  const total = results.length;
  return {
    total,
    passed,
    flagged,
    failed,
    errored,
    passRate: total === 0 ? null : passed / total,
    meanReward: mean(results.map(scoredReward)),
  };
}

function groupBy(results: readonly TrialResult[], key: (r: TrialResult) => string): Record<string, GroupSummary> {
  const groups = new Map<string, TrialResult[]>();
  for (const r of results) {
    const k = key(r);
    const list = groups.get(k);
    if (list) list.push(r);
    else groups.set(k, [r]);
  }
  const out: Record<string, GroupSummary> = {};
  for (const k of [...groups.keys()].sort()) out[k] = group(groups.get(k) as TrialResult[]);
  return out;
}

function byTask(results: readonly TrialResult[]): Map<string, TrialResult[]> {
  const tasks = new Map<string, TrialResult[]>();
  for (const r of results) {
    const list = tasks.get(r.taskId);
    if (list) list.push(r);
    else tasks.set(r.taskId, [r]);
  }
  return tasks;
}

/**
 * Unbiased pass@k for k = 1..attempts: for each k, the mean over tasks with at least k finished
 * attempts (errors count as finished, not passed) of 1 - C(n-c, k)/C(n, k). A k no task has
 * reached yet is left out of the record.
 */
export function passAtK(results: readonly TrialResult[], attempts: number): Record<string, number> {
  const counts = [...byTask(results).values()].map((list) => ({
    n: list.length,
    c: list.filter(isCleanPass).length,
  }));
  const out: Record<string, number> = {};
  for (let k = 1; k <= attempts; k++) {
    const estimates = counts.filter(({ n }) => n >= k).map(({ n, c }) => passAtKEstimate(n, c, k));
    const value = mean(estimates);
    if (value !== null) out[String(k)] = value;
  }
  return out;
}

/** Model usage summed over the trials whose agent reported it; nothing when none did. */
function usageTotals(results: readonly TrialResult[]): Pick<RunSummary, "usage"> {
  const withUsage = results.filter((r) => r.agent?.usage);
  if (withUsage.length === 0) return {};
  const usage = { inputTokens: 0, outputTokens: 0, requests: 0, retries: 0, trials: withUsage.length };
  const cache = { read: 0, write: 0, seen: false };
  let cost: number | null = null;
  for (const r of withUsage) {
    const u = r.agent?.usage;
    if (!u) continue;
    usage.inputTokens += u.inputTokens;
    usage.outputTokens += u.outputTokens;
    usage.requests += u.requests;
    usage.retries += u.retries;
    if (u.cacheReadTokens !== undefined) cache.read += u.cacheReadTokens;
    if (u.cacheWriteTokens !== undefined) cache.write += u.cacheWriteTokens;
    if (u.cacheReadTokens !== undefined || u.cacheWriteTokens !== undefined) cache.seen = true;
    if (u.costUsd !== undefined) cost = (cost ?? 0) + u.costUsd;
  }
  return {
    usage: {
      ...usage,
      ...(cache.seen ? { cacheReadTokens: cache.read, cacheWriteTokens: cache.write } : {}),
      ...(cost !== null ? { costUsd: Math.round(cost * 1e6) / 1e6 } : {}),
    },
  };
}

const round6 = (usd: number) => Math.round(usd * 1e6) / 1e6;

/**
 * What one trial cost in USD (model tokens + sandbox compute), or null when its model usage has no
 * price. A trial without model usage (oracle, nop, a code agent with no model) costs its compute.
 */
export function trialCostUsd(result: TrialResult): number | null {
  const usage = result.agent?.usage;
  if (usage && usage.costUsd === undefined && (usage.inputTokens > 0 || usage.outputTokens > 0)) return null;
  return round6((usage?.costUsd ?? 0) + (result.compute?.costUsd ?? 0));
}

/** Model tokens (input + output) one trial used. */
function trialTokens(result: TrialResult): number {
  const usage = result.agent?.usage;
  return usage ? usage.inputTokens + usage.outputTokens : 0;
}

/** What a run's trials spent against its budgets: USD over priced trials, and tokens. */
export function spending(results: readonly TrialResult[]): { usd: number; tokens: number } {
  let usd = 0;
  let tokens = 0;
  for (const r of latestResults(results)) {
    usd += trialCostUsd(r) ?? 0;
    tokens += trialTokens(r);
  }
  return { usd: round6(usd), tokens };
}

/** summary.json's `cost`: per run, per task and per pass, with the trials that have no price counted apart. */
export function costSummary(results: readonly TrialResult[], source: RunCost["source"]): RunCost {
  let tokensUsd = 0;
  let computeUsd = 0;
  let cpuSeconds = 0;
  let measured = false;
  let computePriced = false;
  let priced = 0;
  let passed = 0;
  const reasons = new Set<string>();
  const tasks = new Map<string, CostGroup>();
  for (const r of results) {
    const cost = trialCostUsd(r);
    const task = tasks.get(r.taskId) ?? { trials: 0, passed: 0, usd: null, unpriced: 0 };
    task.trials++;
    if (isCleanPass(r)) {
      task.passed++;
      passed++;
    }
    if (r.compute?.cpuSeconds != null) {
      measured = true;
      cpuSeconds += r.compute.cpuSeconds;
    }
    if (cost === null) {
      task.unpriced++;
      const why = r.agent?.usage?.unpriced;
      if (why && reasons.size < 5) reasons.add(why);
    } else {
      priced++;
      tokensUsd += r.agent?.usage?.costUsd ?? 0;
      if (r.compute?.costUsd !== undefined) {
        computePriced = true;
        computeUsd += r.compute.costUsd;
      }
      task.usd = round6((task.usd ?? 0) + cost);
    }
    tasks.set(r.taskId, task);
  }
  const total = priced > 0 ? round6(tokensUsd + computeUsd) : null;
  return {
    source,
    totalUsd: total,
    tokensUsd: priced > 0 ? round6(tokensUsd) : null,
    computeUsd: computePriced ? round6(computeUsd) : null,
    cpuSeconds: measured ? Math.round(cpuSeconds * 1000) / 1000 : null,
    pricedTrials: priced,
    unpricedTrials: results.length - priced,
    unpricedReasons: [...reasons],
    perTrialUsd: total !== null && priced > 0 ? round6(total / priced) : null,
    perPassUsd: total !== null && passed > 0 ? round6(total / passed) : null,
    byTask: Object.fromEntries([...tasks.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))),
  };
}

function budgetState(results: readonly TrialResult[], planned: number, budget: NonNullable<SummarizeInput["budget"]>): RunBudgetState {
  const spent = spending(results);
  return {
    ...(budget.maxCostUsd !== undefined ? { maxCostUsd: budget.maxCostUsd } : {}),
    ...(budget.maxTokens !== undefined ? { maxTokens: budget.maxTokens } : {}),
    ...(budget.trialMaxCostUsd !== undefined ? { trialMaxCostUsd: budget.trialMaxCostUsd } : {}),
    onBudget: budget.onBudget,
    spentUsd: spent.usd,
    spentTokens: spent.tokens,
    exhausted: budget.exhausted,
    notRun: budget.exhausted ? Math.max(0, planned - results.length) : 0,
  };
}

/** Aggregates finished trials into summary.json. Every rate carries its numerator, denominator and what it counts. */
export function summarize(input: SummarizeInput): RunSummary {
  const results = latestResults(input.results);
  const all = group(results);
  const rewardSum = results.reduce((sum, r) => sum + scoredReward(r), 0);
  const errorsByKind: Record<string, number> = {};
  for (const r of results) {
    if (r.status !== "error") continue;
    const kind = r.error?.kind ?? "unknown";
    errorsByKind[kind] = (errorsByKind[kind] ?? 0) + 1;
  }
  // Errors the agent caused stay scored: it must not move a fail out of the denominator.
  const unscored = results.filter((r) => r.status === "error" && r.error?.kind !== "agent").length;
  const taskMeans = [...byTask(results).values()].map((list) => mean(list.map(scoredReward)) as number);
  const startedAt = toIso(input.startedAt);
  const updatedAt = toIso(input.now);
  return {
    runId: input.runId,
    status: input.status,
    trials: {
      planned: input.plannedTrials,
      total: all.total,
      passed: all.passed,
      flagged: all.flagged ?? 0,
      failed: all.failed,
      errored: all.errored,
    },
    passRate: all.passRate,
    meanReward: all.meanReward,
    rates: {
      passRate: rate(all.passed, all.total, "finished trials (errors and flagged passes count as not passed)"),
      passRateScored: rate(all.passed, all.total - unscored, "scored trials (infra, setup and verifier errors excluded; agent errors count as not passed)"),
      meanReward: rate(rewardSum, all.total, "finished trials (errors and flagged passes score 0)"),
    },
    meanRewardStdErr: standardError(taskMeans),
    byCategory: groupBy(results, (r) => r.category ?? UNCATEGORIZED),
    byDifficulty: groupBy(results, (r) => r.difficulty ?? UNKNOWN_DIFFICULTY),
    errorsByKind,
    passAtK: input.attempts > 1 ? passAtK(results, input.attempts) : null,
    integrity: {
      passedWithSurvivors: results.filter((r) => r.status === "passed" && (r.integrity?.survivors.length ?? 0) > 0).length,
      flagged: all.flagged ?? 0,
      tampered: results.filter((r) => (r.integrity?.tampered.length ?? 0) > 0).length,
      unchecked: results.filter((r) => r.integrity !== undefined && r.integrity !== null && !r.integrity.tamperChecked).length,
    },
    ...usageTotals(results),
    cost: costSummary(results, input.priceSource ?? null),
    ...(input.budget ? { budget: budgetState(results, input.plannedTrials, input.budget) } : {}),
    startedAt,
    updatedAt,
    durationMs: Math.max(0, Date.parse(updatedAt) - Date.parse(startedAt)),
  };
}
