import type { Interval } from "@proctor/reward";
import type { ComparisonReport, FlakyReport, RunReport } from "./model";
import { describeCost, usd } from "./cost";

/** `text` whole when it fits in `max` characters, else cut at the last word that fits, with "..." (never mid-word, unless one word is longer than half of `max`). */
export function clipAtWord(text: string, max: number): string {
  if (text.length <= max) return text;
  const cut = text.slice(0, max - 3);
  const space = cut.lastIndexOf(" ");
  return `${(space > max / 2 ? cut.slice(0, space) : cut).replace(/[\s,;:]+$/, "")}...`;
}

export function percent(value: number | null | undefined): string {
  return value === null || value === undefined ? "-" : `${(value * 100).toFixed(1)}%`;
}

export function fixed(value: number | null | undefined, digits = 3): string {
  return value === null || value === undefined ? "-" : value.toFixed(digits);
}

export function formatDuration(ms: number): string {
  if (!Number.isFinite(ms) || ms < 0) return "-";
  const s = Math.round(ms / 1000);
  if (s < 60) return `${s}s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m}m${String(s % 60).padStart(2, "0")}s`;
  return `${Math.floor(m / 60)}h${String(m % 60).padStart(2, "0")}m`;
}

export function percentInterval(ci: Interval | null): string {
  return ci ? `[${percent(ci.low)}, ${percent(ci.high)}]` : "";
}

/** "p = 0.0123", or "p < 0.0001" for the smallest values. */
export function pValue(p: number): string {
  return p < 0.0001 ? "p < 0.0001" : `p = ${p.toFixed(4)}`;
}

// A cell that reads as a figure: a count, a rate, a reward, a duration, an interval ("-" for none).
const FIGURE = /^(-|[-+]?\d[\d,]*(\.\d+)?(%|s|ms)?( ± [\d.,]+%?)?( \[[^\]]*\])?|\d+(h\d+m|m\d+s|s)|\d+\/\d+)$/;

/** Which columns hold figures (right-aligned) rather than text (left-aligned); the first column is always text. */
function figureColumns(header: string[], rows: string[][]): boolean[] {
  return header.map((_, i) => i > 0 && rows.length > 0 && rows.every((r) => FIGURE.test((r[i] ?? "").trim())) && rows.some((r) => (r[i] ?? "-") !== "-"));
}

/** A plain text table: figures right-aligned, text (ids, statuses, reasons, paths) left-aligned; "left" aligns every column left. */
export function textTable(header: string[], rows: string[][], align: "numbers" | "left" = "numbers"): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? "").length)));
  const right = align === "left" ? header.map(() => false) : figureColumns(header, rows);
  const line = (cells: string[]) => cells.map((c, i) => (right[i] ? c.padStart(widths[i] ?? 0) : c.padEnd(widths[i] ?? 0))).join("  ").trimEnd();
  return [line(header), widths.map((w) => "-".repeat(w)).join("  "), ...rows.map(line)].join("\n");
}

function mdEscape(text: string): string {
  return text.replace(/\|/g, "\\|").replace(/\r?\n/g, " ");
}

/** A GitHub-flavoured Markdown table: figures right-aligned, text left-aligned. */
export function mdTable(header: string[], rows: string[][]): string {
  const line = (cells: string[]) => `| ${cells.map(mdEscape).join(" | ")} |`;
  const right = figureColumns(header, rows);
  return [line(header), `|${header.map((_, i) => (right[i] ? " ---: " : " --- ")).join("|")}|`, ...rows.map(line)].join("\n");
}

type Table = (header: string[], rows: string[][]) => string;

function headline(r: RunReport): string[] {
  const lines = [
    `run            ${r.runId} (${r.dir})`,
    `agent          ${r.agent}${r.model ? ` (model ${r.model})` : ""}`,
    `status         ${r.status} in ${formatDuration(r.durationMs)}; ${r.trials.total} of ${r.trials.planned} planned trials finished`,
    `pass rate      ${percent(r.passRate.value)} ${percentInterval(r.passRate.ci)} (${r.passRate.passed}/${r.passRate.total} ${r.passRate.of}; 95% Wilson interval)`,
    `mean reward    ${fixed(r.meanReward.mean)}${r.meanReward.standardError !== null ? ` ± ${fixed(r.meanReward.standardError)} SE` : ""}${r.meanReward.ci ? ` [${fixed(r.meanReward.ci.low)}, ${fixed(r.meanReward.ci.high)}] 95% bootstrap` : ""} over ${r.meanReward.n} ${r.meanReward.of}`,
  ];
  if (r.passAtK.length > 0) lines.push(`pass@k         ${r.passAtK.map((p) => `pass@${p.k} ${percent(p.value)} (${p.tasks} tasks)`).join("  ")} — unbiased estimator`);
  const errors = Object.entries(r.errorsByKind);
  if (errors.length > 0) lines.push(`errors         ${errors.map(([k, n]) => `${k} ${n}`).join(", ")}`);
  if (r.cost) lines.push(`cost           ${describeCost(r.cost)}`);
  if (r.budget?.exhausted) lines.push(`budget         spent (${r.budget.exhausted}): ${r.budget.notRun} trial(s) not run, not counted as failures`);
  return lines;
}

