import type { ComparisonReport, FlakyReport, RunReport } from "./model";
import { categoryRows, competitionRows, fixed, flakyRows, flakySummary, formatDuration, percent, percentInterval, pValue, taskCost, taskRows } from "./text";
import { describeCost } from "./cost";

export function htmlEscape(text: string): string {
  return text.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;").replace(/'/g, "&#39;");
}

/** The report's stylesheet (inline: the file references nothing). */
const HTML_STYLE = `
:root{color-scheme:light dark;--fg:#1d2430;--muted:#5b6474;--bg:#fff;--line:#d9dee7;--pass:#17803d;--fail:#b42318;--err:#b54708}
@media (prefers-color-scheme:dark){:root{--fg:#e6e9ef;--muted:#9aa3b2;--bg:#11151c;--line:#2a313d;--pass:#4ade80;--fail:#f87171;--err:#fbbf24}}
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;color:var(--fg);background:var(--bg);margin:2rem auto;max-width:1100px;padding:0 1rem}
figure{margin:1rem 0;overflow-x:auto}h1{font-size:1.5rem}h2{font-size:1.2rem;margin-top:2rem}h3{font-size:1rem}
table{border-collapse:collapse;width:100%;margin:.5rem 0 1rem}th,td{border-bottom:1px solid var(--line);padding:.3rem .5rem;text-align:left;vertical-align:top}
td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}
dl{display:grid;grid-template-columns:max-content 1fr;gap:.2rem 1rem}dt{color:var(--muted)}dd{margin:0}
.passed{color:var(--pass)}.failed{color:var(--fail)}.error{color:var(--err)}.muted{color:var(--muted)}code{font-size:.9em}
`;

function cell(value: string, cls = ""): string {
  return `<td${cls ? ` class="${cls}"` : ""}>${htmlEscape(value)}</td>`;
}

function table(header: string[], rows: string[][], numeric: Set<number> = new Set()): string {
  const head = header.map((h, i) => `<th${numeric.has(i) ? ' class="n"' : ""}>${htmlEscape(h)}</th>`).join("");
  const body = rows.map((r) => `<tr>${r.map((c, i) => cell(c, numeric.has(i) ? "n" : ["passed", "failed", "error"].includes(c) ? c : "")).join("")}</tr>`).join("\n");
  return `<table><thead><tr>${head}</tr></thead><tbody>\n${body}\n</tbody></table>`;
}

function runSection(r: RunReport): string {
  const facts: [string, string][] = [
    ["directory", r.dir],
    ["agent", r.agent + (r.model ? ` (model ${r.model})` : "")],
    ["status", `${r.status} in ${formatDuration(r.durationMs)}; ${r.trials.total} of ${r.trials.planned} planned trials finished`],
    ["trials", `${r.trials.passed} passed, ${r.trials.failed} failed, ${r.trials.errored} errored`],
    ["pass rate", `${percent(r.passRate.value)} ${percentInterval(r.passRate.ci)} — ${r.passRate.passed}/${r.passRate.total} ${r.passRate.of}; 95% Wilson interval`],
    [
      "mean reward",
      `${fixed(r.meanReward.mean)}${r.meanReward.standardError !== null ? ` ± ${fixed(r.meanReward.standardError)} SE` : ""}${r.meanReward.ci ? `, 95% bootstrap [${fixed(r.meanReward.ci.low)}, ${fixed(r.meanReward.ci.high)}]` : ""} over ${r.meanReward.n} ${r.meanReward.of}`,
    ],
  ];
  if (r.passAtK.length > 0) facts.push(["pass@k", r.passAtK.map((p) => `pass@${p.k} ${percent(p.value)} (${p.tasks} tasks)`).join(", ") + " — unbiased estimator"]);
  const errors = Object.entries(r.errorsByKind);
  if (errors.length > 0) facts.push(["errors", errors.map(([k, n]) => `${k} ${n}`).join(", ")]);
  if (r.cost) facts.push(["cost", describeCost(r.cost)]);
  if (r.budget?.exhausted) facts.push(["budget", `spent (${r.budget.exhausted}): ${r.budget.notRun} trial(s) not run, not counted as failures`]);
  const comp = r.competitions.totals;
  if (comp) facts.push(["any medal", `${percent(comp.anyMedal.rate)}${comp.anyMedal.sem !== null ? ` ± ${percent(comp.anyMedal.sem)} SEM over ${comp.anyMedal.seeds} seeds` : ""} (${comp.trials} ${comp.anyMedal.of})`]);
  const parts = [
    `<h2>Run ${htmlEscape(r.runId)}</h2>`,
    `<dl>${facts.map(([k, v]) => `<dt>${htmlEscape(k)}</dt><dd>${htmlEscape(v)}</dd>`).join("")}</dl>`,
    ...(comp ? [`<h3>Competitions</h3>`, table(["competition", "metric", "valid", "score (mean ± SEM)", "best", "medal (g/s/b)", "any medal ± SEM"], competitionRows(r), new Set([2, 3, 4, 6]))] : []),
    `<h3>By category</h3>`,
    table(["category", "trials", "passed", "failed", "errored", "pass rate"], categoryRows(r), new Set([1, 2, 3, 4, 5])),
    `<h3>Tasks</h3>`,
    r.cost
      ? table(["task", "attempts", "passed", "pass rate", "mean reward", "cost"], taskRows(r).map((row, i) => [...row, taskCost(r, r.tasks[i]?.taskId ?? "")]), new Set([1, 2, 3, 4, 5]))
      : table(["task", "attempts", "passed", "pass rate", "mean reward"], taskRows(r), new Set([1, 2, 3, 4])),
  ];
  if (r.problems.length > 0) {
    parts.push(`<h3>Failed, errored and flagged trials (${r.problems.length})</h3>`);
    parts.push(table(["trial", "status", "error kind", "reason", "verifier log"], r.problems.map((p) => [p.trialId, p.status, p.kind ?? "-", [p.reason, ...p.flags].filter(Boolean).join("; ") || "-", p.verifierLog])));
  }
  return parts.join("\n");
}

