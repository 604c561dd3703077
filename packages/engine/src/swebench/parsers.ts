/**
 * Test-log parsers for SWE-bench-style grading: each turns a test run's output into one status
 * per test id. Pure functions; sample logs they are checked against live in sample-logs/.
 */

export type TestStatus = "PASSED" | "FAILED" | "SKIPPED" | "ERROR" | "XFAIL";
export type TestStatusMap = Record<string, TestStatus>;
export type LogParserName = "pytest" | "unittest" | "django" | "sympy" | "go" | "cargo" | "jest" | "mocha";

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
  // The section ends at pytest's final line (`==== 2 passed in 0.1s ====`): what comes after it
  // is not pytest's (an atexit hook of the code under test printing "PASSED x").
  const endsAt = summaryAt < 0 ? -1 : all.findIndex((l, i) => i > summaryAt && /^=+ .+ =+$/.test(l.trim()));
  const out: TestStatusMap = {};
  const verbose: TestStatusMap = {};
  all.forEach((line, index) => {
    const v = /^(\S+::\S.*?) (PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)(?: .*)?$/.exec(line);
    if (v && (summaryAt < 0 || index < summaryAt)) {
      const status = PYTEST_STATUS[v[2] as string];
      if (status) verbose[v[1] as string] = status;
    }
    if (summaryAt >= 0 && index <= summaryAt) return;
    if (endsAt >= 0 && index >= endsAt) return;
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

/** `test_x (pkg.mod.Class.test_x)` (Python 3.11+) as the classic `test_x (pkg.mod.Class)`. */
function classicId(name: string, where: string): string {
  return `${name} (${where.endsWith(`.${name}`) ? where.slice(0, -name.length - 1) : where})`;
}

const DJANGO_STATUS: [RegExp, TestStatus][] = [
  [/^(ok|OK)$/, "PASSED"],
  [/^FAIL$/, "FAILED"],
  [/^ERROR$/, "ERROR"],
  [/^skipped\b/, "SKIPPED"],
  [/^expected failure$/, "XFAIL"],
  [/^unexpected success$/, "FAILED"],
];
const djangoStatus = (result: string) => DJANGO_STATUS.find(([re]) => re.test(result.trim()))?.[1];

/**
 * Django's `runtests.py --verbosity 2` (the unittest runner, with Django's own noise): `test_x
 * (app.tests.Class) ... ok`. A test with a docstring is named on one line and its docstring's
 * first line carries the result: both are ids (SWE-bench's Django lists use the docstring). When a
 * test prints between `...` and its result (migrations, "Internal Server Error: ..."), the result
 * is the next line that is one alone. `FAIL:` / `ERROR:` headers of the failure report count too.
 */
export function parseDjango(log: string): TestStatusMap {
  const out: TestStatusMap = {};
  let named: string | null = null;
  let pending: string[] | null = null;
  for (const raw of lines(log)) {
    const line = raw.trimEnd();
    const header = /^(FAIL|ERROR): (\w+) \(([\w.]+)\)/.exec(line);
    if (header) {
      out[classicId(header[2] as string, header[3] as string)] = header[1] === "FAIL" ? "FAILED" : "ERROR";
      named = pending = null;
      continue;
    }
    const alone = /^(\w+) \(([\w.]+)\)$/.exec(line);
    if (alone) {
      named = classicId(alone[1] as string, alone[2] as string);
      pending = null;
      continue;
    }
    const run = /^(.+?) \.\.\.(?: (.*))?$/.exec(line);
    if (run) {
      const desc = run[1] as string;
      const test = /^(\w+) \(([\w.]+)\)$/.exec(desc);
      const ids = test ? [classicId(test[1] as string, test[2] as string)] : named !== null ? [named, desc] : [desc];
      named = null;
      const status = djangoStatus(run[2] ?? "");
      if (status) {
        for (const id of ids) out[id] = status;
        pending = null;
      } else pending = ids;
      continue;
    }
    const late = pending !== null ? djangoStatus(line) : undefined;
    if (late && pending !== null) {
      for (const id of pending) out[id] = late;
      pending = null;
    }
  }
  return out;
}

/** Records a status under an id that several tests may share: a failure is never masked by a later pass. */
function setWorst(out: TestStatusMap, id: string, status: TestStatus): void {
  const before = out[id];
  if (before === "FAILED" || before === "ERROR") return;
  out[id] = status;
}

/**
 * sympy's `bin/test --verbose` (SWE-bench runs `bin/test -C --verbose`): `test_name   ok`, `F`,
 * `E`, `f` (expected failure), `X` (unexpected pass), `reason  - s` (skipped); a file's `[OK]` /
 * `[FAIL]` may end the line. Ids are bare function names, as in SWE-bench; the
 * `____ path.py:test_name ____` headers of the failure report mark a test failed too.
 */
export function parseSympy(log: string): TestStatusMap {
  const out: TestStatusMap = {};
  for (const raw of lines(log)) {
    const line = raw.trim();
    const header = /^_+ \S+\.py:(\w+) _+$/.exec(line);
    if (header) {
      const id = header[1] as string;
      if (out[id] !== "ERROR") out[id] = "FAILED";
      continue;
    }
    const m = /^(test_\w+)\s+(.*?)\s*(?:\[(?:OK|FAIL)\])?$/.exec(line);
    if (!m) continue;
    const tail = m[2] as string;
    const status: TestStatus | undefined =
      tail === "ok" || tail === "X" ? "PASSED" : tail === "F" ? "FAILED" : tail === "E" || tail === "T" ? "ERROR" : tail === "f" ? "XFAIL" : /(^|\s)- [swKT]$/.test(tail) ? "SKIPPED" : undefined;
    if (status) setWorst(out, m[1] as string, status);
  }
  return out;
}

/** Strips a reporter's duration suffix: `title (3 ms)`, `title (112ms)`, `title (1.2 s)`. */
function withoutDuration(title: string): string {
  return title.replace(/ \(\d+(?:\.\d+)? ?m?s\)$/, "");
}

/**
 * Results under nested describe blocks, read by indentation (2 spaces a level): `path` gets the
 * enclosing titles, the test is recorded under its bare title (SWE-bench's jest/mocha ids) and
 * under the titles joined with `sep` (jest's `a › b`, mocha's fullTitle `a b`).
 */
class DescribeStack {
  private titles: string[] = [];
  constructor(private readonly base: number) {}
  depth(indent: number): number {
    return Math.max(0, Math.floor((indent - this.base) / 2));
  }
  enter(indent: number, title: string): void {
    this.titles = [...this.titles.slice(0, this.depth(indent)), title];
  }
  path(indent: number): string[] {
    return this.titles.slice(0, this.depth(indent));
  }
  reset(): void {
    this.titles = [];
  }
}

/**
 * `jest --verbose`: per suite (` PASS  file` / ` FAIL  file`) the describe blocks and `✓ title
 * (3 ms)`, `✕ title`, `○ skipped title`, `✎ todo title`. The failure details that follow a suite's
 * results (`● a › b` and the message) are not read, so a message cannot fake a result.
 */
export function parseJest(log: string): TestStatusMap {
  const out: TestStatusMap = {};
  const stack = new DescribeStack(2);
  let inResults = false;
  for (const line of lines(log)) {
    if (/^ (PASS|FAIL) {2}\S/.test(line)) {
      inResults = true;
      stack.reset();
      continue;
    }
    if (!inResults) continue;
    if (/^\s*● /.test(line) || /^(Test Suites|Tests):/.test(line)) {
      inResults = false;
      continue;
    }
    const m = /^( +)(✓|✔|√|✕|×|○|✎) (.+)$/.exec(line);
    if (m) {
      const indent = (m[1] as string).length;
      const symbol = m[2] as string;
      const title = withoutDuration((m[3] as string).replace(/^(skipped|todo) /, symbol === "○" || symbol === "✎" ? "" : "$1 "));
      const status: TestStatus = symbol === "✕" || symbol === "×" ? "FAILED" : symbol === "○" || symbol === "✎" ? "SKIPPED" : "PASSED";
      setWorst(out, title, status);
      out[[...stack.path(indent), title].join(" › ")] = status;
      continue;
    }
    const describe = /^( +)(\S.*)$/.exec(line);
    if (describe) stack.enter((describe[1] as string).length, (describe[2] as string).trimEnd());
  }
  return out;
}

/**
 * mocha's spec reporter: describe blocks, `✔ title (112ms)` (`✓` in older mocha), `N) title`
 * (failed), `- title` (pending). Reading stops at the `N passing` summary: the failure details
 * below repeat titles with messages.
 */
export function parseMocha(log: string): TestStatusMap {
  const out: TestStatusMap = {};
  const stack = new DescribeStack(2);
  for (const line of lines(log)) {
    if (/^\s+\d+ passing\b/.test(line)) break;
    const m = /^( +)(?:(✔|✓|√)|(\d+)\)|(-)) (.+)$/.exec(line);
    if (m) {
      const indent = (m[1] as string).length;
      const title = withoutDuration(m[5] as string);
      const status: TestStatus = m[2] ? "PASSED" : m[3] ? "FAILED" : "SKIPPED";
      setWorst(out, title, status);
      out[[...stack.path(indent), title].join(" ")] = status;
      continue;
    }
    const describe = /^( +)(\S.*)$/.exec(line);
    if (describe) stack.enter((describe[1] as string).length, (describe[2] as string).trimEnd());
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
  django: parseDjango,
  sympy: parseSympy,
  go: parseGoTest,
  cargo: parseCargoTest,
  jest: parseJest,
  mocha: parseMocha,
};

/** A test counts as passing when it PASSED or XFAILed (as in SWE-bench). */
export function testPassed(status: TestStatus | undefined): boolean {
  return status === "PASSED" || status === "XFAIL";
}
