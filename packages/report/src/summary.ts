import type { GroupSummary, RunSummary } from "@proctor/schema";
import { describeCost } from "./cost";
import { formatDuration, percent, textTable } from "./text";

function groupRow(name: string, g: GroupSummary): string[] {
  return [name, String(g.total), g.flagged ? `${g.passed} (+${g.flagged} flagged)` : String(g.passed), String(g.failed), String(g.errored), percent(g.passRate), g.meanReward === null ? "-" : g.meanReward.toFixed(3)];
}

/**
 * The end-of-run report from summary.json (what `proctor run` prints): per-category table,
 * totals, and what every rate is out of; integrity, token usage and an unfinished run's gap.
 */
export function renderRunSummary(summary: RunSummary): string {
  const header = ["category", "trials", "passed", "failed", "errored", "pass rate", "mean reward"];
  const rows = Object.entries(summary.byCategory)
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([name, g]) => groupRow(name, g));
  const t = summary.trials;
  rows.push(groupRow("all", { total: t.total, passed: t.passed, ...(t.flagged !== undefined ? { flagged: t.flagged } : {}), failed: t.failed, errored: t.errored, passRate: summary.passRate, meanReward: summary.meanReward }));
  const lines = [textTable(header, rows), ""];
  const r = summary.rates;
  lines.push(`pass rate      ${percent(r.passRate.value)} (${r.passRate.numerator}/${r.passRate.denominator} ${r.passRate.of})`);
  lines.push(`scored only    ${percent(r.passRateScored.value)} (${r.passRateScored.numerator}/${r.passRateScored.denominator} ${r.passRateScored.of})`);
  const se = summary.meanRewardStdErr === null ? "" : ` ± ${summary.meanRewardStdErr.toFixed(3)} standard error over tasks,`;
  lines.push(`mean reward    ${r.meanReward.value === null ? "-" : r.meanReward.value.toFixed(3)} (${se.trimStart()} ${r.meanReward.denominator} ${r.meanReward.of})`.replace("( ", "("));
  if (summary.passAtK) {
    lines.push(`pass@k         ${Object.entries(summary.passAtK).map(([k, v]) => `pass@${k} ${percent(v)}`).join("  ")}`);
  }
  const errors = Object.entries(summary.errorsByKind).filter(([, n]) => n > 0);
  if (errors.length > 0) lines.push(`errors         ${errors.map(([k, n]) => `${k} ${n}`).join(", ")}`);
  const integrity = summary.integrity;
  const flagged = integrity?.flagged ?? 0;
  if (integrity && (flagged > 0 || integrity.tampered > 0 || integrity.unchecked > 0)) {
    const parts = [
      integrity.tampered > 0 ? `${integrity.tampered} tampered with the verifier (agent errors, reward 0)` : null,
      flagged > 0 ? `${flagged} passed but flagged for audit, not counted as passes (see integrity.flags in result.json)` : null,
      integrity.unchecked > 0 ? `${integrity.unchecked} not checked for tampering (the runtime cannot)` : null,
    ].filter(Boolean);
    lines.push(`integrity      ${parts.join("; ")}`);
  }
  if (summary.usage) {
    const u = summary.usage;
    const n = (x: number) => x.toLocaleString("en-US");
    lines.push(`tokens         ${n(u.inputTokens)} in, ${n(u.outputTokens)} out (${n(u.requests)} model requests, ${n(u.retries)} retried, over ${u.trials} trials)`);
    if (!summary.cost && u.costUsd !== undefined) lines.push(`cost           $${u.costUsd.toFixed(4)} (from the price table, over ${u.trials} trials)`);
  }
  const cost = costLine(summary);
  if (cost) lines.push(`cost           ${cost}`);
  const budget = summary.budget;
  if (budget) {
    const limits = [
      budget.maxCostUsd !== undefined ? `--max-cost $${budget.maxCostUsd}` : null,
      budget.maxTokens !== undefined ? `--max-tokens ${budget.maxTokens.toLocaleString("en-US")}` : null,
      budget.trialMaxCostUsd !== undefined ? `--trial-max-cost $${budget.trialMaxCostUsd}` : null,
    ].filter(Boolean);
    const spent = `$${budget.spentUsd.toFixed(4)} and ${budget.spentTokens.toLocaleString("en-US")} tokens spent`;
    lines.push(`budget         ${limits.join(", ")}: ${spent}${budget.exhausted ? `; spent (${budget.exhausted}): ${budget.notRun} trial(s) not run, resume with a higher budget` : ""}`);
  }
  if (summary.error) lines.push(`stopped        ${summary.error}`);
  if (t.total < t.planned) lines.push(`unfinished     ${t.planned - t.total} of ${t.planned} planned trials${summary.status === "budget_exhausted" ? " not run (budget spent; not counted as failures)" : ""}`);
  lines.push(`status         ${summary.status} in ${formatDuration(summary.durationMs)}`);
  return lines.join("\n");
}

/**
 * The run's cost in one line (null for a run with nothing to price: no model usage, no compute
 * price): the total with its parts, per trial and per pass, and where the
 * prices come from; trials without a price are counted apart, never as $0.
 */
function costLine(summary: RunSummary): string | null {
  const c = summary.cost;
  if (!c || (!summary.usage && c.computeUsd === null)) return null;
  return describeCost(c);
}
