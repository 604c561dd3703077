import { readdir, readFile } from "node:fs/promises";
import { join } from "node:path";
import type { TrialResult } from "@proctor/schema";

/** The first thing that failed in a trial: a test, a check, or the line of the tests' output that says why. */
export interface FirstFailure {
  /** A test id, a check name, or "tests' output" when only the output says it. */
  name: string;
  /** One line: the test's status, the check's last output line, or the failing line itself. */
  message: string;
}

const MAX_MESSAGE = 300;

function clip(text: string): string {
  const line = text.replace(/\s+/g, " ").trim();
  return line.length > MAX_MESSAGE ? `${line.slice(0, MAX_MESSAGE - 3)}...` : line;
}

/** The last non-empty line of some output (where a failing command usually says why). */
function lastLine(text: string): string {
  const lines = text.split("\n").map((l) => l.trim()).filter((l) => l !== "" && !/^=+$|^-+$/.test(l));
  return lines.at(-1) ?? "";
}

// Lines test runners print for a failure: pytest's short summary and its `E` lines, TAP, unittest,
// go, cargo, jest/mocha, and the FAIL:/error: lines of shell tests.
const PYTEST_SUMMARY = /^(FAILED|ERROR) (\S+)(?: - (.*))?$/;
const FAILURE_LINE = /^(?:E\s{2,}\S|not ok\b|FAIL\b|FAIL:|FAILED\b|--- FAIL:|ERROR:|Error:|error:|AssertionError|Traceback|✕|\d+\) )/;

/** The first failing test or line in a verifier's output, or null when it names none. */
export function failureInOutput(text: string): FirstFailure | null {
  const lines = text.split("\n").map((l) => l.replace(/\r$/, ""));
  for (const line of lines) {
    const m = PYTEST_SUMMARY.exec(line.trim());
    if (m?.[2]) return { name: m[2], message: clip(m[3] ?? m[1] ?? "") || (m[1] ?? "FAILED") };
  }
  const hit = lines.find((l) => FAILURE_LINE.test(l.trim()));
  if (hit) return { name: "tests' output", message: clip(hit) };
  return null;
}

/**
 * What failed first, from the result and (for tasks whose tests write a reward) the verifier's
 * output: SWE-bench's failing FAIL_TO_PASS / PASS_TO_PASS test, the first failed check with its
 * output's last line, or the first failure line of the tests' output. Null for a pass, or when
 * nothing names a failure.
 */
export function firstFailure(r: TrialResult, verifierOutput: string | null = null): FirstFailure | null {
  if (r.status === "passed") return null;
  if (r.error) return { name: `${r.error.kind} error`, message: clip(r.error.message) };
  const c = r.competition;
  if (c && !c.valid) return { name: "submission", message: clip(c.note ?? "the grader found it invalid") };
  if (r.grading) {
    for (const [list, label] of [[r.grading.failToPass.failure, "FAIL_TO_PASS"], [r.grading.passToPass.failure, "PASS_TO_PASS"]] as const) {
      const id = list[0];
      if (id !== undefined) return { name: id, message: `${label} test ${r.grading.tests[id] ?? "not run"}` };
    }
  }
  const check = (r.checks ?? []).find((x) => !x.passed);
  if (check) return { name: check.name, message: check.timedOut ? "timed out" : clip(lastLine(check.output) || `exit ${check.exitCode}`) };
  if (verifierOutput) return failureInOutput(verifierOutput) ?? (lastLine(verifierOutput) ? { name: "tests' output", message: clip(lastLine(verifierOutput)) } : null);
  return null;
}

/** At most this much of each log is searched: both ends of a longer one (a shell test fails early, pytest sums up at the end). */
const SEARCHED_BYTES = 512 * 1024;

async function readEnds(path: string): Promise<string> {
  const text = await readFile(path, "utf8").catch(() => "");
  return text.length > SEARCHED_BYTES ? `${text.slice(0, SEARCHED_BYTES / 2)}\n${text.slice(-SEARCHED_BYTES / 2)}` : text;
}

/**
 * firstFailure with the verifier's output read from the trial directory: Proctor's captures
 * (`verifier/test-stdout.txt`, `test-stderr.txt`), then the text files the tests wrote under
 * `logs/verifier/` (a pytest report, say: the sandbox's own files, shown as a hint only).
 */
export async function readFirstFailure(r: TrialResult, trialDir: string): Promise<FirstFailure | null> {
  if (r.status === "passed") return null;
  const captured = [await readEnds(join(trialDir, "verifier", "test-stdout.txt")), await readEnds(join(trialDir, "verifier", "test-stderr.txt"))].filter((t) => t.trim() !== "").join("\n");
  const named = firstFailure(r, null) ?? (captured !== "" ? failureInOutput(captured) : null);
  if (named) return named;
  if (r.error || r.competition) return null;
  const sandboxDir = join(trialDir, "logs", "verifier");
  const files = (await readdir(sandboxDir, { withFileTypes: true }).catch(() => [])).filter((e) => e.isFile() && /\.(txt|log|out)$/.test(e.name)).map((e) => e.name).sort();
  for (const name of files) {
    const found = failureInOutput(await readEnds(join(sandboxDir, name)));
    if (found) return found;
  }
  return captured !== "" && lastLine(captured) ? { name: "tests' output", message: clip(lastLine(captured)) } : null;
}
