import { NoTestsToGradeError } from "./errors";

export type PytestStatus = "PASSED" | "FAILED" | "ERROR" | "SKIPPED" | "XFAIL" | "XPASS";

const STATUSES = "PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS";
// eslint-disable-next-line no-control-regex
const ANSI = /\u001b\[[0-9;]*[A-Za-z]/g;
/**
 * `-rA` short summary: `STATUS <nodeid>` optionally followed by ` - message`. A parametrized id
 * (`test[a - b]`) may hold spaces, so it runs to the first `]` that ends the line or precedes " - ".
 */
const SUMMARY = new RegExp(`^(${STATUSES}) (\\S*?\\[.*?\\](?= - |$)|\\S+)`);
/** `-v` progress lines: `<nodeid> STATUS [ 42%]`. */
const VERBOSE = new RegExp(`^(\\S+::\\S.*?) (${STATUSES})(?:\\s+\\[\\s*\\d+%\\])?$`);

/**
 * Reads pytest output (run with `-rA`; `-v` lines are understood too) into test id -> status.
 * A test that appears more than once keeps its last status, so the short summary at the end
 * wins over progress lines. Folded skip lines (`SKIPPED [2] file.py:10: reason`) name no test
 * and are ignored.
 */
export function parsePytestLog(log: string): Map<string, PytestStatus> {
  const statuses = new Map<string, PytestStatus>();
  for (const raw of log.split(/\r?\n/)) {
    const line = raw.replace(ANSI, "").trimEnd();
    const summary = SUMMARY.exec(line);
    if (summary) {
      const id = summary[2] as string;
      if (id.startsWith("[")) continue; // folded skip: "SKIPPED [1] path:line: reason"
      statuses.set(id, summary[1] as PytestStatus);
      continue;
    }
    const verbose = VERBOSE.exec(line);
    if (verbose) statuses.set(verbose[1] as string, verbose[2] as PytestStatus);
  }
  return statuses;
}

/** PASSED, or XFAIL (the test's expected failure happened) — as the SWE-bench harness counts it. */
export function testPassed(status: PytestStatus | undefined): boolean {
  return status === "PASSED" || status === "XFAIL";
}

export interface TestListOutcome {
  total: number;
  passed: string[];
  /** Listed tests that did not pass, with their status or "missing" when the log never mentions them. */
  failed: Array<{ test: string; status: PytestStatus | "missing" }>;
}

export interface GradeDetails {
  failToPass: TestListOutcome;
  passToPass: TestListOutcome;
}

function outcome(tests: readonly string[], statuses: ReadonlyMap<string, PytestStatus>): TestListOutcome {
  const result: TestListOutcome = { total: tests.length, passed: [], failed: [] };
  for (const test of tests) {
    const status = statuses.get(test);
    if (testPassed(status)) result.passed.push(test);
    else result.failed.push({ test, status: status ?? "missing" });
  }
  return result;
}

/**
 * SWE-bench grading: resolved iff every FAIL_TO_PASS and every PASS_TO_PASS test passed.
 * A listed test missing from the log, skipped, or erroring counts as failed. Throws
 * NoTestsToGradeError when both lists are empty.
 */
export function gradeTests(input: {
  statuses: ReadonlyMap<string, PytestStatus>;
  failToPass: readonly string[];
  passToPass: readonly string[];
}): { resolved: boolean; details: GradeDetails } {
  if (input.failToPass.length === 0 && input.passToPass.length === 0) throw new NoTestsToGradeError();
  const details = {
    failToPass: outcome(input.failToPass, input.statuses),
    passToPass: outcome(input.passToPass, input.statuses),
  };
  return { resolved: details.failToPass.failed.length === 0 && details.passToPass.failed.length === 0, details };
}
