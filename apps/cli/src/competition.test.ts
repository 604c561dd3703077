import { spawnSync } from "node:child_process";
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { cp, mkdtemp, readFile, readdir, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { dockerTestGate } from "@proctor/sandbox-docker";
import { describeTrials, proctor, repoRoot } from "./test-support";

// The "done when": the example competition with the dummy agent image, then the report.
const haveDocker = await dockerTestGate();
/** Whether this Docker daemon can start a privileged container at all (a nested one may lack capabilities to hand out). */
const privilegedRuns = haveDocker && spawnSync("docker", ["run", "--rm", "--privileged", "--label", "proctor.test=privileged-probe", "proctor/base:bookworm", "true"]).status === 0;
let out: string;

beforeAll(async () => {
  out = await mkdtemp(join(tmpdir(), "proctor-competition-cli-"));
});
afterAll(async () => {
  await rm(out, { recursive: true, force: true });
});

describe.skipIf(!haveDocker)("proctor run on competitions (Docker)", () => {
  test("the dummy agent image runs the example competition; the report shows score and medal", async () => {
    const run = await proctor(["run", "examples/competitions", "--agent", "image:examples/agent-images/dummy", "-o", out, "--run-id", "dummy", "-k", "2"]);
    expect(run.code, run.stderr).toBe(0);
    const runDir = join(out, "dummy");
    const trial = join(runDir, "trials", "tiny-regression__1");
    // When the agent's log is missing, say what the trial did instead (its result and agent output).
    const checks = await readFile(join(trial, "logs", "checks.txt"), "utf8").catch(async (error: unknown) => {
      const seen = async (file: string) => readFile(join(trial, file), "utf8").catch((e: Error) => e.message);
      throw new Error(`${(error as Error).message}\nfiles: ${(await readdir(trial, { recursive: true }).catch(() => [])).join(" ")}\nresult.json: ${await seen("result.json")}\nagent stdout: ${await seen("agent/stdout.txt")}\nagent stderr: ${await seen("agent/stderr.txt")}\nrun stderr: ${run.stderr}`);
    });
    for (const check of ["data_present", "data_read_only", "private_absent", "submission_writable"]) expect(checks).toMatch(new RegExp(`^${check}\\s+ok\\s`, "m"));
    expect(checks).toMatch(/^gpu_visible\s+info\s+no GPU visible/m);
    const report = await proctor(["report", runDir]);
    expect(report.code, report.stderr).toBe(0);
    expect(report.stdout).toMatch(/Competitions \(1\)/);
    expect(report.stdout).toMatch(/tiny-regression\s+rmse \(lower is better\)\s+2\/2\s+17\.5867/);
    expect(report.stdout).toMatch(/any medal\s+0\.0% ± 0\.0% SEM over 2 seeds/);
    const oracle = await proctor(["run", "examples/competitions", "-a", "oracle", "-o", out, "--run-id", "oracle", "--json"]);
    expect(oracle.code, oracle.stderr).toBe(0);
    const oracleReport = await proctor(["report", join(out, "oracle"), "--format", "json"]);
    expect(JSON.parse(oracleReport.stdout).competitions.rows[0], `${describeTrials(join(out, "oracle"))}\n${oracleReport.stdout.slice(0, 2000)}`).toMatchObject({ competitionId: "tiny-regression", medals: { gold: 1 } });
  });

  test("--container-config: a bad file, privileged without consent and an unknown runtime exit 2 before any trial", async () => {
    const bad = join(out, "bad.json");
    await writeFile(bad, '{"mem_limit": "lots"}');
    const r1 = await proctor(["run", "examples/competitions", "-a", "nop", "-o", out, "--container-config", bad]);
    expect(r1.code).toBe(2);
    expect(r1.stderr).toContain(`--container-config ${bad}: "mem_limit" must be a size`);
    const privileged = join(out, "privileged.json");
    await writeFile(privileged, '{"privileged": true}');
    const r2 = await proctor(["run", "examples/competitions", "-a", "nop", "-o", out, "--run-id", "priv", "--container-config", privileged], { env: { I_ACCEPT_RUNNING_PRIVILEGED_CONTAINERS: "" } });
    expect(r2.code).toBe(2);
    expect(r2.stderr).toContain("I_ACCEPT_RUNNING_PRIVILEGED_CONTAINERS=True");
    const runtime = join(out, "runtime.json");
    await writeFile(runtime, '{"runtime": "sysbox-runc", "shm_size": "1g"}');
    const r3 = await proctor(["run", "examples/competitions", "-a", "nop", "-o", out, "--run-id", "rt", "--container-config", runtime]);
    expect(r3.code).toBe(2);
    expect(r3.stderr).toContain('runtime "sysbox-runc" is not known to the Docker daemon');
  });

  test("--container-config: MLE-bench's own default.json (mem_limit null) runs; a docker-py argument Proctor does not apply is refused by name", async () => {
    const mle = join(out, "default.json");
    await writeFile(mle, '{\n    "mem_limit": null,\n    "shm_size": "4G",\n    "nano_cpus": 4e9,\n    "runtime": "runc"\n}\n');
    const run = await proctor(["run", "examples/competitions", "--agent", "image:examples/agent-images/dummy", "-o", out, "--run-id", "mle-default", "--container-config", mle]);
    expect(run.code, run.stderr).toBe(0);
    const stored = JSON.parse(await readFile(join(out, "mle-default", "run.json"), "utf8")) as { container?: unknown };
    expect(stored.container).toEqual({ shmSizeBytes: 4 * 1024 ** 3, runtime: "runc" });
    const hostNet = join(out, "host-net.json");
    await writeFile(hostNet, '{"network_mode": "host", "mem_limit": "2g"}');
    const refused = await proctor(["run", "examples/competitions", "-a", "nop", "-o", out, "--run-id", "host-net", "--container-config", hostNet]);
    expect(refused.code).toBe(2);
    expect(refused.stderr).toContain(`--container-config ${hostNet}: "network_mode" is not taken from the container config: a sandbox's network follows the task`);
  });

  test("agent.toml privileged = true is gated like the container config's flag: refused before any trial without consent, privileged with it", async () => {
    const agent = join(out, "privileged-agent");
    await cp(join(repoRoot, "examples", "agent-images", "dummy"), agent, { recursive: true });
    // The effective capabilities go to the logs: a privileged container has CAP_SYS_ADMIN (bit 21).
    await writeFile(join(agent, "agent.toml"), 'name = "dind"\nstart = "grep CapEff /proc/self/status > /home/logs/caps.txt; bash /home/agent/start.sh"\nprivileged = true\n\n[env]\nDUMMY_SUBMIT = "sample"\n');
    const refused = await proctor(["run", "examples/competitions", "--agent", `image:${agent}`, "-o", out, "--run-id", "dind-refused"], { env: { I_ACCEPT_RUNNING_PRIVILEGED_CONTAINERS: "" } });
    expect(refused.code).toBe(2);
    expect(refused.stderr).toContain("privileged containers are refused unless I_ACCEPT_RUNNING_PRIVILEGED_CONTAINERS=True");
    expect(await readdir(join(out, "dind-refused", "trials")).catch(() => [])).toEqual([]);
    const run = await proctor(["run", "examples/competitions", "--agent", `image:${agent}`, "-o", out, "--run-id", "dind"], { env: { I_ACCEPT_RUNNING_PRIVILEGED_CONTAINERS: "True" } });
    expect(run.code, run.stderr).toBe(0);
    const [result] = (await readFile(join(out, "dind", "results.jsonl"), "utf8")).trim().split("\n").map((l) => JSON.parse(l) as { error: { message: string } | null });
    if (!privilegedRuns) {
      // A daemon whose own capabilities are short (a nested engine) cannot start any privileged
      // container: the trial asked it for one, and the daemon's refusal is the trial's error.
      expect(result?.error?.message).toContain("unable to apply caps");
      return;
    }
    const caps = await readFile(join(out, "dind", "trials", "tiny-regression__1", "logs", "caps.txt"), "utf8");
    const effective = BigInt(`0x${/CapEff:\s*([0-9a-f]+)/.exec(caps)?.[1] ?? "0"}`);
    expect(effective & (1n << 21n)).not.toBe(0n);
  });

  test("--agent image: with a bad agent dir is a usage error naming the file", async () => {
    const r = await proctor(["run", "examples/competitions", "--agent", "image:examples/tasks", "-o", out]);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/--agent image:examples\/tasks: .*has no Dockerfile/);
  });
});
