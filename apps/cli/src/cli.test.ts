import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { execFileSync } from "node:child_process";
import { mkdtemp, readFile, readdir, rm, mkdir, writeFile, cp } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { dockerTestGate } from "@proctor/sandbox-docker";
import { proctor, repoRoot as repo } from "./test-support";

const examples = join(repo, "examples/tasks");
const exampleIds = (await readdir(examples)).sort();

let out: string;
beforeAll(async () => {
  out = await mkdtemp(join(tmpdir(), "proctor-cli-test-"));
});
afterAll(async () => {
  await rm(out, { recursive: true, force: true });
});

describe("proctor usage", () => {
  test("--version and --help exit 0", async () => {
    const v = await proctor(["--version"]);
    expect(v.code).toBe(0);
    expect(v.stdout.trim()).toMatch(/^\d+\.\d+\.\d+$/);
    const h = await proctor(["run", "--help"]);
    expect(h.code).toBe(0);
    expect(h.stdout).toContain("--concurrency");
  });

  test("bad flags and missing sources exit 2 with a message naming the problem", async () => {
    const n = await proctor(["run", examples, "-n", "0"]);
    expect(n.code).toBe(2);
    expect(n.stderr).toContain("--concurrency must be a whole number >= 1");
    const missing = await proctor(["run", join(out, "nope"), "-o", out]);
    expect(missing.code).toBe(2);
    expect(missing.stderr).toContain("no such file or directory");
    const rt = await proctor(["run", examples, "--runtime", "vm"]);
    expect(rt.code).toBe(2);
  });

  test("an invalid task is reported with its file and field, exit 2", async () => {
    const dir = join(out, "bad-tasks", "broken");
    await mkdir(join(dir, "tests"), { recursive: true });
    await writeFile(join(dir, "instruction.md"), "x");
    await writeFile(join(dir, "tests/test.sh"), "exit 0");
    await writeFile(join(dir, "task.toml"), '[agent]\ntimeout_sec = "abc"\n');
    const r = await proctor(["run", join(out, "bad-tasks"), "-o", out, "--runtime", "local"]);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/task\.toml: \[agent\]\.timeout_sec must be a positive number, got "abc"/);
  });
});

async function results(runDir: string) {
  return (await readFile(join(runDir, "results.jsonl"), "utf8")).trim().split("\n").filter(Boolean).map((l) => JSON.parse(l));
}

describe("proctor run on the local runtime", () => {
  test("oracle passes every example, --json prints summary.json, report repeats the table", async () => {
    const r = await proctor(["run", examples, "--runtime", "local", "-o", out, "--run-id", "oracle-local", "--json"]);
    expect(r.code, r.stderr).toBe(0);
    const summary = JSON.parse(r.stdout);
    expect(summary.trials).toMatchObject({ total: exampleIds.length, passed: exampleIds.length, errored: 0 });
    expect(summary.passRate).toBe(1);
    expect(summary.rates.passRate.denominator).toBe(exampleIds.length);
    expect(Object.keys(summary.byCategory).length).toBeGreaterThan(1);
    const onDisk = JSON.parse(await readFile(join(out, "oracle-local", "summary.json"), "utf8"));
    // stdout is summary.json plus where the run is.
    const { runDir, ...printed } = summary;
    expect(runDir).toBe(join(out, "oracle-local"));
    expect(onDisk).toEqual(printed);
    expect((await results(join(out, "oracle-local"))).map((x) => x.taskId).sort()).toEqual(exampleIds);
    const report = await proctor(["report", join(out, "oracle-local")]);
    expect(report.code).toBe(0);
    expect(report.stdout).toMatch(/all\s+4\s+4\s+0\s+0\s+100\.0%/);
  });

  test("nop fails every example", async () => {
    const r = await proctor(["run", examples, "--runtime", "local", "-o", out, "-a", "nop", "--json"]);
    expect(r.code, r.stderr).toBe(0);
    const summary = JSON.parse(r.stdout);
    expect(summary.trials).toMatchObject({ total: exampleIds.length, passed: 0, failed: exampleIds.length });
    expect(summary.meanReward).toBe(0);
  });

  test("--include, --exclude and --attempts select trials and report pass@k", async () => {
    const r = await proctor(["run", examples, "--runtime", "local", "-o", out, "-i", "g*", "-x", "git-*", "-k", "2", "--json"]);
    expect(r.code, r.stderr).toBe(0);
    const summary = JSON.parse(r.stdout);
    const picked = exampleIds.filter((id) => id.startsWith("g") && !id.startsWith("git-"));
    expect(summary.trials.total).toBe(picked.length * 2);
    expect(summary.passAtK).toEqual({ "1": 1, "2": 1 });
  });

  test("a repeated run id is refused; --resume of a finished run reruns nothing", async () => {
    const again = await proctor(["run", examples, "--runtime", "local", "-o", out, "--run-id", "oracle-local"]);
    expect(again.code).toBe(2);
    expect(again.stderr).toContain("--resume");
    const before = await results(join(out, "oracle-local"));
    const resumed = await proctor(["run", "--resume", join(out, "oracle-local"), "--json"]);
    expect(resumed.code, resumed.stderr).toBe(0);
    expect(await results(join(out, "oracle-local"))).toEqual(before);
    expect(JSON.parse(resumed.stdout).trials.passed).toBe(exampleIds.length);
  });

  test("--resume refuses a changed config", async () => {
    const r = await proctor(["run", examples, "--resume", join(out, "oracle-local"), "-a", "nop"]);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/agent/i);
  });
});

