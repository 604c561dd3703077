import { randomUUID } from "node:crypto";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join, posix } from "node:path";
import { CappedFile, type Sandbox } from "@proctor/sandbox";
import type { TaskSpec, TrialError, TrialResult } from "@proctor/schema";
import { SwebenchGrading } from "@proctor/tasks";
import { repoUrl, type RepoCache } from "../workspace";
import { adminOptions, trusted } from "../grading/sandbox-tools";
import { HARDENED_ENV, verifierEnv } from "../grading/hardened";
import { CHECKOUT_MS, HOUSEKEEPING_MS, VERIFIER_LOG_BYTES, message, tail, throwIfAborted, type SandboxAttempt } from "../trial/context";
import { LOG_PARSERS, testPassed } from "./parsers";
import { applyTestPatch, pytestTargets, TestPatchError, type TestFiles } from "./test-patch";
import { fileAt, PYTEST_CONFIG_FILES, pytestSection } from "./pytest-config";

function shellQuote(s: string): string {
  return `'${s.replace(/'/g, `'\\''`)}'`;
}

/**
 * Removes what the agent may have put in the test files' way: a symlinked workdir is refused,
 * symlinked ancestor directories (top-down, args before `--`) are removed, then every touched path.
 */
const CLEAR_SCRIPT = `w="$1"; shift
[ -L "$w" ] && { echo "$w is a symbolic link" >&2; exit 3; }
cd "$w" || exit 2
while [ "$#" -gt 0 ] && [ "$1" != "--" ]; do [ -L "$1" ] && rm -f "$1"; shift; done
[ "$#" -gt 0 ] && shift
for p in "$@"; do rm -rf "$p"; done
exit 0`;

/** Runs the test command with the image's bash (no profile, no rc files), stdout+stderr between two markers. */
const RUN_SCRIPT = `cd "$1" || exit 2
${HARDENED_ENV}
printf '%s\\n' "$2"
if [ -x /bin/bash ]; then /bin/bash --noprofile --norc -c "$4" 2>&1; else /bin/sh -c "$4" 2>&1; fi
s=$?
printf '\\n%s\\n' "$3"
exit $s`;

function ancestors(paths: readonly string[]): string[] {
  const dirs = new Set<string>();
  for (const p of paths) {
    let d = posix.dirname(p);
    while (d !== "." && d !== "/") {
      dirs.add(d);
      d = posix.dirname(d);
    }
  }
  return [...dirs].sort((a, b) => a.split("/").length - b.split("/").length || a.localeCompare(b));
}

/** Where and how to run a SWE-bench instance's tests (a trial's sandbox, or a slot's workdir). */
export interface SwebenchTestRun {
  task: TaskSpec;
  sandbox: Sandbox;
  /** The repository checkout at base_commit (the sandbox's workdir in a trial). */
  workdir: string;
  repoCache: RepoCache;
  timeoutMs: number;
  signal: AbortSignal;
  /** A host file that gets the test output (capped); none: kept only in memory. */
  logFile?: string;
}

/** The per-test result, or why there is none (`reward` 0 when the agent tampered, else null). */
export type SwebenchOutcome =
  | { ok: true; grading: NonNullable<TrialResult["grading"]>; instanceId: string; output: string }
  | { ok: false; error: TrialError; reward: 0 | null };

/**
 * Runs a SWE-bench instance's tests in `workdir`: the files test_patch touches are computed on the
 * host from base_commit + test_patch and written over whatever is there; the test command (row's
 * test_cmd, else pytest -rA on those files) runs; its log is parsed per test; resolved iff every
 * FAIL_TO_PASS and PASS_TO_PASS test passed.
 */
export async function runSwebenchTests(run: SwebenchTestRun): Promise<SwebenchOutcome> {
  const { task, sandbox, signal, repoCache } = run;
  const parsed = SwebenchGrading.safeParse(task.extra.swebench);
  const ws = task.workspace;
  const fail = (kind: TrialError["kind"], text: string, reward: 0 | null = null): SwebenchOutcome => ({ ok: false, error: { kind, message: text }, reward });
  if (!parsed.success || !ws) return fail("verifier", `task ${task.id} is a swebench task without its grading data (extra.swebench, workspace)`);
  const grading = parsed.data;
  const workdir = run.workdir.replace(/\/+$/, "") || "/";

  let files: TestFiles;
  let bare: string;
  try {
    bare = await repoCache.ensure(repoUrl(ws.repo, task.sourcePath), ws.baseCommit, { timeoutMs: CHECKOUT_MS, signal });
    files = await applyTestPatch(bare, ws.baseCommit, grading.testPatch);
  } catch (error) {
    throwIfAborted(signal);
    return fail("verifier", error instanceof TestPatchError ? error.message : `cannot prepare the test files: ${message(error)}`);
  }

  // Reset: every touched path goes, then the patched files come from the host.
  const cleared = await sandbox.exec(trusted(sandbox, CLEAR_SCRIPT, [workdir, ...ancestors(files.touched), "--", ...files.touched]), { ...adminOptions(sandbox), timeoutMs: HOUSEKEEPING_MS, signal });
  throwIfAborted(signal);
  if (cleared.exitCode === 3) return fail("agent", `tampered: ${workdir} was replaced by a symbolic link`, 0);
  if (cleared.exitCode !== 0) return fail("verifier", `could not reset the test files in ${workdir} (exit ${cleared.exitCode}): ${tail(cleared.stderr)}`);
  const regular = files.files.filter((f) => f.link === null);
  if (regular.length > 0) {
    const staging = await mkdtemp(join(tmpdir(), "proctor-testfiles-"));
    try {
      for (const f of regular) {
        const target = join(staging, f.path);
        await mkdir(dirname(target), { recursive: true });
        await writeFile(target, f.data, { mode: f.mode });
      }
      await sandbox.upload(staging, workdir);
    } finally {
      await rm(staging, { recursive: true, force: true });
    }
  }
  const links = files.files.filter((f) => f.link !== null);
  for (const f of links) {
    await sandbox.exec(trusted(sandbox, 'cd "$1" && mkdir -p "$(dirname "$3")" && ln -sfn "$2" "$3"', [workdir, f.link as string, f.path]), { ...adminOptions(sandbox), timeoutMs: HOUSEKEEPING_MS, signal });
  }

  // pytest's own config at the repo root is part of the test run: its pytest section must be what
  // base_commit (with the test patch) has, or the agent has reconfigured the grading.
  if (grading.logParser === "pytest") {
    for (const { path } of PYTEST_CONFIG_FILES) {
      const fromPatch = files.files.find((f) => f.path === path);
      const expected = fromPatch ? fromPatch.data.toString("utf8") : files.deleted.includes(path) ? null : await fileAt(bare, ws.baseCommit, path);
      const actual = await sandbox.readFile(`${workdir}/${path}`, { maxBytes: 1024 * 1024 }).then(
        (data) => data?.toString("utf8") ?? null,
        () => "<unreadable>",
      );
      throwIfAborted(signal);
      if (pytestSection(path, expected) !== pytestSection(path, actual)) return fail("agent", `tampered: ${workdir}/${path} (its pytest configuration changed)`, 0);
    }
  }

  const targets = pytestTargets(files);
  const command = grading.testCmd ?? `python3 -m pytest -rA -p no:cacheprovider ${targets.map(shellQuote).join(" ")}`;
  const nonce = randomUUID();
  const start = `>>>>> proctor start test output ${nonce}`;
  const end = `>>>>> proctor end test output ${nonce}`;
  const out = run.logFile === undefined ? null : await CappedFile.open(run.logFile, VERIFIER_LOG_BYTES);
  const chunks: Buffer[] = [];
  let kept = 0;
  let cut = false;
  const result = await sandbox
    .exec(trusted(sandbox, RUN_SCRIPT, [workdir, start, end, command]), {
      ...adminOptions(sandbox),
      env: verifierEnv(task.verifier.env),
      timeoutMs: run.timeoutMs,
      signal,
      onStdout: (c) => {
        out?.write(c);
        if (kept + c.length > VERIFIER_LOG_BYTES) cut = true;
        else {
          chunks.push(c);
          kept += c.length;
        }
      },
      onStderr: (c) => out?.write(c),
      maxOutputBytes: 64 * 1024,
    })
    .finally(() => out?.close());
  throwIfAborted(signal);
  if (result.timedOut) return fail("verifier", `the tests timed out after ${Math.round(run.timeoutMs / 1000)} s`);
  const log = Buffer.concat(chunks).toString("utf8");
  const from = log.indexOf(`${start}\n`);
  const to = log.lastIndexOf(`\n${end}\n`);
  if (from < 0 || to < from) {
    return fail("verifier", cut ? `the test output passed ${VERIFIER_LOG_BYTES} bytes and was cut before its end marker` : `the test command's output has no end marker (exit ${result.exitCode}): ${tail(result.stderr || log, 3)}`);
  }
  const output = log.slice(from + start.length + 1, to);
  const tests = LOG_PARSERS[grading.logParser](output);
  const group = (ids: readonly string[]) => ({ success: ids.filter((id) => testPassed(tests[id])), failure: ids.filter((id) => !testPassed(tests[id])) });
  const failToPass = group(grading.failToPass);
  const passToPass = group(grading.passToPass);
  const resolved = failToPass.failure.length === 0 && passToPass.failure.length === 0;
  return { ok: true, grading: { resolved, testCommand: command, failToPass, passToPass, tests }, instanceId: grading.instanceId, output };
}

