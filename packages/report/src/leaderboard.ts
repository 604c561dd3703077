import { isCleanPass } from "@proctor/schema";
import { passAtKEstimate, trialCostUsd, wilsonInterval, type Interval } from "@proctor/reward";
import { agentLabel, modelLabel, type LoadedRun } from "./load";

/** The dataset a run ran: `name@version` from run.json's `origins`, else its sources' names. */
export interface DatasetRef {
  /** What the leaderboard groups by and the viewer puts in URLs. */
  key: string;
  name: string;
  version: string | null;
  /** Where the name came from: run.json's `origins[].dataset`, its `sources`, or nothing (no run.json). */
  from: "origins" | "sources" | "unknown";
}

/** One task of one run, as the heat map and the pooled numbers need it. */
export interface TaskCell {
  /** Finished attempts. */
  attempts: number;
  passed: number;
  errored: number;
  /** The trial a heat map cell links to: the first attempt that did not pass, else the first attempt. */
  trialId: string;
  category: string;
}

/** What the leaderboard keeps of one run (computed once per run; a viewer memoizes it until the run changes). */
export interface RunStats {
  runId: string;
  dir: string;
  dataset: DatasetRef;
  agent: string;
  model: string | null;
  status: string;
  startedAt: string;
  attempts: number;
  /** Task id -> content hash from run.json (null: no run.json, the ids come from the results). */
  taskHashes: Map<string, string | null>;
  /** The task set's signature (sorted `id=hash`): runs with equal signatures ran the same tasks. */
  taskSignature: string;
  byTask: Map<string, TaskCell>;
  trials: number;
  passed: number;
  /** USD over the finished trials; null when the run (or part of it) is unpriced or reports no cost. */
  costUsd: number | null;
  /** Input + output tokens over the finished trials; null when no trial reported usage. */
  tokens: number | null;
  durationsMs: number[];
}

export interface LeaderboardRow {
  /** `agent|model`: one row per agent and model within a dataset. */
  key: string;
  agent: string;
  model: string | null;
  /** The runs pooled in this row, newest first. */
  runs: string[];
  tasks: number;
  trials: number;
  passed: number;
  /** Clean passes / finished trials over the row's runs (errors count as not passed), with a 95% Wilson interval. */
  passRate: number | null;
  ci: Interval | null;
  /** Most finished attempts of one task (over the row's runs); pass@k is given for k = 1..attempts when above 1. */
  attempts: number;
  passAtK: { k: number; value: number; tasks: number }[];
  /** USD: every run's cost summed; null when any run is unpriced or reports none (shown as "—", never 0). */
  costUsd: number | null;
  /** costUsd / tasks (every attempt of a task counts toward it). */
  costPerTask: number | null;
  tokens: number | null;
  tokensPerTask: number | null;
  medianTrialMs: number | null;
  /** False when the row's tasks (ids or content hashes) differ from the dataset's other rows or between its own runs. */
  comparable: boolean;
  /** Why not, against the task set most rows of the dataset ran ("2 tasks missing, 1 task with other content (hash)"); null when comparable. */
  notComparable: string | null;
}

export interface LeaderboardGroup {
  dataset: DatasetRef;
  /** Every row ran the same tasks with the same content. */
  comparable: boolean;
  /** Best pass rate first. */
  rows: LeaderboardRow[];
}

export interface Leaderboard {
  runs: number;
  /** Datasets by name, then version. */
  groups: LeaderboardGroup[];
}

const rec = (v: unknown): Record<string, unknown> | null => (v !== null && typeof v === "object" && !Array.isArray(v) ? (v as Record<string, unknown>) : null);
const str = (v: unknown): string | null => (typeof v === "string" && v !== "" ? v : typeof v === "number" ? String(v) : null);

