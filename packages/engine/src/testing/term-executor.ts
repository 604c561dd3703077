/**
 * A term-executor archive laid out the way term-executor's own loader reads it (src/task/mod.rs):
 * `tasks/<id>/workspace.yaml` + `prompt.md` + `tests/` (files written into the repo root at
 * their path relative to tests/, `*.sh` among them run as `bash <repo>/<name>.sh` from the repo
 * root) or `checks.txt`, or `fail_to_pass` / `pass_to_pass`; `agent_code/` beside `tasks/`.
 * Built at test time over a local git repository whose calculator subtracts instead of adding.
 * Used by the engine's tests only (not exported from the package).
 */
import { execFileSync } from "node:child_process";
import { chmod, mkdir, writeFile } from "node:fs/promises";
import { dirname, join } from "node:path";

async function put(path: string, content: string, executable = false): Promise<void> {
  await mkdir(dirname(path), { recursive: true });
  await writeFile(path, content);
  if (executable) await chmod(path, 0o755);
}

/** workspace.yaml with every scalar JSON-quoted (valid YAML, no escaping surprises). */
function workspaceYaml(fields: Record<string, string | string[] | Record<string, string>>): string {
  const lines: string[] = [];
  for (const [key, value] of Object.entries(fields)) {
    if (typeof value === "string") lines.push(`${key}: ${JSON.stringify(value)}`);
    else if (Array.isArray(value)) lines.push(`${key}:`, ...value.map((v) => `  - ${JSON.stringify(v)}`));
    else lines.push(`${key}:`, ...Object.entries(value).map(([k, v]) => `  ${k}: ${JSON.stringify(v)}`));
  }
  return `${lines.join("\n")}\n`;
}

/** What the install commands leave behind; the agents below refuse to work without it. */
const INSTALL = "mkdir -p .deps && echo ready > .deps/installed";

/** Fixes the calculator, but only when the install commands ran before it. */
export const CORRECT_AGENT = `#!/bin/bash
cd "$PROCTOR_WORKDIR"
if [ ! -f .deps/installed ]; then echo "install did not run before the agent" >&2; exit 1; fi
sed -i 's/\\$1 - \\$2/$1 + $2/' src/calc.sh
# One character, in place: the same size as before, within the second the install compiled it.
sed -i 's/a - b/a + b/' calc.py
`;

/**
 * Leaves the bug, and instead plants passing versions of the checks at the paths the test files
 * will be written to (and a symlink where a test directory goes): none of it may survive.
 */
export const PLANTING_AGENT = `#!/bin/bash
cd "$PROCTOR_WORKDIR"
printf '#!/bin/bash\\nexit 0\\n' > run_tests.sh
mkdir -p tests && echo -1 > tests/expected_sum.txt
ln -s /tmp checks
echo planted
`;

export interface TermExecutorFixture {
  /** The archive's root: holds tasks/ and agent_code/. */
  root: string;
  /** The git repository the tasks check out (a local path). */
  repo: string;
  commit: string;
}

/**
 * Writes the archive under `dir` (and its repository beside it). Tasks:
 * - `repo-relative`: tests/ holds run_tests.sh (refuses to run anywhere but the repo root),
 *   checks/structure.sh (a script in a subdirectory) and tests/expected_sum.txt, a data file
 *   the scripts read at its repo-relative path;
 * - `from-checks`: checks.txt, one check per line;
 * - `from-f2p`: workspace.yaml fail_to_pass / pass_to_pass, install from install_config;
 * - `install-fails`: an install command that exits 7;
 * - `py-same-size`: a Python module whose fix keeps its size, compiled to bytecode by the install.
 * Every task's workspace.yaml carries the fixing patch, so the oracle solves it.
 */