/**
 * Grade a SWE-bench-style task after the agent (and after guardVerifier's integrity checks) with
 * runSwebenchTests in the sandbox's workdir; reward 1 iff resolved. Problems are recorded in
 * `state.errors`.
 */
export async function gradeSwebench(attempt: SandboxAttempt): Promise<void> {
  const { task, sandbox, signal, state, env, trialDir } = attempt;
  const outcome = await runSwebenchTests({ task, sandbox, workdir: sandbox.workdir, repoCache: env.repoCache, timeoutMs: attempt.budgets.verifierMs, signal, logFile: join(trialDir, "verifier", "test-output.txt") });
  if (!outcome.ok) {
    state.errors.push(outcome.error);
    if (outcome.reward !== null) state.reward = outcome.reward;
    return;
  }
  const { resolved, failToPass, passToPass } = outcome.grading;
  state.grading = outcome.grading;
  state.reward = resolved ? 1 : 0;
  // SWE-bench's own per-instance report, beside the test output.
  const report = {
    [outcome.instanceId]: {
      patch_is_None: false,
      patch_exists: true,
      patch_successfully_applied: true,
      resolved,
      tests_status: {
        FAIL_TO_PASS: failToPass,
        PASS_TO_PASS: passToPass,
        FAIL_TO_FAIL: { success: [], failure: [] },
        PASS_TO_FAIL: { success: [], failure: [] },
      },
    },
  };
  await writeFile(join(trialDir, "verifier", "report.json"), `${JSON.stringify(report, null, 2)}\n`);
}