/** The dataset of a run: run.json's `origins[].dataset` (name@version), else its sources' last path parts. */
export function runDataset(run: Pick<LoadedRun, "config" | "raw">): DatasetRef {
  const origins = (run.config as { origins?: unknown } | null)?.origins ?? rec(run.raw?.config)?.origins;
  if (Array.isArray(origins)) {
    const named = origins
      .map((o) => rec(rec(o)?.dataset))
      .filter((d): d is Record<string, unknown> => d !== null && str(d.name) !== null)
      .map((d) => ({ name: str(d.name) as string, version: str(d.version) }));
    const unique = [...new Map(named.map((d) => [`${d.name}@${d.version ?? ""}`, d])).values()];
    if (unique.length > 0) {
      const name = unique.map((d) => d.name).join(" + ");
      const versions = unique.map((d) => d.version);
      const version = versions.every((v) => v !== null) ? versions.join(" + ") : null;
      const key = unique.map((d) => (d.version ? `${d.name}@${d.version}` : d.name)).join(" + ");
      return { key, name, version, from: "origins" };
    }
  }
  const sources = run.config?.sources ?? [];
  if (sources.length > 0) {
    const name = sources.map((s) => s.replace(/[\\/]+$/, "").split(/[\\/]/).pop() || s).join(" + ");
    return { key: name, name, version: null, from: "sources" };
  }
  return { key: "unknown", name: "unknown", version: null, from: "unknown" };
}

/**
 * USD over a run's finished trials (model tokens + compute, as the run's summary prices them);
 * null when a trial's model usage has no price, or when nothing was priced at all (no model, no
 * `--compute-price`): shown as "—", never $0.
 */
function runCost(run: LoadedRun): number | null {
  const priced = run.results.some((r) => (r.agent?.usage && (r.agent.usage.inputTokens > 0 || r.agent.usage.outputTokens > 0)) || r.compute?.costUsd !== undefined);
  if (!priced) return null;
  let total = 0;
  for (const r of run.results) {
    const cost = trialCostUsd(r);
    if (cost === null) return null;
    total += cost;
  }
  return Math.round(total * 1e6) / 1e6;
}

function runTokens(run: LoadedRun): number | null {
  let seen = false;
  let tokens = 0;
  for (const r of run.results) {
    const u = r.agent?.usage;
    if (!u) continue;
    seen = true;
    tokens += u.inputTokens + u.outputTokens;
  }
  if (seen) return tokens;
  const u = run.summary.usage;
  return u ? u.inputTokens + u.outputTokens : null;
}

/** The leaderboard's view of one run. */
export function runStats(run: LoadedRun): RunStats {
  const byTask = new Map<string, TaskCell>();
  const firstFail = new Map<string, number>();
  const ordered = [...run.results].sort((a, b) => a.attempt - b.attempt);
  let passed = 0;
  for (const r of ordered) {
    const clean = isCleanPass(r);
    if (clean) passed++;
    let cell = byTask.get(r.taskId);
    if (!cell) {
      cell = { attempts: 0, passed: 0, errored: 0, trialId: r.trialId, category: r.category ?? "uncategorized" };
      byTask.set(r.taskId, cell);
    }
    cell.attempts++;
    if (clean) cell.passed++;
    if (r.status === "error") cell.errored++;
    if (!clean && !firstFail.has(r.taskId)) {
      firstFail.set(r.taskId, r.attempt);
      cell.trialId = r.trialId;
    }
  }
  const taskHashes = new Map<string, string | null>();
  if (run.config) for (const t of run.config.tasks) taskHashes.set(t.id, t.hash);
  else for (const id of byTask.keys()) taskHashes.set(id, null);
  return {
    runId: run.runId,
    dir: run.dir,
    dataset: runDataset(run),
    agent: agentLabel(run),
    model: modelLabel(run),
    status: run.summary.status,
    startedAt: run.summary.startedAt,
    attempts: run.config?.attempts ?? Math.max(1, ...[...byTask.values()].map((c) => c.attempts)),
    taskHashes,
    taskSignature: signature(taskHashes),
    byTask,
    trials: run.results.length,
    passed,
    costUsd: runCost(run),
    tokens: runTokens(run),
    durationsMs: run.results.map((r) => r.durationMs),
  };
}

function median(values: number[]): number | null {
  if (values.length === 0) return null;
  const s = Float64Array.from(values).sort();
  const mid = Math.floor(s.length / 2);
  return s.length % 2 === 1 ? (s[mid] as number) : ((s[mid - 1] as number) + (s[mid] as number)) / 2;
}

function newestFirst(a: RunStats, b: RunStats): number {
  return a.startedAt < b.startedAt ? 1 : a.startedAt > b.startedAt ? -1 : a.runId < b.runId ? 1 : -1;
}

/** A task set's signature: sorted `id=hash` (hash `?` when unknown). */
function signature(tasks: Map<string, string | null>): string {
  return [...tasks.entries()]
    .map(([id, hash]) => `${id}=${hash ?? "?"}`)
    .sort()
    .join("\n");
}

