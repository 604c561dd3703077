import { isCleanPass, type TrialResult } from "@proctor/schema";
import { bootstrapMeans, quantile, seededRandom, DEFAULT_RESAMPLES, DEFAULT_SEED, type Interval } from "./bootstrap";
import { mean, passAtKEstimate, standardError } from "./stats";
import { latestResults, scoredReward } from "./summary";

/** One task's outcome over its attempts in one run. */
export interface TaskOutcome {
  taskId: string;
  category: string | null;
  /** Finished attempts (the denominator of passRate). */
  attempts: number;
  passed: number;
  failed: number;
  errored: number;
  /** passed / attempts (errors count as not passed). */
  passRate: number;
  /** Mean scored reward over attempts (an error scores 0). */
  meanReward: number;
}

/** Per-task pass rate over attempts, sorted by task id. A repeated trialId counts once (the last line). */
export function taskOutcomes(results: readonly TrialResult[]): TaskOutcome[] {
  const byTask = new Map<string, TrialResult[]>();
  for (const r of latestResults(results)) {
    const list = byTask.get(r.taskId);
    if (list) list.push(r);
    else byTask.set(r.taskId, [r]);
  }
  return [...byTask.entries()]
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
    .map(([taskId, list]) => {
      const passed = list.filter(isCleanPass).length;
      const errored = list.filter((r) => r.status === "error").length;
      return {
        taskId,
        category: list[0]?.category ?? null,
        attempts: list.length,
        passed,
        failed: list.length - passed - errored,
        errored,
        passRate: passed / list.length,
        meanReward: mean(list.map(scoredReward)) as number,
      };
    });
}

/** pass@k of one task set, with the estimator named and the tasks it averages over. */
export interface PassAtK {
  k: number;
  value: number;
  /** Tasks with at least k finished attempts (the denominator). */
  tasks: number;
  estimator: string;
}

/** Unbiased pass@k (Chen et al. 2021) for k = 1..maxK over tasks with >= k attempts. */
export function passAtKTable(outcomes: readonly TaskOutcome[], maxK: number): PassAtK[] {
  const out: PassAtK[] = [];
  for (let k = 1; k <= maxK; k++) {
    const eligible = outcomes.filter((o) => o.attempts >= k);
    if (eligible.length === 0) break;
    const value = mean(eligible.map((o) => passAtKEstimate(o.attempts, o.passed, k))) as number;
    out.push({ k, value, tasks: eligible.length, estimator: "unbiased: mean over tasks of 1 - C(n-c,k)/C(n,k)" });
  }
  return out;
}

/** Mean ± standard error with the number of values it is over. */
export interface MeanWithError {
  mean: number | null;
  standardError: number | null;
  n: number;
  of: string;
}

/** Mean reward over tasks (each task weighted once, its attempts averaged) with the standard error over tasks. */
export function meanOverTasks(outcomes: readonly TaskOutcome[]): MeanWithError {
  const values = outcomes.map((o) => o.meanReward);
  return { mean: mean(values), standardError: standardError(values), n: values.length, of: "tasks (each task's attempts averaged; errors score 0)" };
}

/** Exact two-sided McNemar test on the discordant pairs. */
export interface McNemar {
  /** Pairs passed in A and not in B. */
  passToFail: number;
  /** Pairs failed in A and passed in B. */
  failToPass: number;
  /** Pairs compared (the denominator), concordant ones included. */
  pairs: number;
  /** Two-sided exact binomial p-value of the discordant counts under p = 1/2; 1 when there are none. */
  pValue: number;
  method: string;
}

/** log C(n, k) via sums of logs; exact enough for p-values, never overflows. */
function logChoose(n: number, k: number): number {
  let s = 0;
  for (let i = 1; i <= k; i++) s += Math.log(n - k + i) - Math.log(i);
  return s;
}

/**
 * McNemar's exact test: with b = pass->fail and c = fail->pass discordant pairs, n = b + c,
 * p = min(1, 2 * P[X <= min(b, c)]) for X ~ Binomial(n, 1/2).
 */
