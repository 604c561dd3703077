import type { TrialResult } from "@proctor/schema";
import type { FirstFailure } from "./failure";
import { clipAtWord } from "./text";

// `proctor tasks validate`: a task is valid when the oracle passes (SWE-bench: resolves) and nop
// scores 0 without an error. These name what broke, with the failing tests or checks.

const MAX_NAMED = 8;

function listed(ids: readonly string[]): string {
  return ids.length > MAX_NAMED ? `${ids.slice(0, MAX_NAMED).join(", ")} and ${ids.length - MAX_NAMED} more` : ids.join(", ");
}

/** An error message's first line: whole (Proctor's own messages are one sentence), a very long one cut at a word. */
function firstLine(text: string): string {
  return clipAtWord(text.split("\n")[0] ?? "", 600);
}

/** What went wrong with the oracle's trial, naming the tests (or checks) that failed. */
function oracleProblem(r: TrialResult | undefined, failure: FirstFailure | null | undefined): string | null {
  if (!r) return "oracle did not run";
  if (r.status === "passed") return null;
  if (r.status === "error") return `oracle error (${r.error?.kind}: ${firstLine(r.error?.message ?? "")})`;
  if (r.grading) {
    const parts = [];
    if (r.grading.failToPass.failure.length > 0) parts.push(`FAIL_TO_PASS failing: ${listed(r.grading.failToPass.failure.map((id) => `${id} (${r.grading?.tests[id] ?? "not run"})`))}`);
    if (r.grading.passToPass.failure.length > 0) parts.push(`PASS_TO_PASS failing: ${listed(r.grading.passToPass.failure.map((id) => `${id} (${r.grading?.tests[id] ?? "not run"})`))}`);
    return `oracle does not resolve: ${parts.join("; ") || "no failing test named"}`;
  }
  const failing = (r.checks ?? []).filter((c) => !c.passed).map((c) => `${c.name} (${c.timedOut ? "timed out" : `exit ${c.exitCode}`})`);
  // Tasks whose tests write a reward name their failure only in their output.
  const named = failing.length > 0 ? `; failing checks: ${listed(failing)}` : failure ? `; first failure: ${failure.name === "tests' output" ? failure.message : `${failure.name}: ${failure.message}`}` : "";
  return `oracle reward ${r.reward}, expected 1${named}`;
}

/** What went wrong with nop's trial: it must score 0 without an error. */
function nopProblem(r: TrialResult | undefined): string | null {
  if (!r) return "nop did not run";
  if (r.status === "error") return `nop error (${r.error?.kind}: ${firstLine(r.error?.message ?? "")})`;
  if (r.status === "failed" && r.reward === 0) return null;
  if (r.grading) {
    // The tests that should fail before the fix but pass with no change at all.
    const passing = r.grading.failToPass.success;
    return `nop resolves: ${passing.length > 0 ? `FAIL_TO_PASS already passing without a fix: ${listed(passing)}` : "every FAIL_TO_PASS test passes without a fix"}`;
  }
  const passing = (r.checks ?? []).filter((c) => c.passed).map((c) => c.name);
  return `nop reward ${r.reward}, expected 0${passing.length > 0 ? `; checks passing without a fix: ${listed(passing)}` : ""}`;
}

/**
 * What is wrong with a task from its oracle and nop trials (none run: that is a problem too); [] when
 * valid. `oracleFailure` (readFirstFailure of the oracle's trial) names the failing test or line of
 * a task whose tests only write a reward.
 */
export function validationProblems(trials: { oracle?: TrialResult; nop?: TrialResult }, oracleFailure?: FirstFailure | null): string[] {
  return [oracleProblem(trials.oracle, oracleFailure), nopProblem(trials.nop)].filter((p): p is string => p !== null);
}
