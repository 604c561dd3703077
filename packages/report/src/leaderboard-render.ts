import { FormatError } from "./errors";
import { htmlEscape, HTML_STYLE } from "./html";
import { buildLeaderboard, leaderboardPlots, runStats, type Leaderboard, type LeaderboardGroup, type LeaderboardRow, type RunStats } from "./leaderboard";
import type { LoadedRun } from "./load";
import { categorySvg, costSvg, heatmapSvg, passAtKSvg } from "./plots-svg";
import { formatDuration, mdTable, percent, percentInterval, textTable } from "./text";

/** Formats `proctor report --leaderboard` prints. */
export const LEADERBOARD_FORMATS = ["table", "md", "json", "html"] as const;
export type LeaderboardFormat = (typeof LEADERBOARD_FORMATS)[number];

/** USD with enough digits for a cent or less; "—" when there is no cost (never $0 for unpriced). */
export function formatUsd(value: number | null): string {
  if (value === null) return "—";
  if (value === 0) return "$0";
  return value >= 1 ? `$${value.toFixed(2)}` : value >= 0.01 ? `$${value.toFixed(3)}` : `$${value.toPrecision(2)}`;
}

/** Token counts as 950, 12.3k, 4.56M. */
export function formatTokens(value: number | null): string {
  if (value === null) return "—";
  if (value < 1000) return String(Math.round(value));
  if (value < 1e6) return `${(value / 1e3).toFixed(value < 1e4 ? 2 : 1)}k`;
  return `${(value / 1e6).toFixed(2)}M`;
}

const HEADER = ["#", "agent", "model", "pass rate [95% CI]", "pass@k", "cost/task", "tokens/task", "median trial", "trials", "runs", "comparable"];

function rowCells(r: LeaderboardRow, i: number): string[] {
  return [
    String(i + 1),
    r.agent,
    r.model ?? "-",
    `${percent(r.passRate)} ${percentInterval(r.ci)}`.trim(),
    r.passAtK.length > 1 ? r.passAtK.filter((p) => p.k === 1 || p.k === r.passAtK.length || p.k === 5 || p.k === 10).map((p) => `@${p.k} ${percent(p.value)}`).join(" ") : "-",
    formatUsd(r.costPerTask),
    formatTokens(r.tokensPerTask),
    r.medianTrialMs === null ? "-" : formatDuration(r.medianTrialMs),
    String(r.trials),
    String(r.runs.length),
    r.comparable ? "yes" : `NO: ${r.notComparable}`,
  ];
}

function groupTitle(g: LeaderboardGroup): string {
  const from = g.dataset.from === "sources" ? " (by its sources' names)" : "";
  return `Dataset ${g.dataset.key}${from}: ${g.rows.length} agent/model row${g.rows.length === 1 ? "" : "s"}${g.comparable ? "" : " — NOT all comparable (different tasks or task content)"}`;
}

function renderTextLike(board: Leaderboard, table: (header: string[], rows: string[][]) => string, heading: (s: string) => string): string {
  const out = [heading(`Leaderboard over ${board.runs} run${board.runs === 1 ? "" : "s"}`), ""];
  for (const g of board.groups) out.push(heading(groupTitle(g)), "", table(HEADER, g.rows.map(rowCells)), "");
  out.push("pass rate: clean passes / finished trials over a row's runs (errors count as not passed), 95% Wilson interval; pass@k: unbiased estimator; cost/task: USD over all attempts / tasks (— when unpriced).", "");
  return out.join("\n");
}

function htmlTable(g: LeaderboardGroup): string {
  const numeric = new Set([0, 3, 5, 6, 7, 8, 9]);
  const head = HEADER.map((h, i) => `<th${numeric.has(i) ? ' class="n"' : ""}>${htmlEscape(h)}</th>`).join("");
  const body = g.rows
    .map((r, i) => `<tr${r.comparable ? "" : ' class="not-comparable"'}>${rowCells(r, i).map((c, j) => `<td${numeric.has(j) ? ' class="n"' : j === 10 && !r.comparable ? ' class="error"' : ""}>${htmlEscape(c)}</td>`).join("")}</tr>`)
    .join("\n");
  return `<table class="board"><thead><tr>${head}</tr></thead><tbody>\n${body}\n</tbody></table>`;
}

/** A dataset's four plots as inline SVG figures (inline, an svg element needs no xmlns: the file keeps no URL at all). */
function plotFigures(stats: readonly RunStats[], datasetKey: string): string {
  const plots = leaderboardPlots(stats, datasetKey);
  if (!plots) return "";
  return [costSvg(plots.cost), categorySvg(plots.categories), passAtKSvg(plots.passAtK), heatmapSvg(plots.heatmap)]
    .map((svg) => `<figure>${svg.replace(' xmlns="http://www.w3.org/2000/svg"', "")}</figure>`)
    .join("\n");
}

/** The leaderboard's plots of each dataset among `runs`, for the HTML report of two or more runs. */
export function plotsHtml(runs: readonly LoadedRun[]): string {
  const stats = runs.map(runStats);
  return buildLeaderboard(stats)
    .groups.map((g) => `<h2>Plots: ${htmlEscape(g.dataset.key)}</h2>\n${plotFigures(stats, g.dataset.key)}`)
    .join("\n");
}

function renderLeaderboardHtml(board: Leaderboard, runs: readonly LoadedRun[]): string {
  const stats = runs.map(runStats);
  const sections = board.groups.map((g) => [`<h2>${htmlEscape(groupTitle(g))}</h2>`, htmlTable(g), plotFigures(stats, g.dataset.key)].join("\n"));
  const title = `Proctor leaderboard: ${board.runs} run${board.runs === 1 ? "" : "s"}`;
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'">
<title>${htmlEscape(title)}</title>
<style>${HTML_STYLE}table.board td:not(:last-child){white-space:nowrap}</style>
</head>
<body>
<h1>${htmlEscape(title)}</h1>
${sections.join("\n")}
<p class="muted">Generated by proctor report --leaderboard. Pass rate: clean passes / finished trials, 95% Wilson interval; cost/task: USD over all attempts / tasks (— when unpriced).</p>
</body>
</html>
`;
}

/** The leaderboard over runs in one format: table (text), md, json (the data model) or html (tables and plots as inline SVG). */
export function renderLeaderboard(runs: readonly LoadedRun[], format: LeaderboardFormat): string {
  if (runs.length === 0) throw new FormatError("no runs for the leaderboard");
  const board = buildLeaderboard(runs.map(runStats));
  switch (format) {
    case "table":
      return renderTextLike(board, textTable, (s) => s);
    case "md":
      return renderTextLike(board, mdTable, (s) => `## ${s}`);
    case "json":
      return `${JSON.stringify(board, null, 2)}\n`;
    case "html":
      return renderLeaderboardHtml(board, runs);
    default:
      throw new FormatError(`--leaderboard prints ${LEADERBOARD_FORMATS.join(", ")}, not "${String(format)}"`);
  }
}