export function mcnemarExact(passToFail: number, failToPass: number, pairs = passToFail + failToPass): McNemar {
  const n = passToFail + failToPass;
  const method = "McNemar exact (two-sided binomial on discordant pairs)";
  if (n === 0) return { passToFail, failToPass, pairs, pValue: 1, method };
  const m = Math.min(passToFail, failToPass);
  let tail = 0;
  for (let i = 0; i <= m; i++) tail += Math.exp(logChoose(n, i) - n * Math.LN2);
  return { passToFail, failToPass, pairs, pValue: Math.min(1, 2 * tail), method };
}

/** Paired bootstrap of mean(B - A) over tasks. */
export interface PairedBootstrap extends Interval {
  /** Two-sided: 2 * min(share of resampled means <= 0, share >= 0), capped at 1. */
  pValue: number;
}

/**
 * Resamples tasks (the independent unit) with replacement and takes the mean of the paired
 * differences each time; the interval is the percentile interval of those means.
 */
export function pairedBootstrap(
  differences: readonly number[],
  options: { resamples?: number; confidence?: number; seed?: number } = {},
): PairedBootstrap | null {
  if (differences.length === 0) return null;
  const confidence = options.confidence ?? 0.95;
  const resamples = options.resamples ?? DEFAULT_RESAMPLES;
  const means = bootstrapMeans(differences, { resamples, random: seededRandom(options.seed ?? DEFAULT_SEED) }).sort((a, b) => a - b);
  const alpha = (1 - confidence) / 2;
  const atMost = means.filter((m) => m <= 0).length / resamples;
  const atLeast = means.filter((m) => m >= 0).length / resamples;
  return {
    estimate: mean(differences) as number,
    low: quantile(means, alpha),
    high: quantile(means, 1 - alpha),
    confidence,
    n: differences.length,
    method: `paired percentile bootstrap over tasks, ${resamples} resamples`,
    pValue: Math.min(1, 2 * Math.min(atMost, atLeast)),
  };
}

export type FlipKind = "fail_to_pass" | "pass_to_fail";

export interface TaskFlip {
  taskId: string;
  attempt: number;
  kind: FlipKind;
  /** Status on each side, e.g. "failed" -> "passed", "error" -> "passed". */
  from: TrialResult["status"];
  to: TrialResult["status"];
}

export interface TaskDelta {
  taskId: string;
  a: TaskOutcome;
  b: TaskOutcome;
  /** b.meanReward - a.meanReward */
  rewardDelta: number;
  /** b.passRate - a.passRate */
  passRateDelta: number;
}

export interface RunComparison {
  /** Tasks both runs finished (the denominator of every paired number). */
  commonTasks: number;
  onlyInA: string[];
  onlyInB: string[];
  /** Trials matched by (task, attempt) present in both runs: McNemar's pairs. */
  pairs: number;
  flips: TaskFlip[];
  tasks: TaskDelta[];
  passRate: { a: number | null; b: number | null; of: string };
  meanReward: { a: MeanWithError; b: MeanWithError };
  mcnemar: McNemar;
  /** Paired bootstrap of mean per-task reward difference (B - A); null with no common tasks. */
  rewardDifference: PairedBootstrap | null;
  /** True when every reward in both runs is 0 or 1 (then McNemar is the test to read). */
  binary: boolean;
}

/**
 * Compares run B against run A on the tasks both finished. Binary outcomes are paired per
 * (task, attempt) for McNemar; rewards are averaged per task and the task differences are
 * bootstrapped (tasks are the independent unit; attempts of one task are not).
 */
