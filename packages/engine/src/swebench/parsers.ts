/**
 * Test-log parsers for SWE-bench-style grading: each turns a test run's output into one status
 * per test id. Pure functions; sample logs they are checked against live in sample-logs/.
 */

export type TestStatus = "PASSED" | "FAILED" | "SKIPPED" | "ERROR" | "XFAIL";
export type TestStatusMap = Record<string, TestStatus>;
export type LogParserName = "pytest" | "unittest" | "go" | "cargo";

// eslint-disable-next-line no-control-regex
const ANSI = /\x1b\[[0-9;]*[A-Za-z]/g;

function lines(log: string): string[] {
  return log.replace(ANSI, "").split(/\r?\n/);
}

/** Statuses a pytest summary line starts with; XPASS counts as passed. */
const PYTEST_STATUS: Record<string, TestStatus> = { PASSED: "PASSED", FAILED: "FAILED", SKIPPED: "SKIPPED", ERROR: "ERROR", XFAIL: "XFAIL", XPASS: "PASSED" };

/**
 * The test id at the start of `rest` (what follows the status word): up to the first " - "
 * outside parametrize brackets, so `test_x[a - b] - AssertionError` gives `test_x[a - b]`.
 */
function pytestId(rest: string): string {
  let depth = 0;
  const start = rest.indexOf("::");
  for (let i = Math.max(0, start); i < rest.length; i++) {
    const c = rest[i];
    if (c === "[") depth++;
    else if (c === "]") depth = Math.max(0, depth - 1);
    else if (depth === 0 && rest.startsWith(" - ", i)) return rest.slice(0, i);
  }
  return rest.trimEnd();
}

/**
 * pytest with `-rA`: the "short test summary info" lines (`PASSED id`, `FAILED id - msg`, ...).
 * Only that section is read when it is there, so a test printing "PASSED x" into its captured
 * output cannot fake a result; verbose lines (`id PASSED [ 50%]`) fill in tests it lacks.
 */
export function parsePytest(log: string): TestStatusMap {
  const all = lines(log);
  const summaryAt = all.findIndex((l) => /^=+ short test summary info =+$/.test(l.trim()));
  const out: TestStatusMap = {};
  const verbose: TestStatusMap = {};
  all.forEach((line, index) => {
    const v = /^(\S+::\S.*?) (PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)(?: .*)?$/.exec(line);
    if (v && (summaryAt < 0 || index < summaryAt)) {
      const status = PYTEST_STATUS[v[2] as string];
      if (status) verbose[v[1] as string] = status;
    }
    if (summaryAt >= 0 && index <= summaryAt) return;
    const m = /^(PASSED|FAILED|SKIPPED|ERROR|XFAIL|XPASS) (.+)$/.exec(line);
    if (!m) return;
    const rest = m[2] as string;
    // `SKIPPED [1] file.py:10: reason` names a location, not a test id.
    if (/^\[\d+\] /.test(rest)) return;
    const status = PYTEST_STATUS[m[1] as string];
    if (status) out[pytestId(rest)] = status;
  });
  return { ...verbose, ...out };
}

const UNITTEST_STATUS: [RegExp, TestStatus][] = [
  [/^ok$/, "PASSED"],
  [/^FAIL$/, "FAILED"],
  [/^ERROR$/, "ERROR"],
  [/^skipped\b/, "SKIPPED"],
  [/^expected failure$/, "XFAIL"],
  [/^unexpected success$/, "FAILED"],
];

/**
 * unittest / Django runner with verbosity 2: `test_x (pkg.mod.Class) ... ok`. A docstring puts the
 * result on the next line. Python 3.11+ names `test_x (pkg.mod.Class.test_x)`: shortened to the
 * classic `test_x (pkg.mod.Class)` that SWE-bench ids use.
 */
export function parseUnittest(log: string): TestStatusMap {
  const out: TestStatusMap = {};
  let pending: string | null = null;
  for (const line of lines(log)) {
    const head = /^(\w+) \(([\w.]+)\)(?:\s*\.\.\.\s*(.*))?$/.exec(line);
    let id: string | null = null;
    let result: string | undefined;
    if (head) {
      const name = head[1] as string;
      const where = (head[2] as string).endsWith(`.${name}`) ? (head[2] as string).slice(0, -name.length - 1) : (head[2] as string);
      id = `${name} (${where})`;
      result = head[3];
      if (result === undefined) {
        pending = id;
        continue;
      }
    } else if (pending !== null) {
      const tailMatch = /\s\.\.\.\s(.*)$/.exec(line);
      if (!tailMatch) continue;
      id = pending;
      result = tailMatch[1];
    } else continue;
    pending = null;
    const status = UNITTEST_STATUS.find(([re]) => re.test((result ?? "").trim()))?.[1];
    if (status && id !== null) out[id] = status;
  }
  return out;
}

/** `go test -v`: `--- PASS: TestX (0.00s)`, subtests `TestX/name` included. */
export function parseGoTest(log: string): TestStatusMap {
  const out: TestStatusMap = {};
  const map: Record<string, TestStatus> = { PASS: "PASSED", FAIL: "FAILED", SKIP: "SKIPPED" };
  for (const line of lines(log)) {
    const m = /^\s*--- (PASS|FAIL|SKIP): (\S+)/.exec(line);
    if (m) out[m[2] as string] = map[m[1] as string] as TestStatus;
  }
  return out;
}

/** `cargo test`: `test path::name ... ok | FAILED | ignored`. */
export function parseCargoTest(log: string): TestStatusMap {
  const out: TestStatusMap = {};
  const map: Record<string, TestStatus> = { ok: "PASSED", FAILED: "FAILED", ignored: "SKIPPED" };
  for (const line of lines(log)) {
    const m = /^test (\S+) \.\.\. (ok|FAILED|ignored)\b/.exec(line);
    if (m) out[m[1] as string] = map[m[2] as string] as TestStatus;
  }
  return out;
}

export const LOG_PARSERS: Record<LogParserName, (log: string) => TestStatusMap> = {
  pytest: parsePytest,
  unittest: parseUnittest,
  go: parseGoTest,
  cargo: parseCargoTest,
};

/** A test counts as passing when it PASSED or XFAILed (as in SWE-bench). */
export function testPassed(status: TestStatus | undefined): boolean {
  return status === "PASSED" || status === "XFAIL";
}
