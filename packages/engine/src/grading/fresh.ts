import { lstat, readlink, rm } from "node:fs/promises";
import { join, posix } from "node:path";
import { makeOwnedTempDir, removeOrphanTempDirs, SANDBOX_PATHS, SandboxStartError, type Sandbox } from "@proctor/sandbox";
import { repoUrl } from "../workspace";
import { CHECKOUT_MS, HOUSEKEEPING_MS, SANDBOX_START_MS, effectiveLimits, message, tail, throwIfAborted, type SandboxAttempt } from "../trial/context";
import { installWorkspace } from "../trial/workspace";
import { containerSettingsFor } from "../trial/grade-competition";
import { statSync } from "node:fs";
import type { TaskSpec } from "@proctor/schema";
import { SwebenchGrading } from "@proctor/tasks";
import { verifierEnv } from "./hardened";
import { shadowMessage, shadowedNames, type ModuleCandidate } from "./modules";
import picomatch from "picomatch";
import { changesRunner, diffRepository, screenStaged, stageFiles, textOf } from "./repo-diff";
import { findGitDirs, neutralizeGitDir } from "./git-dirs";
import { adminOptions, argumentChunks, trusted } from "./sandbox-tools";
import type { GradingPlan } from "./plan";

/** Start of the host staging dirs that carry an agent's outputs to its grader (named after their process). */
export const OUTPUTS_TEMP_PREFIX = "proctor-out-";
/** The most bytes of outputs fresh grading carries from the agent's sandbox. */
const OUTPUTS_MAX_BYTES = 4 * 1024 * 1024 * 1024;

/** The agent's outputs, held on this host between the agent's sandbox and the grader's. */
export interface CapturedOutputs {
  /** The staging dir (removed by `release`). */
  dir: string;
  /** Repository tasks: the agent's tree (without .git) under `dir`/tree. */
  repository: boolean;
  /** Non-repository tasks: each output path and where its copy is under `dir` (absent when the agent left none). */
  paths: { path: string; staged: string | null }[];
  /** Entries the copy left out (FIFOs, devices), at most 100. */
  skipped: string[];
}

let swept: Promise<unknown> | undefined;

/**
 * Copies the agent's outputs from its sandbox to a private host dir: the repository (the workdir
 * without .git) for a repository task, else each output path. Links come as links, never
 * followed; FIFOs and devices are left out. More than OUTPUTS_MAX_BYTES is the agent's error.
 */
export async function captureOutputs(attempt: SandboxAttempt, plan: GradingPlan): Promise<CapturedOutputs> {
  const { sandbox } = attempt;
  // Staging dirs of killed processes (once per process).
  swept ??= removeOrphanTempDirs(OUTPUTS_TEMP_PREFIX).catch(() => undefined);
  await swept;
  const dir = await makeOwnedTempDir(OUTPUTS_TEMP_PREFIX);
  const captured: CapturedOutputs = { dir, repository: plan.repository, paths: [], skipped: [] };
  try {
    let budget = OUTPUTS_MAX_BYTES;
    const tooBig = () => new OutputsTooLargeError(`the agent's outputs (${plan.outputs.join(", ")}) are larger than ${OUTPUTS_MAX_BYTES} bytes: nothing was graded`);
    if (plan.repository) {
      const report = await sandbox.download(sandbox.workdir, join(dir, "tree"), { exclude: [".git"], links: true, maxBytes: budget });
      if (report.truncated) throw tooBig();
      captured.skipped.push(...report.skipped);
      return captured;
    }
    for (const [i, path] of plan.outputs.entries()) {
      const parent = posix.dirname(path);
      const name = posix.basename(path);
      const into = join(dir, String(i));
      // The parent with one entry: a file and a directory land the same way (into/<name>).
      const report = await sandbox.download(parent, into, { entries: [name], links: true, maxBytes: budget });
      if (report.truncated) throw tooBig();
      budget -= report.bytes;
      captured.skipped.push(...report.skipped.map((s) => posix.join(parent, s)));
      const staged = join(into, name);
      captured.paths.push({ path, staged: (await lstat(staged).catch(() => null)) ? staged : null });
    }
    return captured;
  } catch (error) {
    await rm(dir, { recursive: true, force: true });
    throw error;
  }
}

