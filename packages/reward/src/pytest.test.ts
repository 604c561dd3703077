import { describe, expect, it } from "vitest";
import { NoTestsToGradeError } from "./errors";
import { gradeTests, parsePytestLog } from "./pytest";

const LOG = `
============================= test session starts ==============================
platform linux -- Python 3.11.2, pytest-7.2.1, pluggy-1.0.0
collected 7 items

tests/test_math.py ..F.sx                                                 [100%]

=================================== FAILURES ===================================
___________________________________ test_div ___________________________________
    def test_div():
>       assert div(1, 0) == 0
E       ZeroDivisionError: division by zero
=========================== short test summary info ============================
PASSED tests/test_math.py::test_add
PASSED tests/test_math.py::test_sub
PASSED tests/test_math.py::test_param[1-2]
PASSED tests/test_math.py::test_param[a - b]
FAILED tests/test_math.py::test_div - ZeroDivisionError: division by zero
FAILED tests/test_math.py::test_list[x] - assert [1] == [2]
ERROR tests/test_io.py::test_read - FileNotFoundError: [Errno 2] No such file
SKIPPED [1] tests/test_math.py:40: needs numpy
XFAIL tests/test_math.py::test_known - bug #12
XPASS tests/test_math.py::test_lucky
============ 4 passed, 2 failed, 1 error, 1 skipped, 1 xfailed in 0.12s ============
`;

describe("parsePytestLog", () => {
  it("reads -rA short summary lines", () => {
    expect(Object.fromEntries(parsePytestLog(LOG))).toEqual({
      "tests/test_math.py::test_add": "PASSED",
      "tests/test_math.py::test_sub": "PASSED",
      "tests/test_math.py::test_param[1-2]": "PASSED",
      "tests/test_math.py::test_param[a - b]": "PASSED",
      "tests/test_math.py::test_div": "FAILED",
      "tests/test_math.py::test_list[x]": "FAILED",
      "tests/test_io.py::test_read": "ERROR",
      "tests/test_math.py::test_known": "XFAIL",
      "tests/test_math.py::test_lucky": "XPASS",
    });
  });

  it("reads -v progress lines, with colours and CRLF, and lets the later summary win", () => {
    const log = [
      "tests/t.py::test_a PASSED                                                [ 33%]\r",
      "\u001b[32mtests/t.py::test_b[x y] PASSED\u001b[0m                        [ 66%]",
      "tests/t.py::test_c FAILED                                                [100%]",
      "FAILED tests/t.py::test_a - flaky",
    ].join("\n");
    expect(Object.fromEntries(parsePytestLog(log))).toEqual({
      "tests/t.py::test_a": "FAILED",
      "tests/t.py::test_b[x y]": "PASSED",
      "tests/t.py::test_c": "FAILED",
    });
  });

  it("finds nothing in output that is not pytest's", () => {
    expect(parsePytestLog("make: *** [all] Error 1\nPASSED\n").size).toBe(0);
  });
});

describe("gradeTests", () => {
  const statuses = parsePytestLog(LOG);

  it("resolves when every FAIL_TO_PASS and PASS_TO_PASS test passed (XFAIL counts as passed)", () => {
    const graded = gradeTests({
      statuses,
      failToPass: ["tests/test_math.py::test_add"],
      passToPass: ["tests/test_math.py::test_sub", "tests/test_math.py::test_known", "tests/test_math.py::test_param[a - b]"],
    });
    expect(graded.resolved).toBe(true);
    expect(graded.details.failToPass).toEqual({ total: 1, passed: ["tests/test_math.py::test_add"], failed: [] });
    expect(graded.details.passToPass.passed).toHaveLength(3);
  });

  it("does not resolve when one FAIL_TO_PASS test failed", () => {
    const graded = gradeTests({
      statuses,
      failToPass: ["tests/test_math.py::test_add", "tests/test_math.py::test_div"],
      passToPass: ["tests/test_math.py::test_sub"],
    });
    expect(graded.resolved).toBe(false);
    expect(graded.details.failToPass.failed).toEqual([{ test: "tests/test_math.py::test_div", status: "FAILED" }]);
  });

  it("does not resolve when a PASS_TO_PASS test broke", () => {
    const graded = gradeTests({ statuses, failToPass: ["tests/test_math.py::test_add"], passToPass: ["tests/test_io.py::test_read"] });
    expect(graded.resolved).toBe(false);
    expect(graded.details.passToPass.failed).toEqual([{ test: "tests/test_io.py::test_read", status: "ERROR" }]);
  });

  it("counts a listed test missing from the log as failed", () => {
    const graded = gradeTests({ statuses, failToPass: ["tests/test_math.py::test_gone"], passToPass: [] });
    expect(graded.resolved).toBe(false);
    expect(graded.details.failToPass.failed).toEqual([{ test: "tests/test_math.py::test_gone", status: "missing" }]);
  });

  it("counts XPASS as not passed", () => {
    expect(gradeTests({ statuses, failToPass: ["tests/test_math.py::test_lucky"], passToPass: [] }).resolved).toBe(false);
  });

  it("refuses to grade with no tests listed", () => {
    expect(() => gradeTests({ statuses, failToPass: [], passToPass: [] })).toThrow(NoTestsToGradeError);
  });
});