const docker = await dockerTestGate();

describe.skipIf(!docker)("proctor run on Docker", () => {
  test("oracle passes and nop scores 0 on every example with -n 4", async () => {
    const oracle = await proctor(["run", examples, "--agent", "oracle", "--runtime", "docker", "-n", "4", "-o", out, "--json"]);
    expect(oracle.code, oracle.stderr).toBe(0);
    expect(JSON.parse(oracle.stdout).trials).toMatchObject({ total: exampleIds.length, passed: exampleIds.length });
    const nop = await proctor(["run", examples, "--agent", "nop", "--runtime", "docker", "-n", "4", "-o", out, "--json"]);
    expect(nop.code, nop.stderr).toBe(0);
    expect(JSON.parse(nop.stdout)).toMatchObject({ passRate: 0, meanReward: 0 });
  });

  test("SIGINT stops the run, leaves no container, exits 130, and --resume finishes it", async () => {
    // Slow tasks so the interrupt lands mid-run: each sleeps before solving.
    const tasks = join(out, "slow-tasks");
    for (const id of ["slow-a", "slow-b", "slow-c", "slow-d"]) {
      await cp(join(examples, exampleIds[0] ?? "missing"), join(tasks, id), { recursive: true });
      const solve = join(tasks, id, "solution/solve.sh");
      await writeFile(solve, `sleep 2\n${await readFile(solve, "utf8")}`);
    }
    const runId = "sigint-docker";
    let sent = false;
    const r = await proctor(["run", tasks, "--runtime", "docker", "-n", "2", "-o", out, "--run-id", runId], {
      onStderr: (text, child) => {
        if (!sent && /\[1\/4\]/.test(text)) {
          sent = true;
          child.kill("SIGINT");
        }
      },
    });
    expect(r.code, r.stderr).toBe(130);
    expect(r.stderr).toContain("--resume");
    const left = execFileSync("docker", ["ps", "-aq", "--filter", `label=proctor.run=${runId}`]).toString().trim();
    expect(left).toBe("");
    const finished = await results(join(out, runId));
    expect(finished.length).toBeGreaterThanOrEqual(1);
    expect(finished.length).toBeLessThan(4);
    const resumed = await proctor(["run", "--resume", join(out, runId), "--json"]);
    expect(resumed.code, resumed.stderr).toBe(0);
    const all = await results(join(out, runId));
    expect(all.length).toBe(4);
    expect(new Set(all.map((x) => x.trialId)).size).toBe(4);
    expect(all.slice(0, finished.length)).toEqual(finished);
  });

  test("kill -9 mid-run: its containers go away on their own within 60 s; --resume then completes without rerunning finished trials", async () => {
    const tasks = join(out, "slow-tasks-9");
    for (const id of ["k9-a", "k9-b", "k9-c", "k9-d"]) {
      await cp(join(examples, exampleIds[0] ?? "missing"), join(tasks, id), { recursive: true });
      const solve = join(tasks, id, "solution/solve.sh");
      await writeFile(solve, `sleep 2\n${await readFile(solve, "utf8")}`);
    }
    const runId = "kill9-docker";
    let sent = false;
    const r = await proctor(["run", tasks, "--runtime", "docker", "-n", "2", "-o", out, "--run-id", runId], {
      onStderr: (text, child) => {
        if (!sent && /\[1\/4\]/.test(text)) {
          sent = true;
          child.kill("SIGKILL");
        }
      },
    });
    expect(r.code).toBeNull();
    const killedAt = Date.now();
    const containers = () => execFileSync("docker", ["ps", "-aq", "--filter", `label=proctor.run=${runId}`]).toString().trim();
    // Nothing else runs: the dead CLI's watchdog removes what it left.
    while (containers() !== "" && Date.now() - killedAt < 60_000) await new Promise((resolve) => setTimeout(resolve, 500));
    expect(containers()).toBe("");
    const finished = await results(join(out, runId));
    expect(finished.length).toBeGreaterThanOrEqual(1);
    expect(finished.length).toBeLessThan(4);
    const resumed = await proctor(["run", "--resume", join(out, runId), "--json"]);
    expect(resumed.code, resumed.stderr).toBe(0);
    const all = await results(join(out, runId));
    expect(all.length).toBe(4);
    expect(new Set(all.map((x) => x.trialId)).size).toBe(4);
    expect(all.slice(0, finished.length)).toEqual(finished);
    const left = execFileSync("docker", ["ps", "-aq", "--filter", `label=proctor.run=${runId}`]).toString().trim();
    expect(left).toBe("");
  });
});