/** The by-task table's cost cell: the task's priced trials' cost, and how many are unpriced. */
export function taskCost(r: RunReport, taskId: string): string {
  const c = r.cost?.byTask[taskId];
  if (!c) return "-";
  const unpriced = c.unpriced > 0 ? `${c.unpriced} unpriced` : "";
  return [c.usd !== null ? usd(c.usd) : "", unpriced].filter(Boolean).join(" + ") || "-";
}

export function categoryRows(r: RunReport): string[][] {
  const rows = r.byCategory.map((c) => [c.category, String(c.total), String(c.passed), String(c.failed), String(c.errored), percent(c.passRate)]);
  const t = r.trials;
  rows.push(["all", String(t.total), String(t.passed), String(t.failed), String(t.errored), percent(r.passRate.value)]);
  return rows;
}

/** Per-competition rows: score (mean ± SEM over valid seeds, best), medals, any-medal rate ± SEM. */
export function competitionRows(r: RunReport): string[][] {
  return r.competitions.rows.map((c) => [
    c.competitionId,
    `${c.metric} (${c.higherIsBetter ? "higher" : "lower"} is better)`,
    `${c.valid}/${c.seeds}`,
    `${fixed(c.meanScore, 4)}${c.scoreSem !== null ? ` ± ${fixed(c.scoreSem, 4)}` : ""}`,
    fixed(c.bestScore, 4),
    c.seeds === 1 ? (c.medals.gold ? "gold" : c.medals.silver ? "silver" : c.medals.bronze ? "bronze" : "none") : `${c.medals.gold}/${c.medals.silver}/${c.medals.bronze}`,
    `${percent(c.anyMedal.rate)}${c.anyMedal.sem !== null ? ` ± ${percent(c.anyMedal.sem)}` : ""}`,
  ]);
}

function competitionSections(r: RunReport, table: Table, heading: (s: string) => string): string[] {
  const t = r.competitions.totals;
  if (!t) return [];
  return [
    heading(`Competitions (${t.competitions})`),
    table(["competition", "metric", "valid", "score (mean ± SEM)", "best", "medal (g/s/b)", "any medal ± SEM"], competitionRows(r)),
    `any medal      ${percent(t.anyMedal.rate)}${t.anyMedal.sem !== null ? ` ± ${percent(t.anyMedal.sem)} SEM over ${t.anyMedal.seeds} seeds` : ` (${t.anyMedal.seeds} seed: no SEM)`} (${t.trials} ${t.anyMedal.of}); valid submissions ${percent(t.validRate)}`,
    "",
  ];
}

/** One row per task: attempts, passes, pass rate, mean reward (the same table html shows). */
export function taskRows(r: RunReport): string[][] {
  return r.tasks.map((t) => [t.taskId, String(t.attempts), String(t.passed), percent(t.passRate), fixed(t.meanReward)]);
}

function problemRows(r: RunReport): string[][] {
  return r.problems.map((p) => [p.trialId, p.status, p.kind ?? "-", [p.reason, ...p.flags].filter(Boolean).join("; ") || "-", p.verifierLog]);
}

function runSections(r: RunReport, table: Table, heading: (s: string) => string): string[] {
  const out = [...headline(r).map((l) => (table === mdTable ? `- ${l.replace(/^(\S+(?: \S+)?)\s{2,}/, "**$1** ")}` : l)), ""];
  if (r.competitions.totals) out.push(...competitionSections(r, table, heading));
  out.push(heading("By category"), table(["category", "trials", "passed", "failed", "errored", "pass rate"], categoryRows(r)), "");
  const costed = r.cost !== null;
  out.push(heading(`By task (${r.tasks.length})`), table(["task", "attempts", "passed", "pass rate", "mean reward", ...(costed ? ["cost"] : [])], taskRows(r).map((row, i) => (costed ? [...row, taskCost(r, r.tasks[i]?.taskId ?? "")] : row))), "");
  if (r.problems.length > 0) {
    out.push(heading(`Failed, errored and flagged trials (${r.problems.length})`));
    out.push(table(["trial", "status", "error kind", "reason", "verifier log"], problemRows(r)), "");
  }
  return out;
}