export async function releaseOutputs(captured: CapturedOutputs | null): Promise<void> {
  if (captured) await rm(captured.dir, { recursive: true, force: true });
}

/**
 * Repository files the tests' run relies on that the agent's diff must leave as the base commit
 * has them: the package files (`__init__.py`) of the directories the test files are in, and the
 * scripts and settings the test command runs from the repository (Django's tests/runtests.py and
 * its settings module, sympy's bin/test). What the test patch itself writes is restored anyway.
 * A checks task's commands name the code under test, which the agent is there to change.
 */
function protectedFiles(task: TaskSpec, base: string): string[] {
  const out = new Set<string>();
  const grading = SwebenchGrading.safeParse(task.extra.swebench);
  const commands: string[] = [];
  if (grading.success) {
    for (const m of grading.data.testPatch.matchAll(/^\+\+\+ b\/(.+)$/gm)) {
      let dir = posix.dirname((m[1] as string).trim());
      while (dir !== "." && dir !== "/") {
        out.add(posix.join(dir, "__init__.py"));
        dir = posix.dirname(dir);
      }
    }
    if (grading.data.testCmd) commands.push(grading.data.testCmd);
  }
  for (const command of commands) {
    for (const raw of command.split(/[\s;&|()]+/)) {
      const token = raw.replace(/^["']|["']$/g, "");
      const settings = /^--settings=([\w.]+)$/.exec(token);
      const candidates = settings ? [`${settings[1]?.replace(/\./g, "/")}.py`, `tests/${settings[1]?.replace(/\./g, "/")}.py`] : [token.replace(/^\.\//, "")];
      for (const c of candidates) {
        if (c && !c.startsWith("/") && !c.split("/").includes("..") && /[/.]/.test(c) && statSync(join(base, c), { throwIfNoEntry: false })?.isFile()) out.add(c);
      }
    }
  }
  return [...out].sort();
}

/** The grader's sandbox could not be prepared with its own trusted tools: a `verifier` error. */
export class GraderError extends Error {
  override name = "GraderError";
}

/**
 * What the agent left could not be read as outputs (a name git or the file system refuses, a
 * file of a kind that cannot be copied): the agent's error, so it stays among the scored trials.
 */
export class OutputsUnusableError extends Error {
  override name = "OutputsUnusableError";
}

/** The host's own trouble (space, descriptors, memory, I/O): never blamed on the agent. */
const HOST_ERRORS = new Set(["ENOSPC", "EDQUOT", "EIO", "EMFILE", "ENFILE", "ENOMEM", "EROFS"]);

/** Runs `work` on the staged outputs; a failure the outputs themselves cause becomes OutputsUnusableError. */
export async function onOutputs<T>(what: string, work: () => Promise<T>): Promise<T> {
  try {
    return await work();
  } catch (error) {
    const code = (error as NodeJS.ErrnoException | null)?.code;
    if (code && HOST_ERRORS.has(code)) throw error;
    throw new OutputsUnusableError(`${what} failed on what the agent left: ${message(error).slice(0, 300)}`, { cause: error });
  }
}

/** The agent's outputs went past OUTPUTS_MAX_BYTES. */
export class OutputsTooLargeError extends Error {
  override name = "OutputsTooLargeError";
}

/** A repository task's own test command (a SWE-bench row's, with its activation), for asking its Python what it imports. */
function testCommand(task: TaskSpec): string | null {
  const grading = SwebenchGrading.safeParse(task.extra.swebench);
  return grading.success ? grading.data.testCmd : null;
}

/**
 * Refuses new modules in the outputs that would shadow ones the tests' Python imports from
 * elsewhere (see modules.ts), asked of the grader before the outputs are placed (its interpreter
 * and site dirs are the image's). Returns the tampered entries.
 */
export async function refuseShadowingModules(attempt: SandboxAttempt, grader: Sandbox, candidates: readonly ModuleCandidate[], outputs: readonly string[], testImports: Iterable<string>): Promise<string[]> {
  if (candidates.length === 0) return [];
  const shadows = await shadowedNames(attempt, grader, { candidates: candidates.map((c) => c.name), outputs, watched: testImports, env: verifierEnv(attempt.task.verifier.env) });
  return candidates.filter((c) => shadows.has(c.name)).map(shadowMessage);
}

/**
 * A new sandbox for the verifier from the agent's image (the task's original image), with the
 * task's limits, env and workdir: on the agent sandbox's network namespace when `joinNetworkOf`
 * (services the agent left running stay reachable), else the task's own network policy.
 */
export async function startGraderSandbox(attempt: SandboxAttempt, image: string, joinNetworkOf: string | null): Promise<{ sandbox: Sandbox; testsMounted: boolean }> {
  const { task, env, signal, budgets, trialId } = attempt;
  // The tests bound read-only at /tests where the runtime can: a program of the agent's that the
  // tests run (as root) cannot plant a conftest.py there or rewrite test.sh while bash reads it.
  const testsDir = task.verifier.mode === "reward-file" ? task.verifier.testsDir : null;
  const testsMounted = testsDir !== null && (await env.runtime.canMount?.(testsDir).catch(() => false)) === true;
  const spec = task.environment;
  const limits = effectiveLimits(task, env.limits);
  const container = containerSettingsFor(task, env.container);
  const lifetimeMs = budgets.verifierMs + budgets.checksMs + (task.workspace ? CHECKOUT_MS + budgets.installMs : 0) + SANDBOX_START_MS + 2 * HOUSEKEEPING_MS;
  const startBound = AbortSignal.timeout(SANDBOX_START_MS);
  const sandbox = await env.runtime
    .create({
      image,
      ...(testsMounted && testsDir ? { mounts: [{ hostPath: testsDir, sandboxPath: SANDBOX_PATHS.tests, readOnly: true }] } : {}),
      ...(limits.cpus !== undefined ? { cpus: limits.cpus } : {}),
      ...(limits.memoryMb !== undefined ? { memoryMb: limits.memoryMb } : {}),
      ...(limits.pidsLimit !== undefined ? { pidsLimit: limits.pidsLimit } : {}),
      network: spec.allowInternet,
      ...(joinNetworkOf ? { joinNetworkOf } : {}),
      ...(container ? { container } : {}),
      env: spec.env,
      workdir: attempt.sandbox.workdir,
      labels: { "proctor.run": env.runId, "proctor.trial": trialId, "proctor.role": "grader" },
      lifetimeMs,
      ...(env.upcomingTrials ? { upcoming: env.upcomingTrials() } : {}),
      signal: AbortSignal.any([signal, startBound]),
    })
    .catch((error: unknown) => {
      if (startBound.aborted && !signal.aborted) throw new SandboxStartError(`the grader's sandbox did not start within ${SANDBOX_START_MS / 1000} s`, { cause: error });
      throw error;
    });
  return { sandbox, testsMounted };
}

/** `path` (absolute) relative to the sandbox's root, for a script run with cwd "/" (which every runtime maps). */
const fromRoot = (path: string) => `./${path.replace(/^\/+/, "")}`;

/**
 * Finds the toolchains the image keeps inside the outputs (a virtual environment, a conda env, a
 * site-packages or node_modules directory) and, when there are none, removes the outputs from the
 * grader, in one exec. Such a toolchain is what the tests may run (`/app/.venv/bin/pytest`):
 * copying the agent's workdir over it would grade with the agent's runner, so it stays the
 * image's (a task that wants the agent's version lists it in `[verifier] allow_changes`).
 * Returns the toolchains' roots; with any, nothing was removed (see removeAround).
 */
async function clearOutputs(grader: Sandbox, outputs: readonly string[], signal: AbortSignal): Promise<string[]> {
  return findToolchains(grader, outputs, signal, "removing", `[ -n "$found" ] && exit 0
for p in "$@"; do rm -rf -- "$p" || exit 1; done`);
}

/**
 * The toolchains inside `paths` in `sandbox` (the roots of virtual environments and conda envs,
 * site-packages, dist-packages and node_modules directories; the outermost of nested ones), found
 * with its trusted tools; `then` runs after in the same exec ($found is set when there are some).
 */
export async function findToolchains(sandbox: Sandbox, paths: readonly string[], signal: AbortSignal, what = "looking for toolchains in", then = ""): Promise<string[]> {
  const script = `found=
for p in "$@"; do
  if [ -d "$p" ] && [ ! -L "$p" ]; then
    r=$(find "$p" -xdev \\( -name pyvenv.cfg -o -name conda-meta -o -name site-packages -o -name dist-packages -o -name node_modules \\) -print -prune) || exit 1
    [ -n "$r" ] && { printf '%s\n' "$r"; found=1; }
  fi
done
${then || "exit 0"}`;
  const roots = new Set<string>();
  for (const chunk of argumentChunks(paths)) {
    const result = await sandbox.exec(trusted(sandbox, script, chunk.map(fromRoot)), { ...adminOptions(sandbox), cwd: "/", timeoutMs: HOUSEKEEPING_MS, signal });
    throwIfAborted(signal);
    if (result.exitCode !== 0) throw new GraderError(`${what} ${chunk.slice(0, 3).join(", ")} in the ${then ? "grader's " : ""}sandbox failed (exit ${result.exitCode}): ${tail(result.stderr)}`);
    for (const line of result.stdout.split("\n").filter(Boolean)) {
      const path = `/${line.replace(/^\.\//, "")}`;
      roots.add(/\/(pyvenv\.cfg|conda-meta)$/.test(path) ? posix.dirname(path) : path);
    }
  }
  // The outermost of nested ones (a venv's own site-packages is the venv's).
  const sorted = [...roots].sort();
  return sorted.filter((root) => !sorted.some((other) => other !== root && root.startsWith(`${other}/`)));
}

/** Removes everything under `outputs` in the grader but the `kept` toolchains (and the directories above them). */
async function removeAround(grader: Sandbox, outputs: readonly string[], kept: readonly string[], signal: AbortSignal): Promise<void> {
  // find's -path takes a pattern: the roots' own characters are escaped.
  const pattern = (p: string) => fromRoot(p).replace(/[*?[\]\\]/g, "\\$&");
  const prune = kept.flatMap((root, i) => [...(i > 0 ? ["-o"] : []), "-path", pattern(root)]);
  for (const output of outputs) {
    const result = await grader.exec(
      trusted(grader, 'p="$1"; shift; [ -e "$p" ] || [ -L "$p" ] || exit 0; if [ ! -d "$p" ] || [ -L "$p" ]; then rm -f -- "$p"; exit $?; fi; find "$p" -mindepth 1 -xdev \\( "$@" \\) -prune -o ! -type d -exec rm -f -- {} + || exit 1; find "$p" -mindepth 1 -xdev \\( "$@" \\) -prune -o -type d -print | sort -r | while IFS= read -r d; do rmdir -- "$d" 2>/dev/null; done; exit 0', [fromRoot(output), ...prune]),
      { ...adminOptions(grader), cwd: "/", timeoutMs: HOUSEKEEPING_MS, signal },
    );
    throwIfAborted(signal);
    if (result.exitCode !== 0) throw new GraderError(`clearing ${output} around the image's toolchains in the grader's sandbox failed (exit ${result.exitCode}): ${tail(result.stderr)}`);
  }
}

/** Removes `paths` (absolute sandbox paths) in the grader with its trusted shell. */
async function removeIn(grader: Sandbox, paths: readonly string[], signal: AbortSignal): Promise<void> {
  for (const chunk of argumentChunks(paths)) {
    const result = await grader.exec(trusted(grader, 'for p in "$@"; do rm -rf -- "$p" || exit 1; done', chunk.map(fromRoot)), { ...adminOptions(grader), cwd: "/", timeoutMs: HOUSEKEEPING_MS, signal });
    throwIfAborted(signal);
    if (result.exitCode !== 0) throw new GraderError(`removing ${chunk.slice(0, 3).join(", ")} in the grader's sandbox failed (exit ${result.exitCode}): ${tail(result.stderr)}`);
  }
}

/**
 * The grader's install ran at the base commit before the agent's files came, so what it built
 * from them must not outlive them: each changed file gets a time later than the install's output
 * (make, cargo and the like rebuild what is older than its sources; the upload's times are whole
 * seconds), and the bytecode of each changed or deleted Python module goes (Python trusts a .pyc
 * whose recorded source size and mtime second match: a same-size edit in the same second would
 * run the base commit's code).
 */
const REFRESH_SCRIPT = `for p in "$@"; do
  case "$p" in
    *.py) d=$(dirname -- "$p"); b=$(basename -- "$p" .py); rm -f -- "$d/__pycache__/$b".*.pyc "$d/__pycache__/$b".*.pyo "\${p}c" "\${p}o" || exit 1 ;;
  esac
  if [ -f "$p" ] && [ ! -L "$p" ]; then touch -c -- "$p" || exit 1; fi
done`;

async function refreshChanged(grader: Sandbox, changed: readonly string[], deleted: readonly string[], signal: AbortSignal): Promise<void> {
  for (const chunk of argumentChunks([...changed, ...deleted])) {
    const result = await grader.exec(trusted(grader, REFRESH_SCRIPT, chunk.map((p) => `./${p}`)), { ...adminOptions(grader), cwd: grader.workdir, timeoutMs: HOUSEKEEPING_MS, signal });
    throwIfAborted(signal);
    if (result.exitCode !== 0) throw new GraderError(`refreshing the agent's changed files in the grader's sandbox failed (exit ${result.exitCode}): ${tail(result.stderr)}`);
  }
}

/** Puts a staged entry (file, directory or link) at `path` in the grader; a staged link becomes a link with the same target. */
async function placeStaged(grader: Sandbox, staged: string, path: string, signal: AbortSignal): Promise<void> {
  const info = await lstat(staged);
  if (info.isSymbolicLink()) {
    // upload() would read through a host link: recreate it instead, never following it.
    const target = await readlink(staged);
    const made = await grader.exec(trusted(grader, 'mkdir -p "$(dirname "$2")" && ln -s -- "$1" "$2"', [target, fromRoot(path)]), { ...adminOptions(grader), cwd: "/", timeoutMs: HOUSEKEEPING_MS, signal });
    if (made.exitCode !== 0) throw new GraderError(`recreating the link ${path} in the grader's sandbox failed: ${tail(made.stderr)}`);
    return;
  }
  await grader.upload(staged, path);
}

/** What placing the outputs found. */
export interface PlacedOutputs {
  /** Test-runner files the outputs add, change or remove (see changesRunner): grading them would run the agent's configuration. */
  tampered: string[];
  /** Why a pass is not clean. */
  flags: string[];
  /** What was left out (bytecode). */
  skipped: string[];
  /** Links among the outputs (sandbox paths), for the grader's kernel to follow. */
  links: string[];
  /** The image's toolchains inside the outputs, kept as the image has them. */
  kept: string[];
  /** Git directories made inert: each with what was dropped. */
  notes: string[];
}

/**
 * The grader's copy of the agent's work. Output paths: each is removed from the grader and
 * replaced by the agent's (or left absent when the agent left none). Repository: the base
 * commit is checked out and installed as the agent's sandbox was, then the agent's diff (files it
 * changed or added, links as links; files it deleted) is applied, so nothing the base commit's
 * ignore rules exclude (build output, caches) comes from the agent. Bytecode never comes; test-
 * runner files that differ from the grader's own copy are returned as tampered (nothing is run).
 */
export async function placeOutputs(attempt: SandboxAttempt, grader: Sandbox, captured: CapturedOutputs): Promise<PlacedOutputs> {
  const { task, env, signal } = attempt;
  if (!captured.repository) {
    const placed: PlacedOutputs = { tampered: [], flags: [], skipped: [], links: [], kept: [], notes: [] };
    const outputs = captured.paths.map((p) => p.path);
    // The image's toolchains inside the outputs stay the image's (see clearOutputs).
    const allowed = picomatch([...task.verifier.allowChanges], { dot: true });
    const kept = (await clearOutputs(grader, outputs, signal)).filter((root) => !allowed(root) && !allowed(`${root}/`));
    placed.kept = kept;
    const inKept = (path: string) => kept.some((root) => path === root || path.startsWith(`${root}/`));
    for (const { path, staged } of captured.paths) {
      if (!staged) continue;
      for (const root of kept) {
        if (root === path || root.startsWith(`${path}/`)) await rm(join(staged, posix.relative(path, root)), { recursive: true, force: true });
      }
      for (const runner of await onOutputs(`reading ${path}`, () => screenStaged(staged, path, placed.skipped, placed.tampered, placed.links))) {
        if (inKept(runner.path)) continue;
        const before = await grader.readFile(runner.path, { maxBytes: 4 * 1024 * 1024 }).then((b) => b?.toString("utf8") ?? null, () => "\0unreadable");
        if (changesRunner(runner.path, before, await onOutputs(`reading ${runner.path}`, () => textOf(runner.host)))) placed.tampered.push(`${runner.path} (changes how the tests run)`);
      }
      for (const gitDir of await onOutputs(`reading ${path}`, () => findGitDirs(staged))) {
        const changed = await onOutputs(`reading ${path}`, () => neutralizeGitDir(gitDir));
        if (changed.length > 0) placed.notes.push(`${posix.join(path, posix.relative(staged, gitDir))}: ${changed.slice(0, 5).join(", ")}${changed.length > 5 ? ", ..." : ""}`);
      }
    }
    if (placed.tampered.length > 0) return placed;
    if (kept.length > 0) await removeAround(grader, outputs, kept, signal);
    for (const { path, staged } of captured.paths) if (staged) await placeStaged(grader, staged, path, signal);
    return placed;
  }
  const ws = task.workspace;
  if (!ws) throw new Error(`task ${task.id} was planned as a repository but has no workspace`);
  const tree = join(captured.dir, "tree");
  const graderAttempt: SandboxAttempt = { ...attempt, sandbox: grader };
  return env.repoCache.withCheckout(
    repoUrl(ws.repo, task.sourcePath),
    ws.baseCommit,
    async (base) => {
      const diff = await onOutputs("comparing the repository with its base commit", () => diffRepository(base, tree, protectedFiles(task, base), grader.workdir));
      const inRepo = (p: string) => posix.join(grader.workdir, p);
      const none = { skipped: [], links: [], kept: [], notes: [] };
      if (diff.tampered.length > 0) return { ...none, tampered: diff.tampered.map(inRepo), flags: diff.flags };
      await grader.upload(base, grader.workdir);
      // A repository's tests import from its root: any new top-level module found elsewhere too is refused.
      const shadows = await shadowedNames(attempt, grader, { candidates: diff.topLevelModules.map((m) => m.name), outputs: [grader.workdir], watched: ["*"], command: testCommand(task), env: verifierEnv(task.verifier.env) });
      const shadowing = diff.topLevelModules.filter((m) => shadows.has(m.name));
      if (shadowing.length > 0) return { ...none, tampered: shadowing.map((m) => shadowMessage({ path: inRepo(m.path), name: m.name })), flags: diff.flags };
      const installed = await installWorkspace(graderAttempt, "grader-install.log");
      // As before the agent, a failed install is recorded (once) and the tests still run.
      if (installed !== null && !attempt.state.errors.some((e) => e.kind === "setup")) {
        attempt.state.errors.push({ kind: "setup", message: `the grader's sandbox: ${installed}` });
      }
      const staging = join(captured.dir, "diff");
      await onOutputs("copying the repository's changed files", () => stageFiles(tree, diff.changed, staging));
      const notes: string[] = [];
      for (const gitDir of await onOutputs("reading the repository's changed files", () => findGitDirs(staging))) {
        const changed = await onOutputs("reading the repository's changed files", () => neutralizeGitDir(gitDir));
        if (changed.length > 0) notes.push(`${inRepo(posix.relative(staging, gitDir))}: ${changed.slice(0, 5).join(", ")}${changed.length > 5 ? ", ..." : ""}`);
      }
      await removeIn(grader, [...diff.changed, ...diff.deleted].map((p) => posix.join(grader.workdir, p)), signal);
      if (diff.changed.length > 0) await grader.upload(staging, grader.workdir);
      await refreshChanged(grader, diff.changed, diff.deleted, signal);
      return { ...none, tampered: diff.tampered.map(inRepo), flags: diff.flags, skipped: diff.skipped.map(inRepo), links: diff.links.map(inRepo), notes };
    },
    { timeoutMs: CHECKOUT_MS, signal },
  );
}

