import { readdir, readFile } from "node:fs/promises";
import { join } from "node:path";
import { DockerRuntime, dockerTestGate } from "@proctor/sandbox-docker";
import type { TaskSpec } from "@proctor/schema";
import { loadTasks } from "@proctor/tasks";
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { startRun, type RunOptions } from "./run";
import { ADVERSARIAL_TASKS, byTask, CHEATER, containersOf, ESCAPER, EXAMPLES_DIR, LINGERER, readResultsFile, removeRunContainers, SANDBOX_KILLER, SLOW_ESCAPER, tempDir, TOOL_SWAPPER, writeAgent, writeTasks } from "./testing/fixtures";

const IMAGE = "proctor/base:bookworm";
const haveDocker = await dockerTestGate();


describe.skipIf(!haveDocker)("engine on Docker", () => {
  let root: { path: string; cleanup: () => Promise<void> };
  let runtime: DockerRuntime;
  let examples: TaskSpec[];
  let adversarial: TaskSpec[];
  const runIds: string[] = [];

  async function load(dir: string): Promise<TaskSpec[]> {
    const loaded = await loadTasks([dir]);
    expect(loaded.errors.map((e) => e.message)).toEqual([]);
    return loaded.tasks;
  }

  function run(name: string, options: Partial<RunOptions> & Pick<RunOptions, "tasks" | "agent">) {
    const runId = `engine-test-${name}-${process.pid}`;
    runIds.push(runId);
    return startRun({ runId, runDir: join(root.path, "runs", runId), runtime, concurrency: 4, attempts: 1, defaultImage: IMAGE, ...options });
  }

  beforeAll(async () => {
    root = await tempDir("proctor-engine-docker-");
    runtime = new DockerRuntime();
    examples = await load(join(EXAMPLES_DIR, "tasks"));
    adversarial = await load(await writeTasks(join(root.path, "adversarial"), ADVERSARIAL_TASKS));
  });
  afterAll(async () => {
    removeRunContainers(runIds);
    await root.cleanup();
  });

  test("the oracle passes every example task and nop fails every one", async () => {
    const oracle = await run("oracle", { tasks: examples, agent: { kind: "oracle" } }).done;
    expect(oracle).toMatchObject({ status: "completed", trials: { total: 4, passed: 4, failed: 0, errored: 0 } });
    // The logs come over from the halted containers: what each verifier wrote, as Proctor scored it.
    const trials = join(root.path, "runs", `engine-test-oracle-${process.pid}`, "trials");
    for (const trial of await readdir(trials)) {
      const logs = (await readdir(join(trials, trial, "logs", "verifier"))).filter((name) => name.startsWith("reward."));
      expect(logs, trial).not.toEqual([]);
      for (const name of logs) expect(await readFile(join(trials, trial, "logs", "verifier", name), "utf8"), `${trial} ${name}`).toBe(await readFile(join(trials, trial, "verifier", name), "utf8"));
    }
    const nop = await run("nop", { tasks: examples, agent: { kind: "nop" } }).done;
    expect(nop).toMatchObject({ status: "completed", trials: { total: 4, passed: 0, failed: 4, errored: 0 } });
    expect(containersOf(`engine-test-oracle-${process.pid}`)).toEqual([]);
  });

  test("adversarial agents: planted rewards, hidden /tests and /solution, leftover background jobs", async () => {
    const cheater = await writeAgent(root.path, "cheater", CHEATER);
    const lingerer = await writeAgent(root.path, "lingerer", LINGERER);
    const escaper = await writeAgent(root.path, "escaper", ESCAPER);
    const pick = (...ids: string[]) => adversarial.filter((t) => ids.includes(t.id));
    const [cheat, linger, escape, echo] = [
      run("cheater", { tasks: pick("needs-work", "silent-verifier"), agent: { kind: "code", dir: cheater } }),
      run("lingerer", { tasks: pick("late-worker"), agent: { kind: "code", dir: lingerer } }),
      run("escaper", { tasks: pick("late-worker"), agent: { kind: "code", dir: escaper } }),
      run("echo", { tasks: pick("echo-check"), agent: { kind: "code", dir: join(EXAMPLES_DIR, "agents", "echo-agent") } }),
    ];
    await Promise.all([cheat.done, linger.done, escape.done, echo.done]);

    const cheated = byTask(await readResultsFile(cheat.runDir));
    expect(cheated["needs-work"]).toMatchObject({ status: "failed", reward: 0 });
    expect(cheated["silent-verifier"]).toMatchObject({ status: "error", reward: null, error: { kind: "verifier" } });
    expect(await readFile(join(cheat.runDir, "trials", "needs-work__1", "logs", "agent", "seen.txt"), "utf8")).toBe("tests=absent\nsolution=absent\n");

    // The agent's own process tree ends with its timeout...
    const [lingered] = await readResultsFile(linger.runDir);
    expect(lingered).toMatchObject({ status: "failed", reward: 0, agent: { timedOut: true } });
    // ...but a job that left its session stays alive through verification (as in Harbor: tests may
    // need services the agent started), is listed, and the grader shares its network. Its work
    // counts when it was done by the time the outputs were taken (here: as the agent's time ended).
    const [escaped] = await readResultsFile(escape.runDir);
    expect(escaped).toMatchObject({ status: "passed", agent: { timedOut: true }, integrity: { isolation: "shared", flagged: false, grading: { mode: "fresh", joinedNetwork: true } } });
    expect(escaped?.integrity?.survivors.length).toBeGreaterThan(0);
    // Strict isolation ends it as soon as the agent's time is up: its late work (6 s after the
    // agent's end, well within the 12 s this verifier waits) never happens.
    const slowEscaper = await writeAgent(root.path, "slow-escaper", SLOW_ESCAPER);
    const isolated = run("escaper-isolated", { tasks: pick("later-worker"), agent: { kind: "code", dir: slowEscaper }, isolateVerifier: true });
    const shared = run("escaper-shared", { tasks: pick("later-worker"), agent: { kind: "code", dir: slowEscaper }, isolateVerifier: false });
    await Promise.all([isolated.done, shared.done]);
    const [strict] = await readResultsFile(isolated.runDir);
    expect(strict).toMatchObject({ status: "failed", reward: 0, integrity: { isolation: "isolated", survivors: [] } });
    // Without strict isolation the job lives on, but its late work is not in the outputs the
    // grader was given when the agent's time ended: it never reaches the tests.
    const [sharedResult] = await readResultsFile(shared.runDir);
    expect(sharedResult).toMatchObject({ status: "failed", reward: 0, integrity: { isolation: "shared", grading: { joinedNetwork: true } } });
    expect(sharedResult?.integrity?.survivors.length).toBeGreaterThan(0);

    const [echoed] = await readResultsFile(echo.runDir);
    expect(echoed).toMatchObject({ status: "passed", reward: 1 });
    expect(await readFile(join(echo.runDir, "trials", "echo-check__1", "agent", "stdout.txt"), "utf8")).toContain("file matches env: yes");
  });

  test("an agent that plants a reward and replaces rm and ls gains nothing", async () => {
    const swapper = await writeAgent(root.path, "swapper", TOOL_SWAPPER);
    const handle = run("swapper", { tasks: adversarial.filter((t) => t.id === "silent-verifier"), agent: { kind: "code", dir: swapper } });
    await handle.done;
    const [result] = await readResultsFile(handle.runDir);
    // Proctor empties /logs/verifier with its own read-only busybox: the planted reward is gone.
    expect(result).toMatchObject({ status: "error", reward: null, error: { kind: "verifier" } });
    expect(result?.error?.message).toMatch(/the verifier wrote no reward/);
  });

  test("an agent that kills its own sandbox is graded on what it left (a fail here), not retried, and leaves nothing", async () => {
    const killer = await writeAgent(root.path, "killer", SANDBOX_KILLER);
    const handle = run("killer", { tasks: adversarial.filter((t) => t.id === "needs-work"), agent: { kind: "code", dir: killer } });
    const retries: string[] = [];
    handle.bus.subscribe((e) => void (e.type === "trial_retry" && retries.push(e.trialId)));
    await handle.done;
    const [result] = await readResultsFile(handle.runDir);
    // The stopped sandbox still holds the agent's files: they are graded fresh like any others.
    expect(result).toMatchObject({ status: "failed", reward: 0, retries: 0, error: null, integrity: { grading: { mode: "fresh" } } });
    expect(retries).toEqual([]);
    // In its own sandbox the verifier cannot run at all: the agent's error.
    const shared = run("killer-shared", { tasks: adversarial.filter((t) => t.id === "needs-work"), agent: { kind: "code", dir: killer }, grading: "shared" });
    await shared.done;
    const [inPlace] = await readResultsFile(shared.runDir);
    expect(inPlace).toMatchObject({ status: "error", reward: null, retries: 0, error: { kind: "agent" } });
    expect(inPlace?.error?.message).toContain("the sandbox stopped during the agent's run");
    expect(containersOf(shared.runId)).toEqual([]);
    expect(containersOf(handle.runId)).toEqual([]);
  });

  test("abort mid-run removes every container; resume finishes without rerunning finished trials", async () => {
    const slow: Record<string, (typeof ADVERSARIAL_TASKS)[string]> = {};
    for (let i = 1; i <= 5; i++) {
      slow[`slow-${i}`] = {
        instruction: "wait",
        test: 'mkdir -p /logs/verifier; [ -f /app/ok ] && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt',
        solve: `sleep ${i === 1 ? 0 : 8}; touch /app/ok`,
      };
    }
    const tasks = await load(await writeTasks(join(root.path, "slow"), slow));
    const controller = new AbortController();
    const first = run("abort", { tasks, agent: { kind: "oracle" }, signal: controller.signal });
    first.bus.subscribe((e) => {
      if (e.type === "trial_finished") controller.abort(new Error("test abort"));
    });
    const interrupted = await first.done;
    expect(interrupted.status).toBe("interrupted");
    expect(containersOf(first.runId)).toEqual([]);
    const before = await readResultsFile(first.runDir);
    expect(before.map((r) => r.trialId)).toEqual(["slow-1__1"]);

    const second = run("abort", { tasks, agent: { kind: "oracle" }, resume: true });
    const started: string[] = [];
    second.bus.subscribe((e) => void (e.type === "trial_started" && started.push(e.trialId)));
    const done = await second.done;
    expect(done).toMatchObject({ status: "completed", trials: { total: 5, passed: 5 } });
    expect(started.sort()).toEqual(["slow-2__1", "slow-3__1", "slow-4__1", "slow-5__1"]);
    expect(containersOf(first.runId)).toEqual([]);
  });
});