export async function writeTermExecutorArchive(dir: string, agentScript = CORRECT_AGENT): Promise<TermExecutorFixture> {
  const repo = join(dir, "origin");
  await put(join(repo, "src", "calc.sh"), '#!/bin/bash\n# add two numbers\necho $(( $1 - $2 ))\n');
  await put(join(repo, "README.md"), "calculator\n");
  await put(join(repo, "calc.py"), "def add(a, b):\n    return a - b\n");
  const git = (...args: string[]) => execFileSync("git", ["-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main", ...args], { cwd: repo, encoding: "utf8" });
  git("init", "-q");
  git("add", ".");
  git("commit", "-qm", "calculator");
  const commit = git("rev-parse", "HEAD").trim();
  await put(join(repo, "src", "calc.sh"), '#!/bin/bash\n# add two numbers\necho $(( $1 + $2 ))\n');
  await put(join(repo, "calc.py"), "def add(a, b):\n    return a + b\n");
  const patch = git("diff");
  git("checkout", "-q", "--", ".");

  const root = join(dir, "archive");
  const base = { repo, base_commit: commit, version: "1.0", language: "shell", patch };
  const task = (id: string) => join(root, "tasks", id);

  await put(join(task("repo-relative"), "workspace.yaml"), workspaceYaml({ ...base, install: [INSTALL] }));
  await put(join(task("repo-relative"), "prompt.md"), "src/calc.sh subtracts; make it add.\n");
  await put(
    join(task("repo-relative"), "tests", "run_tests.sh"),
    [
      "#!/bin/bash",
      "set -e",
      "# term-executor writes this script into the repo root and runs it from there",
      '[ "$(dirname "$0")" -ef "$PWD" ] || { echo "not run from the repo root: $0 in $PWD"; exit 9; }',
      "expected=$(cat tests/expected_sum.txt)",
      "got=$(bash src/calc.sh 2 3)",
      'echo "2 + 3 = $got (expected $expected)"',
      '[ "$got" = "$expected" ]',
      "",
    ].join("\n"),
    true,
  );
  await put(join(task("repo-relative"), "tests", "checks", "structure.sh"), "#!/bin/bash\ntest -f src/calc.sh && test -f tests/expected_sum.txt && test -f run_tests.sh\n");
  await put(join(task("repo-relative"), "tests", "tests", "expected_sum.txt"), "5\n");

  await put(join(task("from-checks"), "workspace.yaml"), workspaceYaml({ ...base, install: [INSTALL] }));
  await put(join(task("from-checks"), "prompt.md"), "src/calc.sh subtracts; make it add.\n");
  await put(join(task("from-checks"), "checks.txt"), '# one check per line\ntest "$(bash src/calc.sh 1 1)" = 2\n\ntest -f README.md\n');

  await put(
    join(task("from-f2p"), "workspace.yaml"),
    workspaceYaml({ ...base, install_config: { install: INSTALL }, fail_to_pass: ['test "$(bash src/calc.sh 4 4)" = 8'], pass_to_pass: ["grep -q calculator README.md"] }),
  );
  await put(join(task("from-f2p"), "prompt.md"), "src/calc.sh subtracts; make it add.\n");

  await put(join(task("install-fails"), "workspace.yaml"), workspaceYaml({ ...base, install: ["echo cannot install the toolchain >&2; exit 7"] }));
  await put(join(task("install-fails"), "prompt.md"), "src/calc.sh subtracts; make it add.\n");
  await put(join(task("install-fails"), "checks.txt"), 'test "$(bash src/calc.sh 1 1)" = 2\n');

  // Python bytecode built by the install (as `pip install -e .` or a first import leaves it): the
  // one-character fix keeps calc.py's size, so only its content tells it apart.
  await put(join(task("py-same-size"), "workspace.yaml"), workspaceYaml({ ...base, install: [INSTALL, "python3 -m compileall -q calc.py"] }));
  await put(join(task("py-same-size"), "prompt.md"), "calc.py subtracts; make it add.\n");
  await put(join(task("py-same-size"), "checks.txt"), 'python3 -c "import calc; assert calc.add(2, 3) == 5, calc.add(2, 3)"\n');

  await put(join(root, "agent_code", "run.sh"), agentScript, true);
  return { root, repo, commit };
}
