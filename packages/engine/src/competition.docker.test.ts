import { existsSync } from "node:fs";
import { chmod, mkdir, readFile, stat, writeFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import { DockerRuntime, dockerTestGate } from "@proctor/sandbox-docker";
import type { AgentSpec, TaskSpec } from "@proctor/schema";
import { loadTasks } from "@proctor/tasks";
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { startRun, type RunOptions } from "./run";
import { byTask, containersOf, readResultsFile, removeRunContainers, tempDir, writeAgent } from "./testing/fixtures";

const IMAGE = "proctor/base:bookworm";
const haveDocker = await dockerTestGate();

// The markers are written split so that no search command line or script contains them whole.
const PRIVATE_MARK = ["PRIVMARK", "9d2e7a"].join("-");
const PUBLIC_MARK = ["PUBMARK", "41c0b8"].join("-");

async function put(path: string, content: string, mode?: number): Promise<void> {
  await mkdir(dirname(path), { recursive: true });
  await writeFile(path, content);
  if (mode !== undefined) await chmod(path, mode);
}

/** A competition whose answer is 5: score |v - 5| (lower is better) or 10 - |v - 5| (higher). */
async function writeCompetition(root: string, id: string, higherIsBetter: boolean, extraToml = ""): Promise<void> {
  const dir = join(root, id);
  const thresholds = higherIsBetter ? "{ gold = 9.9, silver = 9.5, bronze = 9.0, median = 8.0 }" : "{ gold = 0.1, silver = 0.5, bronze = 1.0, median = 2.0 }";
  await put(join(dir, "task.toml"), `[agent]\ntimeout_sec = 120\n[grading]\nmetric = "${higherIsBetter ? "closeness" : "abs_error"}"\nhigher_is_better = ${higherIsBetter}\nthresholds = ${thresholds}\ntimeout_sec = 60\n${extraToml}`);
  await put(join(dir, "instruction.md"), "Write the number in /home/data/hint.txt to /home/submission/answer.txt.\n");
  await put(join(dir, "data", "public", "hint.txt"), "5\n");
  await put(join(dir, "data", "public", "notes.txt"), `${PUBLIC_MARK}\n`);
  await put(join(dir, "data", "private", "answer.txt"), "5\n");
  await put(join(dir, "data", "private", "secret.txt"), `${PRIVATE_MARK}\n`);
  await put(
    join(dir, "grade", "grade.py"),
    `import json, os
out = os.environ["REWARD_FILE"]
answer = float(open(os.path.join(os.environ["PRIVATE_DIR"], "answer.txt")).read())
assert open(os.path.join(os.environ["PRIVATE_DIR"], "secret.txt")).read().startswith("PRIVMARK")
try:
    value = float(open(os.path.join(os.environ["SUBMISSION_DIR"], "answer.txt")).read())
except Exception as error:
    json.dump({"score": None, "valid": False, "note": "unreadable answer: %s" % error}, open(out, "w"))
    raise SystemExit(0)
error = abs(value - answer)
json.dump({"score": ${higherIsBetter ? "10 - error" : "error"}, "valid": True}, open(out, "w"))
`,
  );
  // 5.3: silver in both directions (error 0.3; closeness 9.7).
  await put(join(dir, "solution", "solve.sh"), 'mkdir -p /home/submission && echo 5.3 > /home/submission/answer.txt\n', 0o755);
}

/** An image agent that searches everything it can reach for the private marker, tries to write the data, then submits. */
async function writePeekingAgent(root: string): Promise<string> {
  const dir = join(root, "peeker");
  await put(join(dir, "Dockerfile"), `FROM ${IMAGE}\nARG SUBMISSION_DIR\nRUN echo "build arg SUBMISSION_DIR=$SUBMISSION_DIR" > /build-arg.txt\nCOPY peek.sh /peek.sh\n`);
  await put(join(dir, "agent.toml"), 'name = "peeker"\nstart = "bash /peek.sh"\n[env]\nPEEK_MODE = "all"\n');
  await put(
    join(dir, "peek.sh"),
    `#!/bin/bash
out="$LOGS_DIR/peek.txt"
count() { # regex: files anywhere (not /proc, /sys, /dev), then every process's environ/cmdline, env, mounts
  local n=0
  n=$((n + $(grep -rlsa --devices=skip -e "$1" / --exclude-dir=proc --exclude-dir=sys --exclude-dir=dev 2>/dev/null | wc -l)))
  n=$((n + $(cat /proc/[0-9]*/environ /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' '\\n' | grep -ca -e "$1")))
  n=$((n + $(env | grep -c -e "$1")))
  n=$((n + $(cat /proc/mounts /proc/self/mountinfo | grep -c -e "$1")))
  echo "$n"
}
echo "private_hits=$(count 'PRIVMAR[K]-9d2e7a')" >> "$out"
echo "public_hits=$(count 'PUBMAR[K]-41c0b8')" >> "$out"
echo "private_files=$(find / -xdev \\( -name secret.txt -o -name answer.txt \\) -not -path '/home/submission/*' 2>/dev/null | wc -l)" >> "$out"
echo "private_dir=$([ -e /private ] && echo present || echo absent)" >> "$out"
w=denied
if echo x > /home/data/hint.txt 2>/dev/null; then w=allowed; fi
if rm -f /home/data/notes.txt 2>/dev/null && [ ! -e /home/data/notes.txt ]; then w=allowed; fi
if touch /home/data/new 2>/dev/null; then w=allowed; fi
echo "data_write=$w" >> "$out"
if mount -o remount,rw /home/data 2>/dev/null; then echo "remount=allowed" >> "$out"; else echo "remount=denied" >> "$out"; fi
cat /build-arg.txt >> "$out"
echo "env PEEK_MODE=$PEEK_MODE" >> "$out"
echo "user=$(id -u)" >> "$out"
echo hello > "$CODE_DIR/notes.txt"
cat /home/data/hint.txt > "$SUBMISSION_DIR/answer.txt"
`,
    0o755,
  );
  return dir;
}

function kv(text: string): Record<string, string> {
  return Object.fromEntries(text.trim().split("\n").map((line) => [line.slice(0, line.indexOf("=")), line.slice(line.indexOf("=") + 1)]));
}

describe.skipIf(!haveDocker)("competitions on Docker", () => {
  let root: { path: string; cleanup: () => Promise<void> };
  let runtime: DockerRuntime;
  let tasks: TaskSpec[];
  const runIds: string[] = [];

  function run(name: string, options: Partial<RunOptions> & Pick<RunOptions, "tasks" | "agent">) {
    const runId = `competition-test-${name}-${process.pid}`;
    runIds.push(runId);
    return startRun({ runId, runDir: join(root.path, "runs", runId), runtime, concurrency: 2, attempts: 1, defaultImage: IMAGE, ...options });
  }

  beforeAll(async () => {
    root = await tempDir("proctor-competition-docker-");
    runtime = new DockerRuntime();
    await writeCompetition(join(root.path, "comps"), "lower", false);
    await writeCompetition(join(root.path, "comps"), "higher", true);
    const loaded = await loadTasks([join(root.path, "comps")]);
    expect(loaded.errors.map((e) => e.message)).toEqual([]);
    tasks = loaded.tasks;
  });
  afterAll(async () => {
    removeRunContainers(runIds);
    await root.cleanup();
  });

  test("a peeking image agent finds no private data, cannot write the public data, and is graded with the private answers", async () => {
    const agent: AgentSpec = { kind: "image", dir: await writePeekingAgent(root.path) };
    const lower = tasks.filter((t) => t.id === "lower");
    const handle = run("peek", { tasks: lower, agent });
    const summary = await handle.done;
    expect(summary.trials).toMatchObject({ total: 1, passed: 1, errored: 0 });
    const [result] = await readResultsFile(handle.runDir);
    const peek = kv(await readFile(join(handle.runDir, "trials", "lower__1", "logs", "peek.txt"), "utf8"));
    // The search works (it finds the public marker in /home/data) and finds nothing private.
    expect(Number(peek.public_hits)).toBeGreaterThan(0);
    expect(peek).toMatchObject({ private_hits: "0", private_files: "0", private_dir: "absent", data_write: "denied", remount: "denied", user: "0" });
    expect(peek["build arg SUBMISSION_DIR"]).toBe("/home/submission");
    expect(peek["env PEEK_MODE"]).toBe("all");
    expect(await readFile(join(lower[0]?.competition?.publicDir ?? "", "hint.txt"), "utf8")).toBe("5\n");
    // The grader saw the private answer (its assert) and scored the exact submission: gold.
    expect(result).toMatchObject({ status: "passed", reward: 0, error: null, competition: { valid: true, score: 0, medal: "gold", aboveMedian: true } });
    expect(await readFile(join(handle.runDir, "trials", "lower__1", "code", "notes.txt"), "utf8")).toBe("hello\n");
    expect(containersOf(handle.runId)).toEqual([]);
  });

  test("medals follow higher_is_better in both directions", async () => {
    const handle = run("oracle", { tasks, agent: { kind: "oracle" } });
    const summary = await handle.done;
    expect(summary.trials).toMatchObject({ total: 2, passed: 2, errored: 0 });
    const results = byTask(await readResultsFile(handle.runDir));
    expect(results.lower?.competition).toMatchObject({ higherIsBetter: false, valid: true, medal: "silver", aboveMedian: true });
    expect(results.lower?.reward).toBeCloseTo(0.3, 6);
    expect(results.higher?.competition).toMatchObject({ higherIsBetter: true, valid: true, medal: "silver", aboveMedian: true });
    expect(results.higher?.reward).toBeCloseTo(9.7, 6);
  });

  test("an invalid or missing submission is scored invalid, not an error of the harness", async () => {
    const garbage = await writeAgent(root.path, "garbage", 'mkdir -p /home/submission && echo not-a-number > /home/submission/answer.txt');
    const lower = tasks.filter((t) => t.id === "lower");
    const bad = run("garbage", { tasks: lower, agent: { kind: "code", dir: garbage } });
    await bad.done;
    const [invalid] = await readResultsFile(bad.runDir);
    expect(invalid).toMatchObject({ status: "failed", reward: null, error: null, competition: { valid: false, score: null, medal: null } });
    expect(invalid?.competition?.note).toContain("unreadable answer");
    const none = run("nop", { tasks: lower, agent: { kind: "nop" } });
    await none.done;
    const [missing] = await readResultsFile(none.runDir);
    expect(missing).toMatchObject({ status: "failed", reward: null, error: null, competition: { valid: false } });
    expect(missing?.competition?.note).toContain("no submission");
  });

  test("outputs are collected under a cap; metadata.json and submission.jsonl list every competition trial", async () => {
    const big = await writeAgent(
      root.path,
      "big",
      "mkdir -p /home/submission /home/code /home/logs && echo 5 > /home/submission/answer.txt && echo ran > /home/logs/log.txt && head -c 3000000 /dev/zero > /home/code/big.bin",
    );
    const handle = run("capped", { tasks, agent: { kind: "code", dir: big }, attempts: 2, limits: { logBytes: 256 * 1024 } });
    const summary = await handle.done;
    expect(summary.trials).toMatchObject({ total: 4, passed: 4 });
    const trial = join(handle.runDir, "trials", "higher__2");
    expect(await readFile(join(trial, "submission", "answer.txt"), "utf8")).toBe("5\n");
    expect(await readFile(join(trial, "logs", "log.txt"), "utf8")).toBe("ran\n");
    expect((await stat(join(trial, "code", "big.bin"))).size).toBeLessThanOrEqual(256 * 1024);
    expect(existsSync(join(trial, "code.TRUNCATED"))).toBe(true);

    const metadata = JSON.parse(await readFile(join(handle.runDir, "metadata.json"), "utf8")) as Record<string, unknown>;
    expect(metadata).toMatchObject({ run_id: handle.runId, agent: expect.stringContaining("code:") });
    expect(typeof metadata.created_at).toBe("string");
    expect((metadata.runs as string[]).sort()).toEqual(["trials/higher__1", "trials/higher__2", "trials/lower__1", "trials/lower__2"]);
    const lines = (await readFile(join(handle.runDir, "submission.jsonl"), "utf8")).trim().split("\n").map((l) => JSON.parse(l) as Record<string, string>);
    expect(lines).toHaveLength(4);
    for (const line of lines) {
      expect(Object.keys(line).sort()).toEqual(["code_path", "competition_id", "logs_path", "submission_path"]);
      expect(["lower", "higher"]).toContain(line.competition_id);
      for (const key of ["submission_path", "logs_path", "code_path"]) expect(existsSync(line[key] ?? "")).toBe(true);
    }
  });

  test("storage_mb is enforced while the agent runs", async () => {
    await writeCompetition(join(root.path, "disk"), "small-disk", false, "[environment]\nstorage_mb = 20\n");
    const loaded = await loadTasks([join(root.path, "disk")]);
    const writer = await writeAgent(root.path, "writer", "head -c 200000000 /dev/zero > /tmp/fill; sleep 60; echo 5 > /home/submission/answer.txt");
    const handle = run("disk", { tasks: loaded.tasks, agent: { kind: "code", dir: writer } });
    await handle.done;
    const [result] = await readResultsFile(handle.runDir);
    // Stopped at the limit, before it could submit.
    expect(result).toMatchObject({ status: "error", error: { kind: "agent", message: expect.stringContaining("disk limit exceeded") }, competition: { valid: false } });
  });

  test("privileged without consent, an unknown runtime and GPUs on a GPU-less daemon are refused before any trial", async () => {
    const lower = tasks.filter((t) => t.id === "lower");
    const cases: [string, RunOptions["container"], RegExp][] = [
      ["privileged", { privileged: true }, /I_ACCEPT_RUNNING_PRIVILEGED_CONTAINERS=True/],
      ["runtime", { runtime: "no-such-runtime" }, /runtime "no-such-runtime" is not known to the Docker daemon \(docker info lists: .*runc/],
      ["gpus", { gpus: -1 }, /all GPUs requested .* no GPU support/],
    ];
    const saved = process.env.I_ACCEPT_RUNNING_PRIVILEGED_CONTAINERS;
    delete process.env.I_ACCEPT_RUNNING_PRIVILEGED_CONTAINERS;
    try {
      for (const [name, container, message] of cases) {
        const handle = run(`refuse-${name}`, { tasks: lower, agent: { kind: "oracle" }, ...(container ? { container } : {}) });
        await expect(handle.done).rejects.toThrow(message);
        expect(existsSync(join(handle.runDir, "results.jsonl"))).toBe(false);
        expect(containersOf(handle.runId)).toEqual([]);
      }
      // A task's own gpus are refused the same way.
      const [first] = lower;
      if (!first) throw new Error("the lower competition did not load");
      const gpuTask = { ...first, environment: { ...first.environment, gpus: 1 } };
      await expect(run("refuse-task-gpus", { tasks: [gpuTask], agent: { kind: "oracle" } }).done).rejects.toThrow(/1 GPU\(s\) requested/);
    } finally {
      if (saved !== undefined) process.env.I_ACCEPT_RUNNING_PRIVILEGED_CONTAINERS = saved;
    }
  });

  test("an image agent on a task that is not a competition is refused before any trial", async () => {
    const native = join(root.path, "native", "plain");
    await put(join(native, "instruction.md"), "do nothing\n");
    await put(join(native, "tests", "test.sh"), "echo 1 > /logs/verifier/reward.txt\n", 0o755);
    const loaded = await loadTasks([native]);
    const handle = run("image-native", { tasks: loaded.tasks, agent: { kind: "image", dir: await writePeekingAgent(join(root.path, "again")) } });
    await expect(handle.done).rejects.toThrow(/runs competition tasks only/);
    expect(existsSync(join(handle.runDir, "results.jsonl"))).toBe(false);
  });
});
