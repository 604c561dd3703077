/**
 * Test fixtures: tiny native tasks and code agents written to temp dirs. Used by the engine's
 * tests only (not exported from the package).
 */
import { execFileSync } from "node:child_process";
import { mkdirSync } from "node:fs";
import { chmod, mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import type { TaskSpec, TrialResult } from "@proctor/schema";

export const EXAMPLES_DIR = join(dirname(new URL(import.meta.url).pathname), "..", "..", "..", "..", "examples");

const W = '"${PROCTOR_WORKDIR:-/app}"';
const V = '"${PROCTOR_LOGS_DIR:-/logs}/verifier"';

/** A verifier that polls for `done` in the workdir (every 0.2 s, `polls` times): reward 1 once it appears, else 0. */
function waitForDone(polls: number): string {
  return `i=0; while [ ! -f ${W}/done ] && [ $i -lt ${polls} ]; do sleep 0.2; i=$((i + 1)); done; mkdir -p ${V}; if [ -f ${W}/done ]; then echo 1 > ${V}/reward.txt; else echo 0 > ${V}/reward.txt; fi`;
}

export async function tempDir(prefix: string): Promise<{ path: string; cleanup: () => Promise<void> }> {
  const path = await mkdtemp(join(tmpdir(), prefix));
  return { path, cleanup: () => rm(path, { recursive: true, force: true }) };
}

async function put(path: string, content: string, executable = false): Promise<void> {
  await mkdir(dirname(path), { recursive: true });
  await writeFile(path, content);
  if (executable) await chmod(path, 0o755);
}

export interface FixtureTask {
  toml?: string;
  instruction: string;
  test: string;
  solve?: string;
}

/** Write native task directories under `root`; returns root. */
export async function writeTasks(root: string, tasks: Record<string, FixtureTask>): Promise<string> {
  for (const [id, t] of Object.entries(tasks)) {
    const dir = join(root, id);
    await put(join(dir, "task.toml"), t.toml ?? "[agent]\ntimeout_sec = 30\n[verifier]\ntimeout_sec = 30\n");
    await put(join(dir, "instruction.md"), t.instruction);
    await put(join(dir, "tests", "test.sh"), `#!/bin/sh\n${t.test}\n`, true);
    if (t.solve) await put(join(dir, "solution", "solve.sh"), `#!/bin/sh\n${t.solve}\n`, true);
  }
  return root;
}

/** Write a code agent whose run.sh is `script`; returns its directory. */
export async function writeAgent(root: string, name: string, script: string): Promise<string> {
  const dir = join(root, name);
  await put(join(dir, "run.sh"), `#!/bin/sh\n${script}\n`, true);
  return dir;
}

/** Tasks for the adversarial cases; every test script uses only /bin/sh and coreutils. */
export const ADVERSARIAL_TASKS: Record<string, FixtureTask> = {
  // Passes only when the agent really created `solved`.
  "needs-work": {
    instruction: "Create a file named solved in the working directory.",
    test: `mkdir -p ${V}; if [ -f ${W}/solved ]; then echo 1 > ${V}/reward.txt; else echo 0 > ${V}/reward.txt; fi`,
    solve: `touch ${W}/solved`,
  },
  // A broken verifier: writes no reward at all.
  "silent-verifier": {
    instruction: "Anything.",
    test: `echo "this verifier forgot to write a reward"`,
    solve: "true",
  },
  // The verifier waits up to 5 s for a file named done: work an agent's leftover job does once
  // the agent is gone is seen. The agent has 4 s, so it gets to start that job even when agent
  // setup is slow (a loaded machine); the job waits for the agent's death, not a clock.
  "late-worker": {
    toml: "[agent]\ntimeout_sec = 4\n[verifier]\ntimeout_sec = 60\n",
    instruction: "Create a file named done in the working directory.",
    test: waitForDone(25),
    solve: `touch ${W}/done`,
  },
  // Like late-worker, but the verifier waits up to 12 s: late work 6 s after the agent's end is seen.
  "later-worker": {
    toml: "[agent]\ntimeout_sec = 4\n[verifier]\ntimeout_sec = 60\n",
    instruction: "Create a file named done in the working directory.",
    test: waitForDone(60),
    solve: `touch ${W}/done`,
  },
  // Passes when the agent copied the instruction to instruction-echo.txt (the echo agent does).
  "echo-check": {
    instruction: "The magic words are PINEAPPLE-42.",
    test: `mkdir -p ${V}; if grep -q "PINEAPPLE-42" ${W}/instruction-echo.txt 2>/dev/null; then echo 1 > ${V}/reward.txt; else echo 0 > ${V}/reward.txt; fi`,
    solve: `echo "The magic words are PINEAPPLE-42." > ${W}/instruction-echo.txt`,
  },
};

/**
 * A cheating agent: notes whether /tests and /solution exist, then plants a reward (txt and
 * json) and a fake /tests/test.sh that would write one.
 */
export const CHEATER = `
T="\${PROCTOR_TESTS_DIR:-/tests}"; S="\${PROCTOR_SOLUTION_DIR:-/solution}"; V="\${PROCTOR_VERIFIER_LOGS_DIR:-/logs/verifier}"
{ [ -e "$T" ] && echo "tests=present" || echo "tests=absent"; [ -e "$S" ] && echo "solution=present" || echo "solution=absent"; } > "\${PROCTOR_AGENT_LOGS_DIR:-/logs/agent}/seen.txt"
mkdir -p "$V" "$T"
echo 1 > "$V/reward.txt"
echo '{"reward": 1}' > "$V/reward.json"
printf '#!/bin/sh\\necho 1 > "%s/reward.txt"\\n' "$V" > "$T/test.sh"
echo cheated`;

/** Waits until process $1 (the agent's shell) is gone, sleeps `delay` s, then finishes the late-worker task in workdir $2. */
function lateJob(delay: number): string {
  return `'while kill -0 "$1" 2>/dev/null; do sleep 0.1; done; sleep ${delay}; touch "$2/done"; sleep 60' late "$$" "$PROCTOR_WORKDIR"`;
}

/** Leaves a background job that would finish the late-worker task after the agent's timeout. */
export const LINGERER = `/bin/sh -c ${lateJob(0)} &
sleep 30`;

/**
 * Same, but the job leaves the agent's session and drops its environment, so neither a
 * process-group kill nor an env-marker sweep finds it: only a sandbox-wide kill stops it.
 */
export const ESCAPER = `setsid env -i /bin/sh -c ${lateJob(0)} > /dev/null 2>&1 &
sleep 30`;

/** Like ESCAPER, but its late work comes 6 s after the agent's end: strict isolation must have ended it by then. */
export const SLOW_ESCAPER = `setsid env -i /bin/sh -c ${lateJob(6)} > /dev/null 2>&1 &
sleep 30`;

/** Containers (any state) of a run, by its proctor.run label: none may be left when a run is done. */
export function containersOf(runId: string): string[] {
  const out = execFileSync("docker", ["ps", "-aq", "--filter", `label=proctor.run=${runId}`], { encoding: "utf8" }).trim();
  return out === "" ? [] : out.split("\n");
}

/** Removes whatever containers these runs left (a test's afterAll: a failed test may leave some). */
export function removeRunContainers(runIds: readonly string[]): void {
  const left = runIds.flatMap(containersOf);
  if (left.length > 0) execFileSync("docker", ["rm", "-f", ...left]);
}

export async function readResultsFile(runDir: string): Promise<TrialResult[]> {
  const text = await readFile(join(runDir, "results.jsonl"), "utf8");
  return text.split("\n").filter((l) => l.trim() !== "").map((l) => JSON.parse(l) as TrialResult);
}

export function byTask(results: readonly TrialResult[]): Record<string, TrialResult> {
  return Object.fromEntries(results.map((r) => [r.taskId, r]));
}

/** A TaskSpec built in code, for verifier modes and workspaces no native task.toml expresses. */
export function inlineTask(id: string, sourcePath: string, overrides: Partial<TaskSpec> & Pick<TaskSpec, "verifier">): TaskSpec {
  mkdirSync(sourcePath, { recursive: true });
  return {
    id,
    format: "term-executor",
    sourcePath,
    instruction: `task ${id}`,
    category: "inline",
    difficulty: null,
    tags: [],
    environment: {
      dockerImage: null,
      buildContext: null,
      buildTimeoutSec: 600,
      cpus: null,
      memoryMb: null,
      storageMb: null,
      gpus: 0,
      allowInternet: false,
      workdir: null,
      env: {},
    },
    agent: { timeoutSec: 30 },
    solution: null,
    workspace: null,
    extra: {},
    ...overrides,
  };
}

/** Plants a reward, then makes rm and ls no-ops so the in-container emptying of /logs/verifier "succeeds". */
export const TOOL_SWAPPER = `
V="\${PROCTOR_VERIFIER_LOGS_DIR:-/logs/verifier}"
mkdir -p "$V"; echo 1 > "$V/reward.txt"
for t in rm ls; do p=$(command -v "$t") && printf '#!/bin/sh\\nexit 0\\n' > "$p"; done
echo swapped`;

/** Kills every process in its sandbox, the container's main process included. */
export const SANDBOX_KILLER = `
kill -9 -1
kill -9 1
sleep 1`;
