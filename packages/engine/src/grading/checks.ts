import { lstat, readdir, readFile } from "node:fs/promises";
import { join, posix } from "node:path";
import type { CheckResult, VerifierSpec } from "@proctor/schema";
import { CHECK_OUTPUT_BYTES, HOUSEKEEPING_MS, tail, throwIfAborted, type SandboxAttempt } from "../trial/context";
import { HARDENED_ENV, verifierEnv } from "./hardened";
import { outputOf } from "./launcher";
import { adminOptions, trusted } from "./sandbox-tools";

type ChecksVerifier = Extract<VerifierSpec, { mode: "checks" }>;

/** One file of a task's tests/ directory, relative to it (`/`-separated). */
interface TestFile {
  rel: string;
  abs: string;
  mode: number;
}

/** Regular files under `dir` (symlinks, sockets and devices are skipped: never followed on the host). */
async function listTestFiles(dir: string): Promise<TestFile[]> {
  const out: TestFile[] = [];
  async function walk(abs: string, rel: string): Promise<void> {
    for (const entry of await readdir(abs, { withFileTypes: true })) {
      const childAbs = join(abs, entry.name);
      const childRel = rel === "" ? entry.name : `${rel}/${entry.name}`;
      if (entry.isDirectory()) await walk(childAbs, childRel);
      else if (entry.isFile()) out.push({ rel: childRel, abs: childAbs, mode: ((await lstat(childAbs)).mode & 0o111) !== 0 ? 0o755 : 0o644 });
    }
  }
  await walk(dir, "");
  return out.sort((a, b) => (a.rel < b.rel ? -1 : a.rel > b.rel ? 1 : 0));
}

/**
 * Clears the way for the test files in the repo root: every ancestor directory of a test file
 * that the agent turned into a symlink or a file is removed, and so is whatever sits at a test
 * file's own path (a planted file, link or directory). Run by the trusted shell as admin.
 */
const CLEAR_SCRIPT = `w="$PROCTOR_WORKDIR"
mkdir -p "$w" && cd "$w" || exit 1
for a in "$@"; do
  p="\${a#?:}"
  case "$a" in
    d:*) if [ -L "$p" ] || { [ -e "$p" ] && [ ! -d "$p" ]; }; then rm -rf -- "$p" || exit 1; fi ;;
    f:*) rm -rf -- "$p" || exit 1 ;;
  esac
done`;

/**
 * term-executor semantics: every file under the task's tests/ is written into the repo root
 * (the workdir) at its path relative to tests/, after the agent has finished, overwriting
 * whatever the agent put there. Returns false (with a verifier error recorded) when that failed.
 */
async function placeTestFiles(attempt: SandboxAttempt, testsDir: string): Promise<boolean> {
  const { sandbox, signal, state } = attempt;
  const files = await listTestFiles(testsDir);
  const dirs = new Set<string>();
  for (const file of files) {
    const parts = file.rel.split("/");
    for (let i = 1; i < parts.length; i++) dirs.add(parts.slice(0, i).join("/"));
  }
  const args = [...[...dirs].sort((a, b) => a.split("/").length - b.split("/").length).map((d) => `d:${d}`), ...files.map((f) => `f:${f.rel}`)];
  const cleared = await sandbox.exec(trusted(sandbox, CLEAR_SCRIPT, args), { ...adminOptions(sandbox), cwd: "/", timeoutMs: HOUSEKEEPING_MS, signal });
  throwIfAborted(signal);
  if (cleared.exitCode !== 0) {
    state.errors.push({ kind: "verifier", message: `could not clear the test files' paths in the repo root (exit ${cleared.exitCode}): ${tail(cleared.stderr || cleared.stdout)}` });
    return false;
  }
  const root = sandbox.workdir.replace(/\/+$/, "") || "/";
  for (const file of files) {
    await sandbox.writeFile(posix.join(root, file.rel), await readFile(file.abs), { mode: file.mode });
    throwIfAborted(signal);
  }
  return true;
}

/**
 * The checks verifier (term-executor tasks): the tests/ files go into the repo root, then every
 * check runs in turn from the repo root with bash (no profile, no rc files), each under its own
 * timeout. Reward 1 iff every check exits 0; the per-check results go to `state.checks`.
 */
export async function runChecks(attempt: SandboxAttempt, verifier: ChecksVerifier): Promise<void> {
  const { sandbox, signal, state, env } = attempt;
  if (verifier.testsDir && !(await placeTestFiles(attempt, verifier.testsDir))) return;
  const checks: CheckResult[] = [];
  for (const check of verifier.checks) {
    const started = performance.now();
    const result = await sandbox.exec(trusted(sandbox, CHECK_WRAPPER, [check.command]), {
      ...adminOptions(sandbox),
      env: verifierEnv(verifier.env),
      timeoutMs: check.timeoutSec * 1000 * env.timeoutMultiplier,
      signal,
      maxOutputBytes: CHECK_OUTPUT_BYTES,
    });
    throwIfAborted(signal);
    checks.push({
      name: check.name,
      command: check.command,
      passed: !result.timedOut && result.exitCode === 0,
      exitCode: result.timedOut ? null : result.exitCode,
      timedOut: result.timedOut,
      durationMs: Math.round(performance.now() - started),
      output: outputOf(result, CHECK_OUTPUT_BYTES),
    });
  }
  state.checks = checks;
  state.reward = checks.length > 0 && checks.every((c) => c.passed) ? 1 : 0;
}

const CHECK_WRAPPER = `${HARDENED_ENV}
exec bash --noprofile --norc -c "$1"`;
