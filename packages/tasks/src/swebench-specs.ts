import type { SwebenchLogParser } from "./swebench";

/**
 * How SWE-bench's evaluation harness runs each repository's tests, per version where it differs:
 * the runner, the log parser that reads it, how the files of a test patch become the runner's
 * arguments, and the commands run just before the tests. Rows of the official datasets carry no
 * test command; Proctor derives it from this table (a row's own `test_cmd` / `log_parser` win).
 * Environment set-up (Python version, packages, pre-install and install steps) is the image's
 * job: SWE-bench's prebuilt images have it, and `--env-setup` supplies it for other images.
 */
interface RepoSpec {
  /** The runner; the test directives follow it. */
  command: string;
  parser: SwebenchLogParser;
  /** `paths`: the test patch's files as they are; `django-modules`: `tests/a/b.py` becomes `a.b`. */
  directives: "paths" | "django-modules";
  /** Shell commands run before the runner (locale, say), in the test command's shell. */
  before?: readonly string[];
  /** Versions whose runner or preceding commands differ from the repository's default. */
  versions?: Readonly<Record<string, { command?: string; before?: readonly string[] }>>;
}

const PYTEST = "pytest -rA --tb=no -p no:cacheprovider";
const PYTEST_REPO: RepoSpec = { command: PYTEST, parser: "pytest", directives: "paths" };
const DJANGO = "./tests/runtests.py --verbosity 2 --settings=test_sqlite --parallel 1";

/** Django 1.7 to 2.2 images generate en_US.UTF-8 at build time; the tests need it selected. */
const DJANGO_UTF8 = ["export LANG=en_US.UTF-8", "export LC_ALL=en_US.UTF-8", "export PYTHONIOENCODING=utf8", "export LANGUAGE=en_US:en"];
/** Django 3.0 to 3.2 generate the locale when the tests run. */
const DJANGO_LOCALE_GEN = ["sed -i '/en_US.UTF-8/s/^# //g' /etc/locale.gen && locale-gen", "export LANG=en_US.UTF-8", "export LANGUAGE=en_US:en", "export LC_ALL=en_US.UTF-8"];

const each = (versions: readonly string[], spec: { command?: string; before?: readonly string[] }) => Object.fromEntries(versions.map((v) => [v, spec]));

const SPECS: Readonly<Record<string, RepoSpec>> = {
  "django/django": {
    command: DJANGO,
    parser: "django",
    directives: "django-modules",
    versions: {
      ...each(["1.7", "1.8", "1.10", "1.11", "2.0", "2.1", "2.2"], { before: DJANGO_UTF8 }),
      // 1.9's runner has no --parallel (and its settings module is the default one).
      "1.9": { command: "./tests/runtests.py --verbosity 2", before: DJANGO_UTF8 },
      ...each(["3.0", "3.1", "3.2"], { before: DJANGO_LOCALE_GEN }),
    },
  },
  "sympy/sympy": { command: "PYTHONWARNINGS='ignore::UserWarning,ignore::SyntaxWarning' bin/test -C --verbose", parser: "sympy", directives: "paths" },
  "astropy/astropy": {
    ...PYTEST_REPO,
    // The oldest releases' pytest prints results in the classic style.
    versions: each(["0.1", "0.2", "0.3", "0.4", "1.1", "1.2", "1.3"], { command: "pytest -rA -vv -o console_output_style=classic --tb=no" }),
  },
  "mwaskom/seaborn": { command: "pytest --no-header -rA", parser: "pytest", directives: "paths" },
  // tox runs pytest (-rA is added to the image's tox.ini when it is built).
  "sphinx-doc/sphinx": { command: "tox --current-env -epy39 -v --", parser: "pytest", directives: "paths" },
  ...Object.fromEntries(
    [
      "matplotlib/matplotlib", "scikit-learn/scikit-learn", "pallets/flask", "psf/requests", "pytest-dev/pytest", "pylint-dev/pylint", "pydata/xarray",
      "sqlfluff/sqlfluff", "pyvista/pyvista", "pylint-dev/astroid", "marshmallow-code/marshmallow", "pvlib/pvlib-python", "pydicom/pydicom",
    ].map((repo) => [repo, PYTEST_REPO]),
  ),
};

/** Files a test patch touches that are data, not tests: never passed to the runner (as the harness does). */
const NON_TEST_SUFFIXES = [".json", ".png", "csv", ".txt", ".md", ".jpg", ".jpeg", ".pkl", ".yml", ".yaml", ".toml"];

/**
 * Inside SWE-bench images the tests run in the conda env `testbed`; elsewhere this does nothing.
 * The test command runs without a login shell or rc files, so nothing else activates it.
 */
const ACTIVATE = "if [ -f /opt/miniconda3/bin/activate ]; then . /opt/miniconda3/bin/activate && conda activate testbed; fi";

function shellWord(s: string): string {
  return /^[A-Za-z0-9_./:=@+-]+$/.test(s) ? s : `'${s.replace(/'/g, `'\\''`)}'`;
}

/** The runner's arguments for a test patch: each file it leaves (`diff --git a/x b/<file>`), data files left out. */
export function testDirectives(testPatch: string, style: RepoSpec["directives"]): string[] {
  const files = [...testPatch.matchAll(/^diff --git a\/.* b\/(.*)$/gm)].map((m) => m[1] as string).filter((f) => !NON_TEST_SUFFIXES.some((ext) => f.endsWith(ext)));
  if (style === "paths") return files;
  return files.map((f) => (f.endsWith(".py") ? f.slice(0, -3) : f).replace(/^tests\//, "").replaceAll("/", "."));
}

/** What the table says for one row: its test command (activation, preceding commands, runner, directives) and parser. */
export interface DerivedTestSpec {
  command: string;
  parser: SwebenchLogParser;
  /** Which entry it came from: "django/django 3.0" (a version of its own), or the repository's default ("psf/requests"). */
  source: string;
}

/** The test command SWE-bench's harness would run for `repo` at `version` with this test patch; null for a repository the table lacks. */
export function deriveTestSpec(repo: string, version: string | null, testPatch: string): DerivedTestSpec | null {
  const spec = SPECS[repo];
  if (!spec) return null;
  const atVersion = version !== null ? spec.versions?.[version] : undefined;
  const runner = [atVersion?.command ?? spec.command, ...testDirectives(testPatch, spec.directives).map(shellWord)].join(" ");
  const command = [ACTIVATE, ...(atVersion?.before ?? spec.before ?? []), runner].join("\n");
  return { command, parser: spec.parser, source: atVersion ? `${repo} ${version}` : repo };
}

/** The repositories the table knows. */
export const SWEBENCH_SPEC_REPOS: readonly string[] = Object.keys(SPECS).sort();