function rowKey(s: Pick<RunStats, "agent" | "model">): string {
  return `${s.agent}|${s.model ?? ""}`;
}

interface RowDraft {
  row: LeaderboardRow;
  tasks: Map<string, string | null>;
  signature: string;
  /** Runs in this row that ran other tasks than its first run. */
  mixed: boolean;
}

function buildRow(runs: RunStats[]): RowDraft {
  const first = runs[0] as RunStats;
  const pooled = new Map<string, { n: number; c: number }>();
  const mixed = runs.some((s) => s.taskSignature !== first.taskSignature);
  const tasks = mixed ? new Map<string, string | null>(first.taskHashes) : first.taskHashes;
  let trials = 0;
  let passed = 0;
  let cost: number | null = 0;
  let tokens: number | null = null;
  const durations: number[] = [];
  for (const s of runs) {
    if (mixed) for (const [id, hash] of s.taskHashes) if (!tasks.has(id)) tasks.set(id, hash);
    for (const [id, cell] of s.byTask) {
      const p = pooled.get(id) ?? { n: 0, c: 0 };
      p.n += cell.attempts;
      p.c += cell.passed;
      pooled.set(id, p);
    }
    trials += s.trials;
    passed += s.passed;
    cost = cost === null || s.costUsd === null ? null : cost + s.costUsd;
    if (s.tokens !== null) tokens = (tokens ?? 0) + s.tokens;
    for (const d of s.durationsMs) durations.push(d);
  }
  const taskCount = pooled.size;
  const attempts = Math.max(0, ...[...pooled.values()].map((p) => p.n));
  const passAtK: LeaderboardRow["passAtK"] = [];
  if (attempts > 1) {
    for (let k = 1; k <= attempts; k++) {
      const eligible = [...pooled.values()].filter((p) => p.n >= k);
      if (eligible.length === 0) break;
      passAtK.push({ k, value: eligible.reduce((sum, p) => sum + passAtKEstimate(p.n, p.c, k), 0) / eligible.length, tasks: eligible.length });
    }
  }
  const costUsd = cost === null ? null : Math.round(cost * 1e6) / 1e6;
  return {
    tasks,
    signature: mixed ? signature(tasks) : first.taskSignature,
    mixed,
    row: {
      key: rowKey(first),
      agent: first.agent,
      model: first.model,
      runs: runs.map((s) => s.runId),
      tasks: taskCount,
      trials,
      passed,
      passRate: trials === 0 ? null : passed / trials,
      ci: wilsonInterval(passed, trials),
      attempts,
      passAtK,
      costUsd,
      costPerTask: costUsd === null || taskCount === 0 ? null : costUsd / taskCount,
      tokens,
      tokensPerTask: tokens === null || taskCount === 0 ? null : tokens / taskCount,
      medianTrialMs: median(durations),
      comparable: true,
      notComparable: null,
    },
  };
}

/** How a row's tasks differ from the reference set, in a few words (empty: they do not). */
function difference(tasks: Map<string, string | null>, reference: Map<string, string | null>): string[] {
  let missing = 0;
  let changed = 0;
  for (const [id, hash] of reference) {
    if (!tasks.has(id)) missing++;
    else {
      const other = tasks.get(id);
      if (hash !== null && other !== null && other !== undefined && other !== hash) changed++;
    }
  }
  let extra = 0;
  for (const id of tasks.keys()) if (!reference.has(id)) extra++;
  const out: string[] = [];
  if (missing > 0) out.push(`${missing} task${missing === 1 ? "" : "s"} missing`);
  if (extra > 0) out.push(`${extra} other task${extra === 1 ? "" : "s"}`);
  if (changed > 0) out.push(`${changed} task${changed === 1 ? "" : "s"} with other content (hash)`);
  return out;
}

function groupStats(stats: readonly RunStats[]): Map<string, RunStats[]> {
  const byDataset = new Map<string, RunStats[]>();
  for (const s of stats) {
    const list = byDataset.get(s.dataset.key);
    if (list) list.push(s);
    else byDataset.set(s.dataset.key, [s]);
  }
  return byDataset;
}

