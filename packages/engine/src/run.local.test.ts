import { execFileSync } from "node:child_process";
import { existsSync } from "node:fs";
import { readFile, readdir, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { LocalRuntime } from "@proctor/sandbox";
import type { ProctorEvent, TaskSpec } from "@proctor/schema";
import { loadTasks } from "@proctor/tasks";
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { ConfigMismatchError } from "./errors";
import { startRun, type RunOptions } from "./run";
import { planRegrade } from "./regrade";
import {
  ADVERSARIAL_TASKS, CHEATER, EXAMPLES_DIR, LINGERER, byTask, inlineTask, readResultsFile, tempDir, writeAgent, writeTasks,
} from "./testing/fixtures";

let root: { path: string; cleanup: () => Promise<void> };
let sandboxRoot: string;
let runtime: LocalRuntime;
let examples: TaskSpec[];
let adversarial: TaskSpec[];

async function load(dir: string): Promise<TaskSpec[]> {
  const loaded = await loadTasks([dir]);
  expect(loaded.errors.map((e) => e.message)).toEqual([]);
  return loaded.tasks;
}

let runCounter = 0;
function run(options: Partial<RunOptions> & Pick<RunOptions, "tasks" | "agent">) {
  const runId = options.runId ?? `local-${++runCounter}`;
  return startRun({ runId, runDir: join(root.path, "runs", runId), runtime, concurrency: 4, attempts: 1, ...options });
}

beforeAll(async () => {
  root = await tempDir("proctor-engine-local-");
  sandboxRoot = join(root.path, "sandboxes");
  execFileSync("mkdir", ["-p", sandboxRoot]);
  runtime = new LocalRuntime({ rootDir: sandboxRoot });
  examples = await load(join(EXAMPLES_DIR, "tasks"));
  adversarial = await load(await writeTasks(join(root.path, "adversarial"), ADVERSARIAL_TASKS));
});
afterAll(async () => {
  await root.cleanup();
});

describe("engine on the local runtime", () => {
  test("the oracle passes every example task and nop fails every one", async () => {
    expect(examples.map((t) => t.id)).toEqual(["fizzbuzz-python", "git-first-commit", "greeting-file", "word-frequency"]);
    const oracle = await run({ tasks: examples, agent: { kind: "oracle" } }).done;
    expect(oracle).toMatchObject({ status: "completed", trials: { planned: 4, total: 4, passed: 4, failed: 0, errored: 0 } });
    const nop = await run({ tasks: examples, agent: { kind: "nop" } }).done;
    expect(nop).toMatchObject({ status: "completed", trials: { total: 4, passed: 0, failed: 4, errored: 0 } });
    expect(nop.byCategory["git"]).toMatchObject({ total: 1, passed: 0 });
  });

  test("summary.json follows a run (at most a second behind a finished trial) and ends as the run's summary, not overwritten by a late rewrite", async () => {
    const handle = run({ runId: "summary-follows", tasks: examples, agent: { kind: "nop" }, attempts: 3, concurrency: 2 });
    const file = join(handle.runDir, "summary.json");
    const totals: Promise<number>[] = [];
    handle.bus.subscribe((e) => {
      if (e.type !== "trial_finished" || totals.length > 0) return;
      // The first finished trial shows in summary.json while the run goes on.
      totals.push((async () => {
        const deadline = Date.now() + 30_000;
        for (;;) {
          const total = (JSON.parse(await readFile(file, "utf8")) as { trials: { total: number } }).trials.total;
          if (total >= 1 || Date.now() > deadline) return total;
          await new Promise((r) => setTimeout(r, 50));
        }
      })());
    });
    const summary = await handle.done;
    expect(summary).toMatchObject({ status: "completed", trials: { total: 12 } });
    expect(await totals[0]).toBeGreaterThanOrEqual(1);
    // Longer than the rewrite interval: a rewrite still due at the end must not replace the final summary.
    await new Promise((r) => setTimeout(r, 1500));
    expect(JSON.parse(await readFile(file, "utf8"))).toEqual(summary);
  });

  test("the run directory holds run.json, events, results, summary and per-trial logs", async () => {
    const handle = run({ runId: "layout", tasks: examples.slice(0, 2), agent: { kind: "oracle" }, attempts: 2, sources: [EXAMPLES_DIR] });
    const seen: ProctorEvent[] = [];
    handle.bus.subscribe((e) => void seen.push(e));
    const summary = await handle.done;
    const dir = handle.runDir;
    const runJson = JSON.parse(await readFile(join(dir, "run.json"), "utf8"));
    expect(runJson).toMatchObject({ runId: "layout", attempts: 2, runtime: "local", agent: { kind: "oracle" }, sources: [EXAMPLES_DIR] });
    expect(runJson.configHash).toMatch(/^[0-9a-f]{64}$/);
    expect(runJson.tasks.map((t: { id: string }) => t.id)).toEqual(["fizzbuzz-python", "git-first-commit"]);

    const results = await readResultsFile(dir);
    expect(results.map((r) => r.trialId).sort()).toEqual(["fizzbuzz-python__1", "fizzbuzz-python__2", "git-first-commit__1", "git-first-commit__2"]);
    expect(JSON.parse(await readFile(join(dir, "summary.json"), "utf8"))).toEqual(summary);
    expect(summary.passAtK).toEqual({ "1": 1, "2": 1 });

    const trial = join(dir, "trials", "fizzbuzz-python__1");
    expect(JSON.parse(await readFile(join(trial, "result.json"), "utf8"))).toMatchObject({ status: "passed", reward: 1, agent: { exitCode: 0, timedOut: false } });
    expect(await readFile(join(trial, "verifier", "reward.json"), "utf8")).toContain('"reward": 1');
    expect(await readFile(join(trial, "verifier", "test-stdout.txt"), "utf8")).toContain("PASS");
    expect(await readdir(join(trial, "agent"))).toEqual(expect.arrayContaining(["stdout.txt", "stderr.txt"]));

    const events = (await readFile(join(dir, "events.jsonl"), "utf8")).trim().split("\n").map((l) => JSON.parse(l) as ProctorEvent);
    expect(events.map((e) => e.seq)).toEqual(events.map((_, i) => i + 1));
    expect(seen.map((e) => e.seq)).toEqual(events.map((e) => e.seq));
    expect(events[0]?.type).toBe("run_started");
    expect(events.at(-1)?.type).toBe("run_finished");
    expect(events.filter((e) => e.type === "trial_finished")).toHaveLength(4);
    const phases = events.filter((e) => e.type === "trial_phase" && e.trialId === "fizzbuzz-python__1").map((e) => e.type === "trial_phase" && `${e.data.phase}:${e.data.status}`);
    expect(phases).toEqual([
      "environment:started", "environment:finished", "sandbox:started", "sandbox:finished",
      "agent_setup:started", "agent_setup:finished", "agent:started", "agent:finished",
      "outputs:started", "outputs:finished", "grader:started", "grader:finished",
      "verifier:started", "verifier:finished", "collect:started", "collect:finished",
    ]);
    // Every sandbox is gone.
    expect(await readdir(sandboxRoot)).toEqual([]);
  });

  test("the echo code agent receives the instruction (env and file)", async () => {
    const echoTask = adversarial.filter((t) => t.id === "echo-check");
    const handle = run({ tasks: echoTask, agent: { kind: "code", dir: join(EXAMPLES_DIR, "agents", "echo-agent") } });
    const summary = await handle.done;
    expect(summary.trials.passed, JSON.stringify((await readResultsFile(handle.runDir))[0])).toBe(1);
    const stdout = await readFile(join(handle.runDir, "trials", "echo-check__1", "agent", "stdout.txt"), "utf8");
    expect(stdout).toContain("file matches env: yes");
    expect(await readFile(join(handle.runDir, "trials", "echo-check__1", "logs", "agent", "instruction.md"), "utf8")).toBe("The magic words are PINEAPPLE-42.");
  });

  test("an agent that plants a reward gains nothing, and never sees /tests or /solution", async () => {
    const agentDir = await writeAgent(root.path, "cheater", CHEATER);
    const tasks = adversarial.filter((t) => t.id === "needs-work" || t.id === "silent-verifier");
    const handle = run({ tasks, agent: { kind: "code", dir: agentDir } });
    await handle.done;
    const results = byTask(await readResultsFile(handle.runDir));
    expect(results["needs-work"]).toMatchObject({ status: "failed", reward: 0 });
    expect(results["silent-verifier"]).toMatchObject({ status: "error", reward: null, error: { kind: "verifier" } });
    expect(results["silent-verifier"]?.error?.message).toMatch(/reward/);
    const seen = await readFile(join(handle.runDir, "trials", "needs-work__1", "logs", "agent", "seen.txt"), "utf8");
    expect(seen).toBe("tests=absent\nsolution=absent\n");
  });

  test("a verifier that writes no reward is a verifier error, for the oracle too", async () => {
    const summary = await run({ tasks: adversarial.filter((t) => t.id === "silent-verifier"), agent: { kind: "oracle" } }).done;
    expect(summary).toMatchObject({ trials: { errored: 1, passed: 0 }, errorsByKind: { verifier: 1 } });
  });

  test("tests that write no reward because bash stopped on them: the error quotes their stderr's line, and says the exit code", async () => {
    const dir = await writeTasks(join(root.path, "no-reward-why"), {
      "syntax-error": { instruction: "Anything.", test: 'if [ -f x ]; then\n  echo "x is there"\nmkdir -p /logs/verifier && echo 1 > /logs/verifier/reward.txt', solve: "true" },
    });
    const summary = await run({ runId: "no-reward-why", tasks: await load(dir), agent: { kind: "oracle" } }).done;
    expect(summary).toMatchObject({ trials: { errored: 1 }, errorsByKind: { verifier: 1 } });
    const [result] = await readResultsFile(join(root.path, "runs", "no-reward-why"));
    expect(result?.error?.message).toMatch(/^the verifier wrote no reward \(exit 2; test-stderr\.txt: "\S*tests\/test\.sh: line \d+: syntax error: unexpected end of file"\): neither /);
  });

  test("an agent timeout kills its background job, and the verifier still runs", async () => {
    const agentDir = await writeAgent(root.path, "lingerer", LINGERER);
    const task = adversarial.filter((t) => t.id === "late-worker");
    const lingering = run({ tasks: task, agent: { kind: "code", dir: agentDir } });
    // The oracle, which does the work in time, passes the same task.
    const oracle = run({ tasks: task, agent: { kind: "oracle" } });
    await Promise.all([lingering.done, oracle.done]);
    const [result] = await readResultsFile(lingering.runDir);
    expect(result).toMatchObject({ status: "failed", reward: 0, agent: { timedOut: true, exitCode: null } });
    expect((await oracle.done).trials.passed).toBe(1);
  });

  test("abort mid-run, then resume: finished trials are not run again", async () => {
    const slow: Record<string, (typeof ADVERSARIAL_TASKS)[string]> = {};
    for (let i = 1; i <= 6; i++) {
      slow[`slow-${i}`] = {
        instruction: "wait",
        test: 'mkdir -p "$PROCTOR_LOGS_DIR/verifier"; [ -f "$PROCTOR_WORKDIR/ok" ] && echo 1 > "$PROCTOR_LOGS_DIR/verifier/reward.txt" || echo 0 > "$PROCTOR_LOGS_DIR/verifier/reward.txt"',
        solve: `sleep ${i === 1 ? 0 : 2}; touch "$PROCTOR_WORKDIR/ok"`,
      };
    }
    const tasks = await load(await writeTasks(join(root.path, "slow"), slow));
    const controller = new AbortController();
    const first = run({ runId: "abort-resume", tasks, agent: { kind: "oracle" }, concurrency: 2, signal: controller.signal });
    first.bus.subscribe((e) => {
      if (e.type === "trial_finished") controller.abort(new Error("test abort"));
    });
    const interrupted = await first.done;
    expect(interrupted.status).toBe("interrupted");
    const before = await readResultsFile(first.runDir);
    expect(before.length).toBeGreaterThanOrEqual(1);
    expect(before.length).toBeLessThan(6);
    expect(await readdir(sandboxRoot)).toEqual([]);

    const second = run({ runId: "abort-resume", tasks, agent: { kind: "oracle" }, concurrency: 2, resume: true });
    const started: string[] = [];
    second.bus.subscribe((e) => {
      if (e.type === "trial_started") started.push(e.trialId);
    });
    const resumed = await second.done;
    expect(resumed).toMatchObject({ status: "completed", trials: { planned: 6, total: 6, passed: 6 } });
    const after = await readResultsFile(first.runDir);
    expect(after.slice(0, before.length)).toEqual(before);
    expect(after.map((r) => r.trialId).sort()).toEqual(tasks.map((t) => `${t.id}__1`).sort());
    expect(started.sort()).toEqual(after.slice(before.length).map((r) => r.trialId).sort());
    for (const done of before) expect(started).not.toContain(done.trialId);
    // Events continue the first session's sequence.
    const events = (await readFile(join(first.runDir, "events.jsonl"), "utf8")).trim().split("\n").map((l) => JSON.parse(l) as ProctorEvent);
    expect(events.map((e) => e.seq)).toEqual(events.map((_, i) => i + 1));
  });

  test("resume refuses a changed configuration and names what changed", async () => {
    const tasks = examples.filter((t) => t.id === "greeting-file");
    await run({ runId: "mismatch", tasks, agent: { kind: "nop" } }).done;
    await expect(run({ runId: "mismatch", tasks, agent: { kind: "nop" }, attempts: 2, resume: true }).done).rejects.toThrow(/attempts: 1 -> 2/);
    await expect(run({ runId: "mismatch", tasks, agent: { kind: "oracle" }, resume: true }).done).rejects.toBeInstanceOf(ConfigMismatchError);
    // Concurrency may change on resume.
    const again = await run({ runId: "mismatch", tasks, agent: { kind: "nop" }, concurrency: 1, resume: true }).done;
    expect(again.trials.total).toBe(1);
    // A fresh run refuses to reuse a run directory.
    await expect(run({ runId: "mismatch", tasks, agent: { kind: "nop" } }).done).rejects.toThrow(/already holds a run/);
  });

  test("resume tolerates a truncated last line in results.jsonl and reruns that trial", async () => {
    const tasks = examples.filter((t) => t.id === "greeting-file" || t.id === "word-frequency");
    const first = run({ runId: "truncated", tasks, agent: { kind: "nop" } });
    await first.done;
    const path = join(first.runDir, "results.jsonl");
    const lines = (await readFile(path, "utf8")).trim().split("\n");
    await writeFile(path, `${lines[0]}\n${lines[1]?.slice(0, 40)}`);
    const started: string[] = [];
    const second = run({ runId: "truncated", tasks, agent: { kind: "nop" }, resume: true });
    second.bus.subscribe((e) => void (e.type === "trial_started" && started.push(e.trialId)));
    const summary = await second.done;
    expect(summary.trials.total).toBe(2);
    expect(started).toEqual([JSON.parse(lines[1] as string).trialId]);
    expect((await readResultsFile(first.runDir)).length).toBe(2);
  });

  test("checks mode: reward 1 iff every check passes, with per-check results; zero checks is an error", async () => {
    const testsDir = join(root.path, "checks-tests");
    execFileSync("mkdir", ["-p", testsDir]);
    await writeFile(join(testsDir, "ok.sh"), "echo fine\n");
    const checks = (commands: string[]) => ({
      mode: "checks" as const,
      testsDir,
      timeoutSec: 30,
      env: {},
      isolateProcesses: false,
      allowChanges: [],
      checks: commands.map((command, i) => ({ name: `c${i}`, command, timeoutSec: i === 2 ? 1 : 30 })),
    });
    const tasks = [
      inlineTask("checks-pass", join(root.path, "inline"), { verifier: checks(["bash ok.sh", "test -f ok.sh && test ! -e tests"]) }),
      inlineTask("checks-fail", join(root.path, "inline"), { verifier: checks(["true", "echo boom; exit 3", "sleep 10"]) }),
      inlineTask("checks-none", join(root.path, "inline"), { verifier: checks([]) }),
    ];
    const handle = run({ tasks, agent: { kind: "nop" } });
    await handle.done;
    const r = byTask(await readResultsFile(handle.runDir));
    expect(r["checks-pass"]).toMatchObject({ status: "passed", reward: 1 });
    expect(r["checks-pass"]?.checks?.[0]).toMatchObject({ name: "c0", passed: true, exitCode: 0, output: "fine\n" });
    expect(r["checks-fail"]).toMatchObject({ status: "failed", reward: 0 });
    expect(r["checks-fail"]?.checks).toEqual([
      expect.objectContaining({ name: "c0", passed: true }),
      expect.objectContaining({ name: "c1", passed: false, exitCode: 3, timedOut: false, output: "boom\n" }),
      expect.objectContaining({ name: "c2", passed: false, exitCode: null, timedOut: true }),
    ]);
    expect(r["checks-none"]).toMatchObject({ status: "error", error: { kind: "verifier" } });
  });

  test("workspace tasks get the repository at base_commit; a bad commit is a setup error", async () => {
    const origin = join(root.path, "origin");
    const git = (...args: string[]) => execFileSync("git", ["-c", "user.name=t", "-c", "user.email=t@t", ...args], { cwd: origin, encoding: "utf8" }).trim();
    execFileSync("git", ["init", "-q", "-b", "main", origin]);
    await writeFile(join(origin, "version.txt"), "v1\n");
    git("add", ".");
    git("commit", "-qm", "v1");
    const base = git("rev-parse", "HEAD");
    await writeFile(join(origin, "version.txt"), "v2\n");
    git("commit", "-qam", "v2");
    const workspace = (baseCommit: string, install: string[]) => ({ repo: origin, baseCommit, version: null, language: null, install, installTimeoutSec: 30 });
    const verifier = {
      mode: "checks" as const,
      testsDir: null,
      timeoutSec: 30,
      env: {},
      isolateProcesses: false,
      allowChanges: [],
      checks: [
        { name: "at-base", command: `grep -qx v1 version.txt && [ "$(git rev-parse HEAD)" = ${base} ]`, timeoutSec: 30 },
        { name: "installed", command: "test -f installed", timeoutSec: 30 },
      ],
    };
    const tasks = [
      inlineTask("ws-ok", join(root.path, "inline"), { workspace: workspace(base, ["touch installed"]), verifier }),
      inlineTask("ws-install-fails", join(root.path, "inline"), { workspace: workspace(base, ["echo nope >&2; exit 4"]), verifier }),
      inlineTask("ws-bad-commit", join(root.path, "inline"), { workspace: workspace("f".repeat(40), []), verifier }),
    ];
    const handle = run({ tasks, agent: { kind: "nop" }, cacheDir: join(root.path, "repo-cache") });
    await handle.done;
    const r = byTask(await readResultsFile(handle.runDir));
    expect(r["ws-ok"], JSON.stringify(r["ws-ok"]?.error)).toMatchObject({ status: "passed", reward: 1 });
    expect(r["ws-install-fails"]).toMatchObject({ status: "error", reward: 0, error: { kind: "setup" } });
    expect(r["ws-install-fails"]?.error?.message).toMatch(/exited with 4: nope/);
    expect(r["ws-bad-commit"]).toMatchObject({ status: "error", reward: null, agent: null, error: { kind: "setup" } });
    expect(existsSync(join(root.path, "repo-cache"))).toBe(true);

    // The repository's tree was kept; a regrade puts it back over a fresh checkout and grades it again, no agent.
    expect(r["ws-ok"]?.outputs).toMatchObject({ kept: true, layout: "repository" });
    const plan = await planRegrade(handle.runDir);
    expect([...plan.source.trials.keys()]).toContain("ws-ok__1");
    expect(plan.missing.map((m) => m.trialId).sort()).toEqual(["ws-bad-commit__1"]);
    const again = run({ tasks: tasks.filter((t) => t.id === "ws-ok"), agent: { kind: "nop" }, regrade: plan.source, cacheDir: join(root.path, "repo-cache") });
    const summary = await again.done;
    expect(summary).toMatchObject({ regradeOf: handle.runId, trials: { planned: 1, total: 1, passed: 1 } });
    const phases = again.bus.history().filter((e) => e.type === "trial_phase").map((e) => (e.data as { phase: string }).phase);
    expect(phases).toContain("restore");
    expect(phases).not.toContain("agent");
  });

  test("an oracle run of a task without a solution is an agent error, and the verifier still runs", async () => {
    const task = { ...(examples.find((t) => t.id === "greeting-file") as TaskSpec), solution: null };
    const handle = run({ tasks: [task], agent: { kind: "oracle" } });
    await handle.done;
    const [result] = await readResultsFile(handle.runDir);
    expect(result).toMatchObject({ status: "error", reward: 0, error: { kind: "agent" } });
    expect(result?.error?.message).toMatch(/no solution/);
  });
});
