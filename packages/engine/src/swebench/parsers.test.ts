import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, test } from "vitest";
import { parseCargoTest, parseGoTest, parsePytest, parseUnittest } from "./parsers";

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