function comparisonSection(c: ComparisonReport): string {
  const k = c.comparison;
  const facts: [string, string][] = [
    ["common tasks", `${k.commonTasks}${k.onlyInA.length ? `; only in A: ${k.onlyInA.join(", ")}` : ""}${k.onlyInB.length ? `; only in B: ${k.onlyInB.join(", ")}` : ""}`],
    ["pass rate", `A ${percent(k.passRate.a)} → B ${percent(k.passRate.b)} over ${k.passRate.of}`],
    ["flips", `${k.mcnemar.failToPass} fail → pass, ${k.mcnemar.passToFail} pass → fail`],
    ["McNemar", `${pValue(k.mcnemar.pValue)} (${k.mcnemar.method}; ${k.mcnemar.passToFail + k.mcnemar.failToPass} discordant of ${k.mcnemar.pairs} pairs)`],
  ];
  if (k.rewardDifference) {
    const d = k.rewardDifference;
    facts.push(["reward B − A", `${fixed(d.estimate)} [${fixed(d.low)}, ${fixed(d.high)}] ${Math.round(d.confidence * 100)}% CI, ${pValue(d.pValue)} (${d.method}; n = ${d.n} tasks)`]);
  }
  facts.push(["test to read", k.binary ? "McNemar (every reward is 0 or 1)" : "paired bootstrap (rewards are continuous)"]);
  const parts = [
    `<h2>Comparison: B (${htmlEscape(c.b.runId)}) against A (${htmlEscape(c.a.runId)})</h2>`,
    ...(c.pinsDiffer.length > 0 ? [`<p class="warning"><strong>warning: pins differ:</strong> ${htmlEscape(c.pinsDiffer.join(", "))}</p>`] : []),
    `<dl>${facts.map(([x, v]) => `<dt>${htmlEscape(x)}</dt><dd>${htmlEscape(v)}</dd>`).join("")}</dl>`,
  ];
  if (k.flips.length > 0) {
    parts.push(`<h3>Flips (${k.flips.length})</h3>`);
    parts.push(table(["task", "attempt", "flip", "A", "B"], k.flips.map((f) => [f.taskId, String(f.attempt), f.kind === "fail_to_pass" ? "fail → pass" : "pass → fail", f.from, f.to])));
  }
  return parts.join("\n");
}

function flakySection(f: FlakyReport): string {
  const parts = [`<h2>Flaky task definitions (${f.tasks.length})</h2>`, `<p>${htmlEscape(flakySummary(f))}</p>`];
  if (f.tasks.length > 0) parts.push(table(["task", "agent", "passed", "runs", "expected"], flakyRows(f), new Set([3])));
  return parts.join("\n");
}

/** One self-contained HTML file: inline style, no script, no external reference of any kind; `plots`: inline SVG figures (the leaderboard's, for two or more runs). */
export function renderHtml(reports: readonly RunReport[], comparison: ComparisonReport | null = null, flaky: FlakyReport | null = null, plots = ""): string {
  const title = comparison ? `Proctor: ${comparison.b.runId} vs ${comparison.a.runId}` : `Proctor: ${reports.map((r) => r.runId).join(", ")}`;
  const body = [comparison ? comparisonSection(comparison) : "", flaky ? flakySection(flaky) : "", plots, ...reports.map(runSection)].filter(Boolean).join("\n");
  return htmlPage(title, body, "Generated by proctor report.");
}

/** A self-contained page: inline style only (the CSP allows nothing else), the title as heading, a muted footer. */
export function htmlPage(title: string, body: string, footer: string, extraStyle = ""): string {
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'">
<title>${htmlEscape(title)}</title>
<style>${HTML_STYLE}${extraStyle}</style>
</head>
<body>
<h1>${htmlEscape(title)}</h1>
${body}
<p class="muted">${htmlEscape(footer)}</p>
</body>
</html>
`;
}