function comparisonSections(c: ComparisonReport, table: Table, heading: (s: string) => string): string[] {
  const { a, b, comparison: k } = c;
  const out: string[] = [];
  out.push(heading(`Comparison: B (${b.runId}) against A (${a.runId})`));
  // Said first: a comparison of runs that ran different things is read with that in mind.
  if (c.pinsDiffer.length > 0) out.push(`warning: pins differ: ${c.pinsDiffer.join(", ")}`, "");
  out.push(
    table(
      ["", "A", "B"],
      [
        ["run", a.runId, b.runId],
        ["agent", a.agent + (a.model ? ` (${a.model})` : ""), b.agent + (b.model ? ` (${b.model})` : "")],
        ["pass rate (paired trials)", percent(k.passRate.a), percent(k.passRate.b)],
        ["mean reward over common tasks", `${fixed(k.meanReward.a.mean)} ± ${fixed(k.meanReward.a.standardError)}`, `${fixed(k.meanReward.b.mean)} ± ${fixed(k.meanReward.b.standardError)}`],
      ],
    ),
    "",
  );
  const lines = [
    `common tasks   ${k.commonTasks}${k.onlyInA.length ? `; only in A: ${k.onlyInA.length}` : ""}${k.onlyInB.length ? `; only in B: ${k.onlyInB.length}` : ""}`,
    `paired trials  ${k.pairs} (${k.passRate.of})`,
    `flips          ${k.mcnemar.failToPass} fail->pass, ${k.mcnemar.passToFail} pass->fail`,
    `McNemar        ${pValue(k.mcnemar.pValue)} (${k.mcnemar.method}; ${k.mcnemar.passToFail + k.mcnemar.failToPass} discordant of ${k.mcnemar.pairs} pairs)`,
  ];
  if (k.rewardDifference) {
    const d = k.rewardDifference;
    lines.push(`reward B - A   ${d.estimate >= 0 ? "+" : ""}${fixed(d.estimate)} [${fixed(d.low)}, ${fixed(d.high)}] ${Math.round(d.confidence * 100)}% CI, ${pValue(d.pValue)} (${d.method}; n = ${d.n} tasks)`);
  }
  lines.push(`test to read   ${k.binary ? "McNemar (every reward is 0 or 1)" : "paired bootstrap (rewards are continuous)"}`);
  out.push(...lines.map((l) => (table === mdTable ? `- ${l.replace(/^(\S+(?: \S+)*?)\s{2,}/, "**$1** ")}` : l)), "");
  if (k.flips.length > 0) {
    out.push(heading(`Flips (${k.flips.length})`));
    out.push(table(["task", "attempt", "flip", "A", "B"], k.flips.map((f) => [f.taskId, String(f.attempt), f.kind === "fail_to_pass" ? "fail -> pass" : "pass -> fail", f.from, f.to])), "");
  }
  return out;
}

/** What the flaky-task check looked at, in one sentence. */
export function flakySummary(f: FlakyReport): string {
  const looked = [
    f.runs.oracle.length > 0 ? `${f.runs.oracle.length} oracle run${f.runs.oracle.length > 1 ? "s" : ""}` : null,
    f.runs.nop.length > 0 ? `${f.runs.nop.length} nop run${f.runs.nop.length > 1 ? "s" : ""}` : null,
    f.runs.other.length > 0 ? `${f.runs.other.length} run${f.runs.other.length > 1 ? "s" : ""} of other agents (not used)` : null,
  ].filter(Boolean).join(", ");
  if (!f.checked) return `not checked: needs 3 or more oracle runs or 3 or more nop runs of the same tasks; got ${looked}`;
  if (f.tasks.length === 0) return `none: every task had the same outcome in each of ${looked}`;
  return `${f.tasks.length} task${f.tasks.length > 1 ? "s" : ""} whose outcome flips under a reference agent (oracle must always pass, nop never), over ${looked}`;
}

export function flakyRows(f: FlakyReport): string[][] {
  return f.tasks.map((t) => [t.taskId, t.agent, `${t.passed}/${t.attempts}`, String(t.runs), t.agent === "oracle" ? "oracle should always pass" : "nop should never pass"]);
}

function flakySections(f: FlakyReport, table: Table, heading: (s: string) => string): string[] {
  const out = [heading(`Flaky task definitions (${f.tasks.length})`), flakySummary(f), ""];
  if (f.tasks.length > 0) out.push(table(["task", "agent", "passed", "runs", "expected"], flakyRows(f)), "");
  return out;
}

/** The terminal report: headline numbers, per-category table, and every failed/errored trial with its reason. */
export function renderText(reports: readonly RunReport[], comparison: ComparisonReport | null = null, flaky: FlakyReport | null = null): string {
  const out: string[] = [];
  const heading = (s: string) => `${s}\n${"=".repeat(s.length)}`;
  for (const r of reports) out.push(...runSections(r, textTable, heading));
  if (comparison) out.push(...comparisonSections(comparison, textTable, heading));
  if (flaky) out.push(...flakySections(flaky, textTable, heading));
  return `${out.join("\n").trimEnd()}\n`;
}

/** The same report as GitHub-flavoured Markdown (for PR comments and job summaries). */
export function renderMarkdown(reports: readonly RunReport[], comparison: ComparisonReport | null = null, flaky: FlakyReport | null = null): string {
  const out: string[] = [];
  for (const r of reports) out.push(`## Run ${r.runId}`, "", ...runSections(r, mdTable, (s) => `### ${s}\n`));
  if (comparison) out.push(...comparisonSections(comparison, mdTable, (s) => `## ${s}\n`));
  if (flaky) out.push(...flakySections(flaky, mdTable, (s) => `## ${s}\n`));
  return `${out.join("\n").trimEnd()}\n`;
}
