/**
 * The SWE-bench test fixture (`@proctor/engine/testing`): a small Python project with two bugs
 * and a pytest suite as a real bare git mirror under `<root>/mirrors` (a --repos-dir), and
 * SWE-bench rows on it. For tests that need a real repository and real pytest; shared by the
 * engine's slot tests and the CLI's SWE-bench tests so both exercise the same project.
 */
import { execFileSync } from "node:child_process";
import { mkdir, writeFile } from "node:fs/promises";
import { dirname, join } from "node:path";

/** calc/ops.py at base_commit: mul adds and neg returns its argument. */
export const CALC_OPS = "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a + b  # bug\n\n\ndef neg(a):\n    return a  # bug\n";
const TESTS = "from calc.ops import add, mul, neg\n\n\ndef test_add():\n    assert add(2, 3) == 5\n";

const git = (cwd: string, ...args: string[]) =>
  execFileSync("git", ["-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main", ...args], { cwd, encoding: "utf8" });

/** The diff of one edit to a file, with the tree put back after. */
function diffOf(repo: string, path: string, content: string): string {
  execFileSync("sh", ["-c", 'printf "%s" "$1" > "$2"', "sh", content, join(repo, path)]);
  const diff = git(repo, "diff");
  git(repo, "checkout", "--", ".");
  return diff;
}

/** One SWE-bench row on base_commit; the other fields get fixed test values. */
export interface SweCalcRow {
  id: string;
  /** The gold patch ("" for none). */
  patch: string;
  testPatch: string;
  failToPass: string[];
  passToPass: string[];
  problem?: string;
}

export interface SweCalcFixture {
  /** The --repos-dir: holds the bare mirror acme__calc.git (repo "acme/calc"). */
  mirrors: string;
  /** The buggy commit every row starts from. */
  base: string;
  /** A later commit on main that fixes mul: the future no checkout of `base` may hold. */
  future: string;
  /** Gold patches (fix*) and test patches (test*, each adding one failing test) on `base`. */
  patches: { fixMul: string; fixNeg: string; testMul: string; testNeg: string };
  /** Write `rows` as a JSONL dataset at `<root>/<name>`; returns its path. */
  writeDataset(rows: SweCalcRow[], name?: string): Promise<string>;
}

/** Build the project's history in `<root>/work` and its bare mirror in `<root>/mirrors`. */
export async function buildSweCalc(root: string): Promise<SweCalcFixture> {
  const work = join(root, "work");
  const files: Record<string, string> = { "calc/__init__.py": "", "calc/ops.py": CALC_OPS, "tests/__init__.py": "", "tests/test_ops.py": TESTS };
  for (const [path, content] of Object.entries(files)) {
    await mkdir(dirname(join(work, path)), { recursive: true });
    await writeFile(join(work, path), content);
  }
  git(work, "init", "--quiet");
  git(work, "add", "-A");
  git(work, "commit", "--quiet", "-m", "calc with bugs");
  const base = git(work, "rev-parse", "HEAD").trim();
  const patches = {
    fixMul: diffOf(work, "calc/ops.py", CALC_OPS.replace("return a + b  # bug", "return a * b")),
    fixNeg: diffOf(work, "calc/ops.py", CALC_OPS.replace("return a  # bug", "return -a")),
    testMul: diffOf(work, "tests/test_ops.py", `${TESTS}\n\ndef test_mul():\n    assert mul(3, 4) == 12\n`),
    testNeg: diffOf(work, "tests/test_ops.py", `${TESTS}\n\ndef test_neg():\n    assert neg(2) == -2\n`),
  };
  await writeFile(join(work, "calc", "ops.py"), CALC_OPS.replace("return a + b  # bug", "return a * b"));
  git(work, "commit", "--quiet", "-am", "the fix (the future of every instance)");
  const future = git(work, "rev-parse", "HEAD").trim();
  const mirrors = join(root, "mirrors");
  await mkdir(mirrors, { recursive: true });
  execFileSync("git", ["clone", "--quiet", "--bare", work, join(mirrors, "acme__calc.git")]);
  const writeDataset = async (rows: SweCalcRow[], name = "instances.jsonl") => {
    const lines = rows.map((r) =>
      JSON.stringify({
        instance_id: r.id,
        repo: "acme/calc",
        base_commit: base,
        patch: r.patch,
        test_patch: r.testPatch,
        FAIL_TO_PASS: r.failToPass,
        PASS_TO_PASS: r.passToPass,
        problem_statement: r.problem ?? `fix ${r.id}`,
        version: "1.0",
      }),
    );
    const path = join(root, name);
    await writeFile(path, `${lines.join("\n")}\n`);
    return path;
  };
  return { mirrors, base, future, patches, writeDataset };
}