export function compareRuns(
  aResults: readonly TrialResult[],
  bResults: readonly TrialResult[],
  options: { resamples?: number; confidence?: number; seed?: number } = {},
): RunComparison {
  const a = latestResults(aResults);
  const b = latestResults(bResults);
  const aTasks = new Map(taskOutcomes(a).map((o) => [o.taskId, o]));
  const bTasks = new Map(taskOutcomes(b).map((o) => [o.taskId, o]));
  const common = [...aTasks.keys()].filter((id) => bTasks.has(id));
  const commonSet = new Set(common);
  const onlyInA = [...aTasks.keys()].filter((id) => !bTasks.has(id));
  const onlyInB = [...bTasks.keys()].filter((id) => !aTasks.has(id)).sort();

  const key = (r: TrialResult) => `${r.taskId}\u0000${r.attempt}`;
  const bByKey = new Map(b.map((r) => [key(r), r]));
  const flips: TaskFlip[] = [];
  let pairs = 0;
  let passToFail = 0;
  let failToPass = 0;
  const pairedA: TrialResult[] = [];
  const pairedB: TrialResult[] = [];
  for (const ra of [...a].sort((x, y) => (x.taskId < y.taskId ? -1 : x.taskId > y.taskId ? 1 : x.attempt - y.attempt))) {
    const rb = bByKey.get(key(ra));
    if (!rb || !commonSet.has(ra.taskId)) continue;
    pairs++;
    pairedA.push(ra);
    pairedB.push(rb);
    const pa = isCleanPass(ra);
    const pb = isCleanPass(rb);
    if (pa && !pb) {
      passToFail++;
      flips.push({ taskId: ra.taskId, attempt: ra.attempt, kind: "pass_to_fail", from: ra.status, to: rb.status });
    } else if (!pa && pb) {
      failToPass++;
      flips.push({ taskId: ra.taskId, attempt: ra.attempt, kind: "fail_to_pass", from: ra.status, to: rb.status });
    }
  }

  const tasks: TaskDelta[] = common.map((taskId) => {
    const ta = aTasks.get(taskId) as TaskOutcome;
    const tb = bTasks.get(taskId) as TaskOutcome;
    return { taskId, a: ta, b: tb, rewardDelta: tb.meanReward - ta.meanReward, passRateDelta: tb.passRate - ta.passRate };
  });
  const passRateOf = (list: TrialResult[]) => (list.length === 0 ? null : list.filter(isCleanPass).length / list.length);
  const isBinary = (r: TrialResult) => {
    const v = scoredReward(r);
    return v === 0 || v === 1;
  };
  return {
    commonTasks: common.length,
    onlyInA,
    onlyInB,
    pairs,
    flips,
    tasks,
    passRate: { a: passRateOf(pairedA), b: passRateOf(pairedB), of: `${pairs} trials paired by task and attempt` },
    meanReward: { a: meanOverTasks(tasks.map((t) => t.a)), b: meanOverTasks(tasks.map((t) => t.b)) },
    mcnemar: mcnemarExact(passToFail, failToPass, pairs),
    rewardDifference: pairedBootstrap(tasks.map((t) => t.rewardDelta), options),
    binary: a.every(isBinary) && b.every(isBinary),
  };
}

/** A task whose outcome is not what its reference agent guarantees, across several runs. */
export interface FlakyTask {
  taskId: string;
  /** "oracle" runs must always pass, "nop" runs must never pass. */
  agent: "oracle" | "nop";
  /** Attempts that passed, of all attempts over the runs. */
  passed: number;
  attempts: number;
  runs: number;
}

/**
 * Across >= 3 runs of the oracle (or the nop agent) on the same tasks, a task whose outcome
 * flips between runs is a flaky task definition: the reference agent's result should not change.
 * Fewer than 3 runs: nothing is flagged (too few to call it flaky rather than broken).
 */
export function flakyTasks(runs: readonly { agent: "oracle" | "nop"; results: readonly TrialResult[] }[]): FlakyTask[] {
  const out: FlakyTask[] = [];
  for (const agent of ["oracle", "nop"] as const) {
    const these = runs.filter((r) => r.agent === agent);
    if (these.length < 3) continue;
    const counts = new Map<string, { passed: number; attempts: number; runs: number }>();
    for (const run of these) {
      for (const o of taskOutcomes(run.results)) {
        const c = counts.get(o.taskId) ?? { passed: 0, attempts: 0, runs: 0 };
        c.runs++;
        c.passed += o.passed;
        c.attempts += o.attempts;
        counts.set(o.taskId, c);
      }
    }
    for (const [taskId, c] of [...counts.entries()].sort(([x], [y]) => (x < y ? -1 : 1))) {
      if (c.runs >= 3 && c.passed > 0 && c.passed < c.attempts) out.push({ taskId, agent, ...c });
    }
  }
  return out;
}
