import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, test } from "vitest";
import { parseCargoTest, parseDjango, parseGoTest, parseJest, parseMocha, parsePytest, parseSympy, parseUnittest } from "./parsers";

const sample = (name: string) => readFileSync(join(import.meta.dirname, "sample-logs", name), "utf8");

describe("SWE-bench log parsers (against real logs in sample-logs/)", () => {
  test("pytest -rA: statuses, parametrized ids with spaces, ' - ' and brackets, class methods", () => {
    expect(parsePytest(sample("pytest-rA.log"))).toEqual({
      "tests/test_sample.py::test_ok": "PASSED",
      "tests/test_sample.py::test_param[a b]": "PASSED",
      "tests/test_sample.py::test_param[x - y]": "PASSED",
      "tests/test_sample.py::test_param[[nested]]": "PASSED",
      "tests/test_sample.py::TestGroup::test_method": "PASSED",
      "tests/test_sample.py::test_xfail": "XFAIL",
      "tests/test_sample.py::test_error": "ERROR",
      // The test printed "PASSED tests/test_sample.py::test_fail" into its captured output.
      "tests/test_sample.py::test_fail": "FAILED",
      "tests/test_sample.py::test_param[plain]": "FAILED",
    });
  });

  test("pytest -rA: lines after pytest's final line are not pytest's (an atexit hook of the code under test)", () => {
    const log = `${sample("pytest-rA.log")}PASSED tests/test_sample.py::test_fail\nPASSED tests/test_sample.py::test_error\n`;
    expect(parsePytest(log)).toMatchObject({ "tests/test_sample.py::test_fail": "FAILED", "tests/test_sample.py::test_error": "ERROR" });
  });

  test("pytest: verbose lines when there is no summary, colours stripped", () => {
    const log = "\x1b[32mtests/a.py::test_x PASSED\x1b[0m [ 50%]\ntests/a.py::test_y[1 2] FAILED [100%]\n";
    expect(parsePytest(log)).toEqual({ "tests/a.py::test_x": "PASSED", "tests/a.py::test_y[1 2]": "FAILED" });
  });

  test("unittest -v: Python 3.11 names shortened to SWE-bench's, docstrings on the next line", () => {
    expect(parseUnittest(sample("unittest-v.log"))).toEqual({
      "test_add (tests.test_units.TestMath)": "PASSED",
      "test_boom (tests.test_units.TestMath)": "ERROR",
      "test_skip (tests.test_units.TestMath)": "SKIPPED",
      "test_sub (tests.test_units.TestMath)": "FAILED",
      "test_xfail (tests.test_units.TestMath)": "XFAIL",
    });
  });

  test("Django runtests.py --verbosity 2: output between '...' and the result, docstrings as ids too, FAIL:/ERROR: headers", () => {
    expect(parseDjango(sample("django-runtests.log"))).toEqual({
      "test_changelist_view (admin_views.tests.AdminViewBasicTest)": "PASSED",
      // "Internal Server Error: ..." and a traceback came before its "ok".
      "test_add_view (admin_views.tests.AdminViewBasicTest)": "PASSED",
      "test_delete_view (admin_views.tests.AdminViewBasicTest)": "FAILED",
      "Deleting a section asks for confirmation first.": "FAILED",
      "test_history_view (admin_views.tests.AdminViewBasicTest)": "ERROR",
      "test_gis_widget (forms_tests.tests.test_widgets.WidgetTests)": "SKIPPED",
      "test_boundfield_label (forms_tests.tests.test_forms.FormsTestCase)": "PASSED",
      "test_known_bug (forms_tests.tests.test_forms.FormsTestCase)": "XFAIL",
      "test_fixed_bug (forms_tests.tests.test_forms.FormsTestCase)": "FAILED",
      "test_clean_whitespace (forms_tests.tests.test_forms.FormsTestCase)": "PASSED",
      "Leading and trailing whitespace is stripped": "PASSED",
    });
  });

  test("Django: a FAIL: header wins over a pass line, and migration lines ('...  OK') are not tests", () => {
    const log = "  Applying admin.0001_initial... OK\ntest_a (m.T) ... ok\n\n=====\nFAIL: test_a (m.T.test_a)\n-----\n";
    expect(parseDjango(log)).toEqual({ "test_a (m.T)": "FAILED" });
  });

  test("sympy bin/test --verbose: ok/F/E/f/skips, [OK]/[FAIL] on the line, failure headers", () => {
    expect(parseSympy(sample("sympy-bin-test.log"))).toEqual({
      test_issue_3538: "PASSED",
      test_sympify1: "PASSED",
      test_sympify_keywords: "FAILED",
      test_evaluate_false: "ERROR",
      test_numpy_conversion: "SKIPPED",
      test_issue_16772: "XFAIL",
      test_latex_basic: "PASSED",
      test_latex_builtins: "PASSED",
      test_latex_slow: "SKIPPED",
    });
    // Only a failure header: the test failed without a verbose line (a crash mid-file).
    expect(parseSympy("__________ sympy/a/tests/test_x.py:test_crash __________\n")).toEqual({ test_crash: "FAILED" });
  });

  test("jest --verbose: nested describes, durations stripped, skipped/todo, failure details not read", () => {
    expect(parseJest(sample("jest-verbose.log"))).toEqual({
      "adds 1 + 2 to equal 3": "PASSED",
      "sum › adds 1 + 2 to equal 3": "PASSED",
      "adds with spaces (a + b)": "PASSED",
      "sum › adds with spaces (a + b)": "PASSED",
      "handles bigints": "SKIPPED",
      "sum › handles bigints": "SKIPPED",
      "handles floats": "SKIPPED",
      "sum › handles floats": "SKIPPED",
      "formats dollars": "PASSED",
      "format › currency › formats dollars": "PASSED",
      "formats euros": "FAILED",
      "format › currency › formats euros": "FAILED",
      "pads to width": "FAILED",
      "format › pads to width": "FAILED",
      "top-level test": "PASSED",
    });
  });

  test("jest: a bare title two tests share keeps the failure", () => {
    const log = " FAIL  a.test.js\n  a\n    ✕ works (1 ms)\n  b\n    ✓ works (1 ms)\n";
    expect(parseJest(log)).toEqual({ works: "FAILED", "a › works": "FAILED", "b › works": "PASSED" });
  });

  test("mocha spec reporter: ✔ / N) / - under nested describes; the failure details are not read", () => {
    expect(parseMocha(sample("mocha-spec.log"))).toEqual({
      "should return -1 when the value is not present": "PASSED",
      "Array #indexOf() should return -1 when the value is not present": "PASSED",
      "should find the first match": "PASSED",
      "Array #indexOf() should find the first match": "PASSED",
      "should handle NaN": "FAILED",
      "Array #indexOf() should handle NaN": "FAILED",
      "should treat -0 like 0": "SKIPPED",
      "Array #includes() should treat -0 like 0": "SKIPPED",
      "reads numbers": "PASSED",
      "parse reads numbers": "PASSED",
      'reads "quoted strings" with spaces': "FAILED",
      'parse reads "quoted strings" with spaces': "FAILED",
    });
  });

  test("go test -v with subtests", () => {
    expect(parseGoTest(sample("go-test-v.log"))).toEqual({
      TestParse: "PASSED",
      TestTable: "FAILED",
      "TestTable/empty_input": "PASSED",
      "TestTable/with_spaces": "FAILED",
      TestLater: "SKIPPED",
    });
  });

  test("cargo test", () => {
    expect(parseCargoTest(sample("cargo-test.log"))).toEqual({
      "tests::adds": "PASSED",
      "tests::subtracts": "FAILED",
      "tests::slow": "SKIPPED",
      "parser::tests::handles_empty": "PASSED",
    });
  });
});
