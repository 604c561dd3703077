import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { existsSync } from "node:fs";
import { cp, mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { dockerTestGate } from "@proctor/sandbox-docker";
import { finish, proctor, repoRoot, spawnProctor } from "./test-support";

// The run directory as a user meets it: one writer at a time, a resume that repeats the run it
// continues (its task selection too), no directory left by a run that never started, and an
// exit code CI can act on (--fail-on).

const examples = join(repoRoot, "examples/tasks");
let out: string;

beforeAll(async () => {
  out = await mkdtemp(join(tmpdir(), "proctor-run-dir-"));
});
afterAll(async () => {
  await rm(out, { recursive: true, force: true });
});

/** Copies of the greeting-file example named `ids`, whose solution first runs `before`. */
async function tasksFrom(dir: string, ids: string[], before: string): Promise<string> {
  for (const id of ids) {
    await cp(join(examples, "greeting-file"), join(dir, id), { recursive: true });
    const solve = join(dir, id, "solution/solve.sh");
    const [shebang, ...rest] = (await readFile(solve, "utf8")).split("\n");
    await writeFile(solve, [shebang, before, ...rest].join("\n"));
  }
  return dir;
}

/** A native task whose files are given inline (paths relative to the task dir). */
async function task(dir: string, files: Record<string, string>): Promise<void> {
  for (const [path, text] of Object.entries(files)) {
    await mkdir(join(dir, path, ".."), { recursive: true });
    await writeFile(join(dir, path), text);
  }
}

async function results(runDir: string): Promise<{ trialId: string; taskId: string }[]> {
  return (await readFile(join(runDir, "results.jsonl"), "utf8")).trim().split("\n").filter(Boolean).map((l) => JSON.parse(l));
}

describe("one writer per run directory (local runtime)", () => {
  test("a second run or --resume of a run still going is refused with its pid, exit 2; after a kill -9, --resume finishes it with every trial once", async () => {
    // The trials wait while the hold file exists: the first run is surely still going while the others try.
    const hold = join(out, "hold");
    await writeFile(hold, "");
    const tasks = await tasksFrom(join(out, "lock-tasks"), ["lock-a", "lock-b", "lock-c"], `while [ -e ${hold} ]; do sleep 0.2; done`);
    const runDir = join(out, "live");
    const first = spawnProctor(["run", tasks, "--runtime", "local", "-n", "1", "-o", out, "--run-id", "live"]);
    let started: () => void = () => undefined;
    const running = new Promise<void>((resolve) => (started = resolve));
    const firstDone = finish(first, (text) => {
      if (text.includes("run directory:")) started();
    });
    try {
      await running;
      // Each of these must answer at once: on a run that is still going there is nothing to wait for.
      const resumed = await finish(spawnProctor(["run", "--resume", runDir]), undefined, 120_000);
      expect(resumed.code, resumed.stderr).toBe(2);
      expect(resumed.stderr.trim().split("\n"), resumed.stderr).toEqual([expect.stringContaining(`proctor process ${first.pid} is writing it`)]);
      const again = await finish(spawnProctor(["run", tasks, "--runtime", "local", "-o", out, "--run-id", "live"]), undefined, 120_000);
      expect(again.code, again.stderr).toBe(2);
      expect(again.stderr.trim().split("\n").at(-1)).toContain(`proctor process ${first.pid} is writing it`);
    } finally {
      first.kill("SIGKILL");
    }
    expect((await firstDone).code).toBeNull();
    expect(existsSync(join(runDir, "run.lock"))).toBe(true);
    await rm(hold);
    const resumed = await proctor(["run", "--resume", runDir]);
    expect(resumed.code, resumed.stderr).toBe(0);
    const all = await results(runDir);
    expect(all.map((r) => r.trialId).sort()).toEqual(["lock-a__1", "lock-b__1", "lock-c__1"]);
    expect(existsSync(join(runDir, "run.lock"))).toBe(false);
  });
});

describe("a run refused before it starts leaves no run directory (local runtime)", () => {
  test("a wrong agent, an unset key variable, a missing --container-config, a run the runtime cannot honour (from an archive): exit 2, nothing under -o", async () => {
    const root = join(out, "refused-root");
    const refusals: [string[], string][] = [
      [[examples, "--agent", "no-such-agent"], "--agent no-such-agent: no such agent, and no such directory"],
      [[examples, "--agent", "llm", "--model", "m", "--api-key-env", "PROCTOR_TEST_UNSET_KEY"], "$PROCTOR_TEST_UNSET_KEY is not set"],
      [[examples, "--container-config", join(out, "no-such.json")], `--container-config ${join(out, "no-such.json")}: cannot be read`],
      // The archive is extracted into the run directory before the runtime refuses the run.
      [[join(repoRoot, "examples/submission.tar.gz"), "--isolate-verifier"], "cannot start the run: 4 task(s) need strict verifier isolation"],
    ];
    for (const [args, message] of refusals) {
      const r = await proctor(["run", ...args, "--runtime", "local", "-o", root, "--run-id", "refused"]);
      expect(r.code, r.stderr).toBe(2);
      expect(r.stderr).toContain(message);
      expect(existsSync(root), `${args.join(" ")} left ${root}`).toBe(false);
    }
  });
});

describe("--fail-on (local runtime)", () => {
  test("3 of 4 trials in verifier error: exit 0 by default and with never, 5 with errors or failures; a failed trial: 5 only with failures", async () => {
    const tasks = join(out, "ci-tasks");
    await cp(join(examples, "greeting-file"), join(tasks, "ok"), { recursive: true });
    for (const id of ["no-reward-1", "no-reward-2", "no-reward-3"]) {
      await task(join(tasks, id), { "instruction.md": "Do nothing.", "tests/test.sh": "echo checking\nexit 0\n", "solution/solve.sh": "true\n" });
    }
    await task(join(tasks, "wrong"), {
      "instruction.md": "Do nothing.",
      "tests/test.sh": 'echo 0 > "${PROCTOR_LOGS_DIR:-/logs}/verifier/reward.txt"\n',
      "solution/solve.sh": "true\n",
    });
    const help = await proctor(["run", "--help"]);
    expect(help.stdout).toMatch(/--fail-on <what>[\s\S]*errors[\s\S]*failures[\s\S]*never/);

    const runDir = join(out, "ci");
    const plain = await proctor(["run", tasks, "-x", "wrong", "--runtime", "local", "-o", out, "--run-id", "ci"]);
    expect(plain.code, plain.stderr).toBe(0);
    expect(plain.stdout).toMatch(/errors\s+verifier 3/);
    // A resume of the finished run reruns nothing and judges all its trials.
    const errors = await proctor(["run", "--resume", runDir, "--fail-on", "errors"]);
    expect(errors.code, errors.stderr).toBe(5);
    expect(errors.stderr).toContain("--fail-on errors: 3 of 4 trials errored");
    expect((await proctor(["run", "--resume", runDir, "--fail-on", "failures"])).code).toBe(5);
    expect((await proctor(["run", "--resume", runDir, "--fail-on", "never"])).code).toBe(0);
    const bad = await proctor(["run", "--resume", runDir, "--fail-on", "sometimes"]);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain("--fail-on");

    const failing = await proctor(["run", tasks, "-i", "ok", "-i", "wrong", "--runtime", "local", "-o", out, "--run-id", "ci-fail", "--fail-on", "errors", "--json"]);
    expect(failing.code, failing.stderr).toBe(0);
    expect(JSON.parse(failing.stdout).trials).toMatchObject({ total: 2, passed: 1, failed: 1, errored: 0 });
    const failures = await proctor(["run", "--resume", join(out, "ci-fail"), "--fail-on", "failures"]);
    expect(failures.code, failures.stderr).toBe(5);
    expect(failures.stderr).toContain("--fail-on failures: 1 of 2 trials did not pass");
  });
});

describe("--resume --retry (local runtime)", () => {
  test("a run with one errored and one failed trial, resumed with --retry errors, runs only the errored one again; its new line replaces the old", async () => {
    const tasks = join(out, "retry-tasks");
    const marker = join(out, "retry-marker");
    await task(join(tasks, "wrong"), { "instruction.md": "Do nothing.", "tests/test.sh": 'echo 0 > "${PROCTOR_LOGS_DIR:-/logs}/verifier/reward.txt"\n', "solution/solve.sh": "true\n" });
    // No reward the first time (a verifier error); a pass once the marker is there.
    await task(join(tasks, "flaky"), {
      "instruction.md": "Do nothing.",
      "tests/test.sh": `if [ -e ${marker} ]; then echo 1 > "\${PROCTOR_LOGS_DIR:-/logs}/verifier/reward.txt"; else touch ${marker}; fi\n`,
      "solution/solve.sh": "true\n",
    });
    const runDir = join(out, "retry");
    const first = await proctor(["run", tasks, "--runtime", "local", "-o", out, "--run-id", "retry", "--json"]);
    expect(first.code, first.stderr).toBe(0);
    expect(JSON.parse(first.stdout).trials).toMatchObject({ total: 2, passed: 0, failed: 1, errored: 1 });
    const wrongBefore = (await results(runDir)).find((r) => r.taskId === "wrong");

    expect((await proctor(["run", tasks, "--retry", "errors", "--runtime", "local", "-o", out])).stderr).toContain("--retry goes with --resume RUN_DIR");
    const again = await proctor(["run", "--resume", runDir, "--retry", "errors", "--json"]);
    expect(again.code, again.stderr).toBe(0);
    expect(again.stderr).toContain("--retry errors: running 1 finished trial(s) again: flaky__1");
    expect(JSON.parse(again.stdout).trials).toMatchObject({ planned: 2, total: 2, passed: 1, failed: 1, errored: 0 });
    const lines = await results(runDir);
    expect(lines).toHaveLength(3);
    expect(lines.filter((r) => r.trialId === "flaky__1")).toHaveLength(2);
    expect(lines.filter((r) => r.trialId === "wrong__1")).toEqual([wrongBefore]);
    // Reports read the last line per trial: the same counts as the summary.
    const report = await proctor(["report", runDir, "--json"]);
    expect(JSON.parse(report.stdout).trials).toMatchObject({ total: 2, passed: 1, failed: 1, errored: 0 });
  });
});

const docker = await dockerTestGate();

describe.skipIf(!docker)("resuming a filtered run (Docker)", () => {
  test("Ctrl-C on a run picked with -i, -x, --tasks-file and -k: the printed resume command finishes it; a changed selection is still refused", async () => {
    const tasks = await tasksFrom(join(out, "filtered-tasks"), ["slow-1", "slow-2", "slow-3", "other"], "sleep 2");
    const list = join(out, "picked.txt");
    await writeFile(list, "slow-1\nslow-2\nslow-3\n");
    let sent = false;
    const r = await proctor(["run", tasks, "--tasks-file", list, "-i", "slow-*", "-x", "slow-3", "-k", "2", "-n", "1", "--runtime", "docker", "-o", out, "--run-id", "filtered"], {
      onStderr: (text, child) => {
        if (!sent && /\[1\/4\]/.test(text)) {
          sent = true;
          child.kill("SIGINT");
        }
      },
    });
    expect(r.code, r.stderr).toBe(130);
    const hint = /interrupted: resume with {2}proctor (.+)\n/.exec(r.stderr)?.[1];
    expect(hint, r.stderr).toBe(`run --resume ${join(out, "filtered")}`);
    const finished = await results(join(out, "filtered"));
    expect(finished.length).toBeLessThan(4);

    const resumed = await proctor((hint ?? "").split(" "));
    expect(resumed.code, resumed.stderr).toBe(0);
    const all = await results(join(out, "filtered"));
    expect(all.map((x) => x.trialId).sort()).toEqual(["slow-1__1", "slow-1__2", "slow-2__1", "slow-2__2"]);
    expect(all.slice(0, finished.length)).toEqual(finished);

    // The tasks file now picks fewer tasks: that run is not this one.
    await writeFile(list, "slow-1\n");
    const changed = await proctor((hint ?? "").split(" "));
    expect(changed.code).toBe(2);
    expect(changed.stderr).toContain("tasks removed: slow-2");
  });
});
