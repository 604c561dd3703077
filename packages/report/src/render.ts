import { FormatError } from "./errors";
import { renderHtml } from "./html";
import { plotsHtml } from "./leaderboard-render";
import type { LoadedRun } from "./load";
import { buildSwebenchReport, renderCsv, renderJunit } from "./machine";
import { buildComparison, buildFlakyReport, buildRunReport } from "./model";
import { renderMarkdown, renderText } from "./text";

export const FORMATS = ["table", "md", "json", "junit", "html", "csv", "swebench"] as const;
export type ReportFormat = (typeof FORMATS)[number];

export interface RenderOptions {
  /** Bootstrap seed (default 17): the same runs always print the same intervals. */
  seed?: number;
  resamples?: number;
}

/**
 * Renders runs in one format. Two runs add a paired comparison (B = the second against A = the
 * first) to table, md, json and html; three or more add the flaky task definitions found across
 * oracle/nop runs (json: `flakyTasks`); html of two or more runs carries the leaderboard's plots
 * of each dataset as inline SVG; csv and junit list every run's trials; swebench takes one run.
 */
export async function renderReport(runs: readonly LoadedRun[], format: ReportFormat, options: RenderOptions = {}): Promise<string> {
  if (runs.length === 0) throw new FormatError("no runs to report");
  const [first, second] = runs;
  const comparison = runs.length === 2 && first && second ? buildComparison(first, second, options) : null;
  const reports = comparison ? [comparison.a, comparison.b] : runs.map((r) => buildRunReport(r, options));
  // Three or more runs: tasks whose outcome flips under the oracle or nop (flaky definitions).
  const flaky = buildFlakyReport(runs);
  switch (format) {
    case "table":
      return renderText(reports, comparison, flaky);
    case "md":
      return renderMarkdown(reports, comparison, flaky);
    case "html":
      return renderHtml(reports, comparison, flaky, runs.length > 1 ? plotsHtml(runs) : "");
    case "json":
      return `${JSON.stringify(comparison ?? (reports.length === 1 ? reports[0] : { runs: reports, ...(flaky ? { flakyTasks: flaky } : {}) }), null, 2)}\n`;
    case "csv":
      return renderCsv(runs);
    case "junit":
      return renderJunit(runs);
    case "swebench": {
      if (runs.length !== 1 || !first) throw new FormatError(`--format swebench reports one run, got ${runs.length}`);
      return `${JSON.stringify(await buildSwebenchReport(first), null, 2)}\n`;
    }
    default:
      throw new FormatError(`unknown format "${String(format)}"; use one of ${FORMATS.join(", ")}`);
  }
}