function buildGroup(runs: RunStats[]): LeaderboardGroup {
  const byRow = new Map<string, RunStats[]>();
  for (const s of [...runs].sort(newestFirst)) {
    const list = byRow.get(rowKey(s));
    if (list) list.push(s);
    else byRow.set(rowKey(s), [s]);
  }
  const drafts = [...byRow.values()].map(buildRow);
  const counts = new Map<string, { n: number; tasks: Map<string, string | null> }>();
  for (const d of drafts) {
    const c = counts.get(d.signature) ?? { n: 0, tasks: d.tasks };
    c.n++;
    counts.set(d.signature, c);
  }
  // The reference task set: the one most rows ran. When two sets tie, neither is the reference:
  // each row is measured against a set it did not run, so every row of the tie is flagged.
  const ranked = [...counts.entries()].sort(([, a], [, b]) => b.n - a.n || b.tasks.size - a.tasks.size);
  const tops = ranked.filter(([, c]) => c.n === ranked[0]?.[1].n);
  for (const d of drafts) {
    const reference = tops.length === 1 ? (tops[0]?.[1].tasks as Map<string, string | null>) : (tops.find(([sig]) => sig !== d.signature)?.[1].tasks ?? d.tasks);
    const reasons = reference === d.tasks || (tops.length === 1 && tops[0]?.[0] === d.signature) ? [] : difference(d.tasks, reference);
    if (d.mixed) reasons.push(`its ${d.row.runs.length} runs ran different tasks`);
    if (reasons.length > 0) {
      d.row.comparable = false;
      d.row.notComparable = reasons.join(", ");
    }
  }
  const rows = drafts.map((d) => d.row).sort((a, b) => (b.passRate ?? -1) - (a.passRate ?? -1) || (a.key < b.key ? -1 : 1));
  return { dataset: (runs[0] as RunStats).dataset, comparable: rows.every((r) => r.comparable), rows };
}

/** The leaderboard over runs' stats (`runStats` of each run): one group per dataset, one row per agent and model. */
export function buildLeaderboard(stats: readonly RunStats[]): Leaderboard {
  const groups = [...groupStats(stats).values()].map(buildGroup);
  groups.sort((a, b) => (a.dataset.key < b.dataset.key ? -1 : a.dataset.key > b.dataset.key ? 1 : 0));
  return { runs: stats.length, groups };
}

/** Runs drawn side by side in the per-category bars. */
export const CATEGORY_RUNS_MAX = 6;
/** Runs picked for the plots when none are named: the newest run of each row, best row first, this many at most. */
export const PLOT_RUNS_DEFAULT = 12;

export interface PlotRun {
  runId: string;
  label: string;
  /** The run's row's place in the leaderboard: one colour per row in every plot. */
  color: number;
}

/** The data of a dataset's four plots (the viewer draws them with d3; the HTML report as inline SVG). */
export interface LeaderboardPlots {
  dataset: DatasetRef;
  /** Every run of the dataset, newest first, and which of them the plots below show. */
  runs: (Omit<PlotRun, "color"> & { agent: string; model: string | null; startedAt: string; selected: boolean })[];
  /** Pass rate against cost per task, one point per row that has a cost; `pareto`: no other row is as cheap and better. */
  cost: { points: { key: string; label: string; color: number; costPerTask: number; passRate: number; pareto: boolean }[]; unpriced: string[] };
  /** Pass rate per category, up to 6 of the selected runs side by side: values[category][run]. */
  categories: { runs: PlotRun[]; categories: string[]; values: (number | null)[][] };
  /** pass@k for k = 1..attempts of each selected run with more than one attempt. */
  passAtK: { curves: (PlotRun & { points: { k: number; value: number }[] })[] };
  /** Tasks x selected runs; a cell per task a run finished, linking to that run's trial. */
  heatmap: { runs: PlotRun[]; tasks: string[]; cells: { task: number; run: number; passed: number; attempts: number; errored: number; trialId: string }[] };
}

function rowLabel(r: Pick<LeaderboardRow, "agent" | "model">): string {
  return r.model ? `${r.agent} (${r.model})` : r.agent;
}

function runPassAtK(s: RunStats): { k: number; value: number }[] {
  const cells = [...s.byTask.values()];
  const max = Math.max(0, ...cells.map((c) => c.attempts));
  const out: { k: number; value: number }[] = [];
  for (let k = 1; k <= max && max > 1; k++) {
    const eligible = cells.filter((c) => c.attempts >= k);
    if (eligible.length === 0) break;
    out.push({ k, value: eligible.reduce((sum, c) => sum + passAtKEstimate(c.attempts, c.passed, k), 0) / eligible.length });
  }
  return out;
}

