import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import { describe, expect, test } from "vitest";
import { must, tempDir } from "../test/fixtures";
import { SwebenchGrading } from "./swebench";
import { deriveTestSpec, testDirectives } from "./swebench-specs";
import { loadTasks } from "./sources";

/** A test patch as SWE-bench rows hold them: git diffs, a data file among the tests. */
const DJANGO_TEST_PATCH = [
  "diff --git a/tests/queries/tests.py b/tests/queries/tests.py",
  "--- a/tests/queries/tests.py",
  "+++ b/tests/queries/tests.py",
  "@@ -1 +1,2 @@",
  " x",
  "+y",
  "diff --git a/tests/migrations/test_operations.py b/tests/migrations/test_operations.py",
  "--- a/tests/migrations/test_operations.py",
  "+++ b/tests/migrations/test_operations.py",
  "@@ -1 +1,2 @@",
  " x",
  "+y",
  "diff --git a/tests/fixtures/data.json b/tests/fixtures/data.json",
  "new file mode 100644",
  "--- /dev/null",
  "+++ b/tests/fixtures/data.json",
  "@@ -0,0 +1 @@",
  "+{}",
  "",
].join("\n");

const lastLine = (command: string) => command.split("\n").at(-1);

describe("SWE-bench test specs (the harness's per-repo, per-version table)", () => {
  test("django: runtests.py with module-style directives; data files left out; locale set-up by version", () => {
    const spec = must(deriveTestSpec("django/django", "3.0", DJANGO_TEST_PATCH));
    expect(spec.parser).toBe("django");
    expect(spec.source).toBe("django/django 3.0");
    expect(lastLine(spec.command)).toBe("./tests/runtests.py --verbosity 2 --settings=test_sqlite --parallel 1 queries.tests migrations.test_operations");
    expect(spec.command).toContain("locale-gen");
    expect(spec.command.split("\n")[0]).toContain("conda activate testbed");
    // 1.9 has no --parallel; 4.0 needs no locale step.
    expect(lastLine(must(deriveTestSpec("django/django", "1.9", DJANGO_TEST_PATCH)).command)).toBe("./tests/runtests.py --verbosity 2 queries.tests migrations.test_operations");
    expect(must(deriveTestSpec("django/django", "4.0", DJANGO_TEST_PATCH)).command).not.toContain("LANG=");
  });

  test("sympy: bin/test -C --verbose on the test files; pytest repos: pytest -rA on them", () => {
    const patch = "diff --git a/sympy/core/tests/test_basic.py b/sympy/core/tests/test_basic.py\n--- a/x\n+++ b/x\n";
    const sympy = must(deriveTestSpec("sympy/sympy", "1.12", patch));
    expect(sympy.parser).toBe("sympy");
    expect(lastLine(sympy.command)).toBe("PYTHONWARNINGS='ignore::UserWarning,ignore::SyntaxWarning' bin/test -C --verbose sympy/core/tests/test_basic.py");
    const requests = must(deriveTestSpec("psf/requests", "2.0", "diff --git a/test_requests.py b/test_requests.py\n"));
    expect(requests).toMatchObject({ parser: "pytest", source: "psf/requests" });
    expect(lastLine(requests.command)).toBe("pytest -rA --tb=no -p no:cacheprovider test_requests.py");
    expect(lastLine(must(deriveTestSpec("astropy/astropy", "1.3", patch)).command)).toMatch(/^pytest -rA -vv -o console_output_style=classic --tb=no /);
    expect(deriveTestSpec("acme/calc", "1.0", patch)).toBeNull();
  });

  test("directives: the new name of every file the patch leaves, quoted for the shell when needed", () => {
    expect(testDirectives("diff --git a/tests/a b.py b/tests/a b.py\ndiff --git a/README.md b/README.md\n", "paths")).toEqual(["tests/a b.py"]);
    const spec = must(deriveTestSpec("pallets/flask", "2.0", "diff --git a/tests/a b.py b/tests/a b.py\n"));
    expect(lastLine(spec.command)).toBe("pytest -rA --tb=no -p no:cacheprovider 'tests/a b.py'");
  });

  test("loaded rows: official rows get the derived command; a row's test_cmd or log_parser wins", async () => {
    const dir = await tempDir();
    const base = { base_commit: "a".repeat(40), patch: "", test_patch: DJANGO_TEST_PATCH, FAIL_TO_PASS: '["test_a (queries.tests.T)"]', PASS_TO_PASS: "[]", problem_statement: "p", environment_setup_commit: "b".repeat(40) };
    const rows = [
      { ...base, instance_id: "django__django-1", repo: "django/django", version: "3.0" },
      { ...base, instance_id: "django__django-2", repo: "django/django", version: "3.0", test_cmd: "python -m pytest tests" },
      { ...base, instance_id: "django__django-3", repo: "django/django", version: "3.0", log_parser: "unittest" },
      { ...base, instance_id: "acme__calc-1", repo: "acme/calc", version: "1.0" },
    ];
    const file = join(dir, "rows.jsonl");
    await writeFile(file, `${rows.map((r) => JSON.stringify(r)).join("\n")}\n`);
    const { tasks, errors } = await loadTasks([file], { cacheDir: join(dir, "cache") });
    expect(errors.map((e) => e.message)).toEqual([]);
    const grading = (id: string) => SwebenchGrading.parse(must(tasks.find((t) => t.id === id)).extra.swebench);
    expect(grading("django__django-1")).toMatchObject({ logParser: "django", testSpec: "django/django 3.0" });
    expect(lastLine(grading("django__django-1").testCmd ?? "")).toBe("./tests/runtests.py --verbosity 2 --settings=test_sqlite --parallel 1 queries.tests migrations.test_operations");
    expect(grading("django__django-2")).toMatchObject({ testCmd: "python -m pytest tests", logParser: "pytest" });
    expect(grading("django__django-2").testSpec).toBeUndefined();
    expect(grading("django__django-3")).toMatchObject({ logParser: "unittest", testSpec: "django/django 3.0" });
    expect(grading("acme__calc-1")).toMatchObject({ testCmd: null, logParser: "pytest" });
  });
});
