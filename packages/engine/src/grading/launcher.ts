import { createHash, randomUUID } from "node:crypto";
import { mkdir, readdir, readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { packDirectory } from "@proctor/archive";
import { MissingRewardError, noRewardMessage, parseReward } from "@proctor/reward";
import { CappedFile, SANDBOX_PATHS, type ExecResult } from "@proctor/sandbox";
import { runChecks } from "./checks";
import { CHECK_OUTPUT_BYTES, HOUSEKEEPING_MS, VERIFIER_LOG_BYTES, message, tail, throwIfAborted, type SandboxAttempt } from "../trial/context";
import { HARDENED_ENV, verifierEnv } from "./hardened";
import { adminOptions, stopped, stoppedForGood, trusted } from "./sandbox-tools";

const REWARD_MAX_BYTES = 1024 * 1024;
/** The most of the tests' files the launcher lists after the run (more is reported, never judged file by file). */
const TESTS_LISTED = 20000;
/** Directories tools make beside the tests (environments, caches): never listed. */
const TESTS_UNLISTED = ["__pycache__", ".pytest_cache", ".venv", "venv", "node_modules", ".tox", ".nox", ".mypy_cache", ".ruff_cache"];
const VERIFIER_DIR = `\${PROCTOR_VERIFIER_LOGS_DIR:-${SANDBOX_PATHS.verifierLogs}}`;
const TESTS_DIR = `\${PROCTOR_TESTS_DIR:-${SANDBOX_PATHS.tests}}`;

/** The reward files exactly as the verifier's own exec read them, right after the tests exited. */
export interface RewardRead {
  json: RewardFile;
  txt: RewardFile;
  exitCode: number;
  /** The tests' files after they ran (path relative to /tests -> sha256, or "other"), when asked for. */
  tests: Map<string, string[]> | null;
}
/** `stamp` is the file's inode and change time (ns): any write after the read changes it. */
type RewardFile = { state: "none" } | { state: "file"; data: Buffer; stamp: string } | { state: "link" | "other" };

/**
 * Empties /logs/verifier (and /tests for a reward-file verifier) with the trusted shell, then
 * confirms through the runtime's archive API that no reward file is left.
 */
async function prepareDirs(attempt: SandboxAttempt, testsDir: boolean): Promise<boolean> {
  const { sandbox, signal, state } = attempt;
  const dirs = testsDir ? '"$v" "$t"' : '"$v"';
  const script = `v="${VERIFIER_DIR}"; t="${TESTS_DIR}"; rm -rf "$v" ${testsDir ? '"$t"' : ""} && mkdir -p ${dirs} && chmod 777 "$v" && [ -d "$v" ] && [ ! -L "$v" ] && [ -z "$(ls -A "$v")" ]`;
  const result = await sandbox.exec(trusted(sandbox, script), { ...adminOptions(sandbox), timeoutMs: HOUSEKEEPING_MS, signal });
  throwIfAborted(signal);
  if (result.exitCode !== 0) {
    if (await stoppedForGood(sandbox)) throw await stopped(sandbox);
    state.errors.push({ kind: "verifier", message: `could not empty /logs/verifier${testsDir ? " and /tests" : ""} before verifying (exit ${result.exitCode}): ${tail(result.stderr)}` });
    return false;
  }
  // With a trusted shell the emptying above is sure by construction; with a container's own tools
  // (a runtime without trustedTools) check through the runtime that no reward file is left.
  if (sandbox.capabilities.trustedTools || !sandbox.capabilities.files) return true;
  const names = ["reward.json", "reward.txt"];
  const planted = (
    await Promise.all(
      names.map((name) =>
        sandbox.readFile(`${SANDBOX_PATHS.verifierLogs}/${name}`, { maxBytes: REWARD_MAX_BYTES }).then(
          (data) => data !== null,
          () => true, // present but not a readable file: still planted
        ),
      ),
    )
  ).flatMap((present, i) => (present ? [`${SANDBOX_PATHS.verifierLogs}/${names[i]}`] : []));
  if (planted.length > 0) {
    state.errors.push({ kind: "verifier", message: `${planted.join(" and ")} still existed after /logs/verifier was emptied: the sandbox cannot be scored` });
    return false;
  }
  return true;
}

/**
 * The verifier's launcher, run by the trusted shell with ($1 marker, $2 command, $3 what to
 * prepare: "tests" when the tests come as a tar on stdin, "logs" when they are already bound
 * read-only at /tests, "-" for neither; $4 "hash" to report the tests' files after the run): in a
 * sandbox with trusted tools it first empties /logs/verifier (and /tests) and unpacks the tests
 * (one exec instead of three: each exec costs the runtime a process start). Then the task's
 * command under the image's own /bin/sh (no login shell, no rc files, no stdin), then, in the same
 * exec, the reward files as they are the moment the tests exit, after a marker line only Proctor
 * knows, and the tests' files as they are then. Exit 97/98 without the marker: the directories
 * could not be emptied / the tests not unpacked (the reason is on stderr).
 */
const REWARD_WRAPPER = `
marker="$1"; cmd="$2"
v="${VERIFIER_DIR}"; t="${TESTS_DIR}"
${HARDENED_ENV}
if [ "$3" = tests ]; then
  rm -rf "$v" "$t" && mkdir -p "$v" "$t" && chmod 777 "$v" && [ -d "$v" ] && [ ! -L "$v" ] && [ -z "$(ls -A "$v")" ] || { echo "proctor: could not empty $v and $t" >&2; exit 97; }
  tar -x -f - -C "$t" || { echo "proctor: unpacking the tests into $t failed" >&2; exit 98; }
elif [ "$3" = logs ]; then
  rm -rf "$v" && mkdir -p "$v" && chmod 777 "$v" && [ -d "$v" ] && [ ! -L "$v" ] && [ -z "$(ls -A "$v")" ] || { echo "proctor: could not empty $v" >&2; exit 97; }
fi
/bin/sh -c "$cmd" </dev/null
status=$?
printf '\\n%s\\n' "$marker"
for n in reward.json reward.txt; do
  f="$v/$n"
  if [ -L "$f" ]; then echo "$n link"
  elif [ -f "$f" ]; then printf '%s file %s ' "$n" "$(stat -c '%i:%z' "$f" | tr ' ' _)"; head -c ${REWARD_MAX_BYTES + 1} "$f" | base64 -w0; echo
  elif [ -e "$f" ]; then echo "$n other"
  else echo "$n none"; fi
done
echo "status $status"
if [ "$4" = hash ]; then
  cd "$t" 2>/dev/null && find . -xdev \\( ${TESTS_UNLISTED.map((n) => `-name ${n}`).join(" -o ")} \\) -prune -o ! -type d -print 2>/dev/null | head -n ${TESTS_LISTED + 1} | while IFS= read -r f; do
    if [ -f "$f" ] && [ ! -L "$f" ]; then printf 'test %s %s\\n' "$(sha256sum < "$f" | cut -c1-64)" "$f"; else printf 'test other %s\\n' "$f"; fi
  done
fi
`;

/** Splits the wrapper's stdout into the tests' output (streamed on) and Proctor's trailer after the marker. */
class TrailerSplitter {
  private held = Buffer.alloc(0);
  private trailerChunks: Buffer[] = [];
  private trailerBytes = 0;
  private found = false;
  constructor(
    private readonly marker: Buffer,
    private readonly sink: (chunk: Buffer) => void,
  ) {}

  push(chunk: Buffer): void {
    if (this.found) return this.keep(chunk);
    const data = Buffer.concat([this.held, chunk]);
    const at = data.indexOf(this.marker);
    if (at >= 0) {
      this.found = true;
      this.sink(data.subarray(0, at));
      this.held = Buffer.alloc(0);
      return this.keep(data.subarray(at + this.marker.length));
    }
    // Hold back what could be the start of the marker.
    const keepFrom = Math.max(0, data.length - this.marker.length + 1);
    this.sink(data.subarray(0, keepFrom));
    this.held = Buffer.from(data.subarray(keepFrom));
  }

  end(): string | null {
    if (!this.found) {
      this.sink(this.held);
      return null;
    }
    return Buffer.concat(this.trailerChunks).toString("utf8");
  }

  private keep(chunk: Buffer): void {
    if (this.trailerBytes > 4 * REWARD_MAX_BYTES) return;
    this.trailerChunks.push(chunk);
    this.trailerBytes += chunk.length;
  }
}

function parseTrailer(trailer: string, hashed: boolean): RewardRead | null {
  const lines = trailer.split("\n").map((l) => l.trim());
  const file = (name: string): RewardFile | null => {
    const line = lines.find((l) => l.startsWith(`${name} `));
    if (!line) return null;
    const [, state, stamp, data] = line.split(" ");
    if (state === "none") return { state: "none" };
    if (state === "link" || state === "other") return { state };
    if (state === "file" && stamp) return { state: "file", stamp, data: Buffer.from(data ?? "", "base64") };
    return null;
  };
  const json = file("reward.json");
  const txt = file("reward.txt");
  const status = lines.find((l) => l.startsWith("status "));
  if (!json || !txt || !status) return null;
  let tests: Map<string, string[]> | null = null;
  if (hashed) {
    tests = new Map();
    for (const line of trailer.split("\n")) {
      const match = /^test (\S+) \.\/(.*)$/.exec(line);
      if (match) tests.set(match[2] as string, [...(tests.get(match[2] as string) ?? []), match[1] as string]);
    }
  }
  return { json, txt, exitCode: Number(status.slice("status ".length)), tests };
}

/**
 * Phase 5: empty the verifier's directories, upload the tests fresh and run them. For a
 * reward-file verifier the reward is read in the same exec, right after the tests exit; for
 * checks see runChecks (term-executor semantics: tests/ files in the repo root).
 * Returns the reward read, or null (checks mode, or an error was recorded).
 */
export async function runVerifier(attempt: SandboxAttempt, options: { testsMounted?: boolean } = {}): Promise<RewardRead | null> {
  const { task, sandbox, signal, state, trialDir } = attempt;
  const testsMounted = options.testsMounted === true;
  const verifier = task.verifier;
  if (verifier.mode === "checks" && verifier.checks.length === 0) {
    state.errors.push({ kind: "verifier", message: `task ${task.id} has no checks: nothing would be verified, so it cannot pass` });
    return null;
  }
  if (verifier.mode === "checks") {
    if (await prepareDirs(attempt, false)) await runChecks(attempt, verifier);
    return null;
  }
  // With trusted tools the launcher empties the directories and unpacks the tests itself; tests
  // bound read-only at /tests (a fresh grader's) are left alone.
  const tests = !testsMounted && sandbox.capabilities.trustedTools && verifier.testsDir ? await packTests(verifier.testsDir) : null;
  if (tests === null && !(testsMounted && sandbox.capabilities.trustedTools)) {
    if (!(await prepareDirs(attempt, !testsMounted))) return null;
    if (verifier.testsDir && !testsMounted) await sandbox.upload(verifier.testsDir, SANDBOX_PATHS.tests);
  }
  const prepare = tests ? "tests" : testsMounted && sandbox.capabilities.trustedTools ? "logs" : "-";
  // Tests the agent's programs could write while they run are compared with the task's after.
  const hashed = !testsMounted && verifier.testsDir !== null && sandbox.capabilities.trustedTools;
  const out = await CappedFile.open(join(trialDir, "verifier", "test-stdout.txt"), VERIFIER_LOG_BYTES);
  const err = await CappedFile.open(join(trialDir, "verifier", "test-stderr.txt"), VERIFIER_LOG_BYTES);
  const marker = `@@proctor-reward-${randomUUID()}@@`;
  const splitter = new TrailerSplitter(Buffer.from(`\n${marker}\n`), (c) => out.write(c));
  let result: ExecResult;
  let trailer: string | null;
  try {
    result = await sandbox.exec(trusted(sandbox, REWARD_WRAPPER, [marker, verifier.command, prepare, hashed ? "hash" : "-"]), {
      ...adminOptions(sandbox),
      ...(tests ? { stdin: tests } : {}),
      env: verifierEnv(verifier.env),
      timeoutMs: attempt.budgets.verifierMs,
      signal,
      onStdout: (c) => splitter.push(c),
      onStderr: (c) => err.write(c),
      maxOutputBytes: CHECK_OUTPUT_BYTES,
    });
  } finally {
    trailer = splitter.end();
    await Promise.all([out.close(), err.close()]);
  }
  throwIfAborted(signal);
  if (result.timedOut) {
    state.errors.push({ kind: "verifier", message: `the verifier timed out after ${Math.round(attempt.budgets.verifierMs / 1000)} s` });
    return null;
  }
  if (trailer === null && tests && (result.exitCode === 97 || result.exitCode === 98)) {
    if (await stoppedForGood(sandbox)) throw await stopped(sandbox);
    const what = result.exitCode === 97 ? "empty /logs/verifier and /tests" : `unpack ${verifier.testsDir} into /tests`;
    state.errors.push({ kind: "verifier", message: `could not ${what} before verifying (exit ${result.exitCode}): ${tail(result.stderr)}` });
    return null;
  }
  const read = trailer === null ? null : parseTrailer(trailer, hashed);
  if (read === null) {
    state.errors.push({ kind: "verifier", message: `the verifier's launcher did not report the reward files (exit ${result.exitCode}): ${tail(result.stderr, 3)}` });
    return null;
  }
  await keepRewardCopies(trialDir, read);
  scoreReward(read, state, await rewardFilesNamed(verifier.testsDir, verifier.command), result.stderr);
  const changed = read.tests && verifier.testsDir ? await testsChanged(verifier.testsDir, read.tests) : [];
  if (changed.length > 0) {
    state.errors.unshift({ kind: "agent", message: `tampered: ${changed.join(", ")} (the tests changed while they ran)` });
    state.reward = 0;
    state.integrity?.tampered.push(...changed);
  }
  return read;
}

/** Which reward files a task's tests write, by the names its tests and command use; both when they name neither. */
async function rewardFilesNamed(testsDir: string | null, command: string): Promise<{ json: boolean; txt: boolean }> {
  let text = command;
  if (testsDir) for (const file of await listTree(testsDir)) if (file.hash !== "other" && file.size <= 1024 * 1024) text += `\n${await readFile(join(testsDir, file.path), "latin1")}`;
  const json = text.includes("reward.json");
  const txt = text.includes("reward.txt");
  return json || txt ? { json, txt } : { json: true, txt: true };
}

/** A file of the tests (relative path, sha256 or "other" for what is not a regular file, size). */
interface TreeEntry {
  path: string;
  hash: string;
  size: number;
}

/** The files of host dir `dir` as the launcher reports /tests: no directories, none of TESTS_UNLISTED, links as "other". */
async function listTree(dir: string): Promise<TreeEntry[]> {
  const out: TreeEntry[] = [];
  async function walk(rel: string): Promise<void> {
    for (const entry of await readdir(join(dir, rel), { withFileTypes: true })) {
      const path = rel ? `${rel}/${entry.name}` : entry.name;
      if (entry.isDirectory()) {
        if (!TESTS_UNLISTED.includes(entry.name)) await walk(path);
      } else if (entry.isFile()) {
        const data = await readFile(join(dir, path));
        out.push({ path, hash: createHash("sha256").update(data).digest("hex"), size: data.length });
      } else out.push({ path, hash: "other", size: 0 });
    }
  }
  await walk("");
  return out;
}

/** Files the tests may add to their own dir without changing them (output, caches); anything else added is the agent's doing. */
const ADDED_LOADABLE = /\.(py|pyc|pyo|so|pth|ini|cfg|toml)$/;

/**
 * How the tests' files differ from the task's after the tests ran: a file of the task changed,
 * missing or not a file any more, or a file added that the runner would load (a conftest.py, a
 * module, a config), each with what happened. Output a test writes beside itself is allowed.
 */
async function testsChanged(testsDir: string, after: Map<string, string[]>): Promise<string[]> {
  const expected = new Map((await listTree(testsDir)).map((f) => [f.path, f.hash]));
  const changed: string[] = [];
  // Tool directories (a venv, caches) are not listed; past the cap nothing can be told file by file.
  if ([...after.values()].reduce((n, v) => n + v.length, 0) > TESTS_LISTED) return [`${SANDBOX_PATHS.tests} (more than ${TESTS_LISTED} files after the tests: they cannot be checked)`];
  for (const [path, hash] of expected) {
    const seen = after.get(path) ?? [];
    if (seen.length === 0) changed.push(`${SANDBOX_PATHS.tests}/${path} (removed)`);
    else if (seen.length > 1 || seen[0] !== hash) changed.push(`${SANDBOX_PATHS.tests}/${path} (changed)`);
  }
  for (const [path] of after) {
    if (!expected.has(path) && ADDED_LOADABLE.test(path)) changed.push(`${SANDBOX_PATHS.tests}/${path} (added)`);
  }
  return changed;
}

/** Tests larger than this go up with a separate upload rather than through the launcher's stdin (held in memory). */
const INLINE_TESTS_BYTES = 64 * 1024 * 1024;

/** The tests dir as a tar in memory, or null when it is larger than INLINE_TESTS_BYTES. */
async function packTests(dir: string): Promise<Buffer | null> {
  const chunks: Buffer[] = [];
  let bytes = 0;
  const stream = packDirectory(dir);
  for await (const chunk of stream) {
    bytes += (chunk as Buffer).length;
    if (bytes > INLINE_TESTS_BYTES) {
      stream.destroy();
      return null;
    }
    chunks.push(chunk as Buffer);
  }
  return Buffer.concat(chunks);
}

/** Proctor's own copy of the reward files it scored, beside the tests' output. */
async function keepRewardCopies(trialDir: string, read: RewardRead): Promise<void> {
  const dir = join(trialDir, "verifier");
  await mkdir(dir, { recursive: true });
  for (const [name, file] of [["reward.json", read.json], ["reward.txt", read.txt]] as const) {
    if (file.state === "file") await writeFile(join(dir, name), file.data);
  }
}

function scoreReward(read: RewardRead, state: SandboxAttempt["state"], named: { json: boolean; txt: boolean }, stderr: string): void {
  // Only the reward file the task's tests write counts: another one beside it was written by
  // someone else (a program of the agent's that the tests ran).
  const unexpected = [["reward.json", read.json, named.json] as const, ["reward.txt", read.txt, named.txt] as const].filter(([, file, expected]) => !expected && file.state !== "none").map(([name]) => `${SANDBOX_PATHS.verifierLogs}/${name}`);
  if (unexpected.length > 0) {
    state.errors.unshift({ kind: "agent", message: `tampered: ${unexpected.join(", ")} (a reward file the task's tests do not write)` });
    state.integrity?.tampered.push(...unexpected);
    state.reward = 0;
    return;
  }
  const text = (file: RewardFile, name: string): string | null => {
    if (file.state === "none") return null;
    if (file.state !== "file") throw new Error(`${SANDBOX_PATHS.verifierLogs}/${name} is a ${file.state === "link" ? "symbolic link" : "special file"}, not a file the verifier wrote`);
    if (file.data.length > REWARD_MAX_BYTES) throw new Error(`${SANDBOX_PATHS.verifierLogs}/${name} is larger than ${REWARD_MAX_BYTES} bytes`);
    return file.data.toString("utf8");
  };
  try {
    const json = text(read.json, "reward.json");
    const txt = text(read.txt, "reward.txt");
    const jsonName = `${SANDBOX_PATHS.verifierLogs}/reward.json`;
    const txtName = `${SANDBOX_PATHS.verifierLogs}/reward.txt`;
    const reward = parseReward({ json, txt, jsonName, txtName }).reward;
    if (json !== null && txt !== null) {
      // Both written: they must agree, or neither is the verdict.
      const other = parseReward({ json: null, txt, jsonName, txtName }).reward;
      if (other !== reward) throw new Error(`${jsonName} says ${reward} and ${txtName} says ${other}: the reward files disagree`);
    }
    // A test command killed by a signal did not get to write its own verdict: what is there is not a pass.
    if (read.exitCode > 128 && read.exitCode <= 192 && reward !== null && reward >= 1) {
      state.errors.unshift({ kind: "agent", message: `the test command was killed (exit ${read.exitCode}, signal ${read.exitCode - 128}) after a passing reward was written: a reward from a killed test run is not counted` });
      state.reward = 0;
      return;
    }
    state.reward = reward;
  } catch (error) {
    // No reward: the line of the tests' stderr that says why goes in the message (a syntax error leaves their stdout empty).
    if (error instanceof MissingRewardError) state.errors.push({ kind: "verifier", message: noRewardMessage(error, read.exitCode, stderr) });
    else state.errors.push({ kind: "verifier", message: `${message(error)}${read.exitCode !== 0 ? ` (the verifier exited with ${read.exitCode})` : ""}` });
  }
}

export function outputOf(result: ExecResult, cap: number): string {
  const text = [result.stdout, result.stderr].filter((s) => s.length > 0).join("\n");
  return Buffer.byteLength(text) <= cap ? text : `${Buffer.from(text).subarray(0, cap).toString("utf8")}\n[proctor: output cut]`;
}

const STAMP_SCRIPT = `v="${VERIFIER_DIR}"
for n in reward.json reward.txt; do
  f="$v/$n"
  if [ -L "$f" ]; then echo "$n link"; elif [ -f "$f" ]; then echo "$n $(stat -c '%i:%z' "$f" | tr ' ' _)"; elif [ -e "$f" ]; then echo "$n other"; else echo "$n none"; fi
done`;

/**
 * The reward files that were written, replaced or removed after the verifier's exec read them
 * (a process outside the verifier rewrote them): compared by inode and change time, so even a
 * rewrite with the same content counts.
 */
export async function rewardChangedAfterRead(attempt: SandboxAttempt, read: RewardRead): Promise<string[]> {
  const { sandbox } = attempt;
  const result = await sandbox.exec(trusted(sandbox, STAMP_SCRIPT), { ...adminOptions(sandbox), timeoutMs: HOUSEKEEPING_MS });
  if (result.exitCode !== 0) throw new Error(`re-reading the reward files' stamps failed (exit ${result.exitCode}): ${tail(result.stderr, 3)}`);
  const now = new Map(result.stdout.trim().split("\n").map((line) => {
    const [name = "", stamp = ""] = line.split(" ");
    return [name, stamp] as const;
  }));
  const changed: string[] = [];
  for (const [name, file] of [["reward.json", read.json], ["reward.txt", read.txt]] as const) {
    const before = file.state === "file" ? file.stamp : file.state;
    if (now.get(name) !== before) changed.push(`${SANDBOX_PATHS.verifierLogs}/${name}`);
  }
  return changed;
}