/** Pareto front over (cost, pass rate): a point is on it when no other is at most as costly and at least as good, and better in one. */
export function paretoFront<T extends { costPerTask: number; passRate: number }>(points: readonly T[]): Set<T> {
  const front = new Set<T>();
  for (const p of points) {
    const dominated = points.some((q) => q !== p && q.costPerTask <= p.costPerTask && q.passRate >= p.passRate && (q.costPerTask < p.costPerTask || q.passRate > p.passRate));
    if (!dominated) front.add(p);
  }
  return front;
}

/**
 * The plots of one dataset (its `key`) over runs' stats; null when no run has that dataset.
 * `runIds` picks the runs of the bars (the first 6), the pass@k curves and the heat map; by
 * default the newest run of each row, best row first.
 */
export function leaderboardPlots(stats: readonly RunStats[], datasetKey: string, options: { runIds?: readonly string[] } = {}): LeaderboardPlots | null {
  const runs = (groupStats(stats).get(datasetKey) ?? []).sort(newestFirst);
  if (runs.length === 0) return null;
  const group = buildGroup(runs);
  const byId = new Map(runs.map((s) => [s.runId, s]));
  const picked = options.runIds?.length ? options.runIds.filter((id) => byId.has(id)) : group.rows.map((r) => r.runs[0] as string).slice(0, PLOT_RUNS_DEFAULT);
  const selected = [...new Set(picked)].map((id) => byId.get(id) as RunStats);
  // A run's label is its row's; two picked runs of one row are told apart by their ids.
  const labelCount = new Map<string, number>();
  for (const s of selected) labelCount.set(rowLabel(s), (labelCount.get(rowLabel(s)) ?? 0) + 1);
  const color = new Map(group.rows.map((r, i) => [r.key, i]));
  const plotRun = (s: RunStats): PlotRun => ({ runId: s.runId, label: (labelCount.get(rowLabel(s)) ?? 0) > 1 ? `${rowLabel(s)} ${s.runId}` : rowLabel(s), color: color.get(rowKey(s)) ?? 0 });
  const priced = group.rows
    .filter((r) => r.costPerTask !== null && r.passRate !== null)
    .map((r) => ({ key: r.key, label: rowLabel(r), color: color.get(r.key) ?? 0, costPerTask: r.costPerTask as number, passRate: r.passRate as number, pareto: false }));
  const front = paretoFront(priced);
  for (const p of priced) p.pareto = front.has(p);
  const barRuns = selected.slice(0, CATEGORY_RUNS_MAX);
  const categories = [...new Set(barRuns.flatMap((s) => [...s.byTask.values()].map((c) => c.category)))].sort();
  const values = categories.map((category) =>
    barRuns.map((s) => {
      let n = 0;
      let c = 0;
      for (const cell of s.byTask.values()) {
        if (cell.category !== category) continue;
        n += cell.attempts;
        c += cell.passed;
      }
      return n === 0 ? null : c / n;
    }),
  );
  // Natural order: task-2 before task-10.
  const tasks = [...new Set(selected.flatMap((s) => [...s.byTask.keys()]))].sort((a, b) => a.localeCompare(b, "en", { numeric: true }));
  const taskIndex = new Map(tasks.map((t, i) => [t, i]));
  const cells: LeaderboardPlots["heatmap"]["cells"] = [];
  selected.forEach((s, run) => {
    for (const [taskId, c] of s.byTask) cells.push({ task: taskIndex.get(taskId) as number, run, passed: c.passed, attempts: c.attempts, errored: c.errored, trialId: c.trialId });
  });
  const selectedIds = new Set(selected.map((s) => s.runId));
  return {
    dataset: group.dataset,
    runs: runs.map((s) => ({ runId: s.runId, label: rowLabel(s), agent: s.agent, model: s.model, startedAt: s.startedAt, selected: selectedIds.has(s.runId) })),
    cost: { points: priced, unpriced: group.rows.filter((r) => r.costPerTask === null).map(rowLabel) },
    categories: { runs: barRuns.map(plotRun), categories, values },
    passAtK: { curves: selected.map((s) => ({ ...plotRun(s), points: runPassAtK(s) })).filter((c) => c.points.length > 1) },
    heatmap: { runs: selected.map(plotRun), tasks, cells },
  };
}
