/**
 * bench/trial-overhead: N trivial trials (instant agent and verifier, prebuilt image) through
 * `proctor run -n P` vs the same trials through a plain docker-CLI pipeline at the same
 * parallelism (run -d, exec agent, cp tests, exec verifier, cp reward, rm -f), in one run.
 *
 *   node --conditions=@proctor/source --import tsx bench/trial-overhead/index.ts [--trials 100] [--parallel 8]
 */
import { execFile, spawn } from "node:child_process";
import { mkdtemp, mkdir, rm, writeFile, chmod } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { parseArgs, promisify } from "node:util";

const run = promisify(execFile);
const { values } = parseArgs({ options: { trials: { type: "string", default: "100" }, parallel: { type: "string", default: "8" }, image: { type: "string", default: "proctor/base:bookworm" } } });
const trials = Number(values.trials);
const parallel = Number(values.parallel);
const image = values.image;
const repo = resolve(import.meta.dirname, "../..");

async function makeTasks(dir: string): Promise<void> {
  for (let i = 0; i < trials; i++) {
    const task = join(dir, `trivial-${String(i).padStart(3, "0")}`);
    await mkdir(join(task, "tests"), { recursive: true });
    await writeFile(join(task, "task.toml"), `[environment]\ndocker_image = "${image}"\n[metadata]\ncategory = "bench"\n`);
    await writeFile(join(task, "instruction.md"), "Do nothing.\n");
    await writeFile(join(task, "tests", "test.sh"), "#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n");
    await chmod(join(task, "tests", "test.sh"), 0o755);
  }
}

/** The baseline: what a shell script driving the docker CLI does for one trial. */
async function cliTrial(i: number, testsDir: string, outDir: string): Promise<void> {
  const name = `bench-trial-cli-${process.pid}-${i}`;
  await run("docker", ["run", "-d", "--name", name, "--network", "none", "--label", "proctor.bench=trial-overhead", image, "sleep", "infinity"]);
  try {
    await run("docker", ["exec", name, "mkdir", "-p", "/app", "/logs/agent", "/logs/verifier"]);
    await run("docker", ["exec", "-w", "/app", name, "true"]); // the instant agent
    await run("docker", ["cp", testsDir, `${name}:/tests`]);
    await run("docker", ["exec", name, "bash", "/tests/test.sh"]);
    await run("docker", ["cp", `${name}:/logs/verifier/reward.txt`, join(outDir, `reward-${i}.txt`)]);
  } finally {
    await run("docker", ["rm", "-f", name]);
  }
}

async function pool(count: number, width: number, job: (i: number) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(Array.from({ length: width }, async () => {
    while (next < count) await job(next++);
  }));
}

function proctorRun(tasksDir: string, outDir: string): Promise<void> {
  return new Promise((done, fail) => {
    const child = spawn(process.execPath, ["--conditions=@proctor/source", "--import", "tsx", join(repo, "apps/cli/src/main.ts"),
      "run", tasksDir, "-a", "nop", "--runtime", "docker", "-n", String(parallel), "-o", outDir, "--json"], { stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (c: Buffer) => (stdout += c));
    child.stderr.on("data", (c: Buffer) => (stderr += c));
    child.on("close", (code) => {
      if (code !== 0) return fail(new Error(`proctor run exited ${code}: ${stderr.slice(-2000)}`));
      const summary = JSON.parse(stdout);
      if (summary.trials.passed !== trials) return fail(new Error(`expected ${trials} passed trials, got ${JSON.stringify(summary.trials)}`));
      done();
    });
  });
}

const work = await mkdtemp(join(tmpdir(), "proctor-bench-trials-"));
try {
  await makeTasks(join(work, "tasks"));
  const testsDir = join(work, "tasks", "trivial-000", "tests");
  await mkdir(join(work, "cli-out"));
  console.log(`trial-overhead: ${trials} trivial trials, parallelism ${parallel}, image ${image}`);

  let t = performance.now();
  await pool(trials, parallel, (i) => cliTrial(i, testsDir, join(work, "cli-out")));
  const cliMs = performance.now() - t;
  console.log(`docker CLI pipeline : ${(cliMs / 1000).toFixed(1)} s  (${(cliMs / trials).toFixed(0)} ms/trial wall)`);

  t = performance.now();
  await proctorRun(join(work, "tasks"), join(work, "runs"));
  const proctorMs = performance.now() - t;
  console.log(`proctor run -n ${parallel}    : ${(proctorMs / 1000).toFixed(1)} s  (${(proctorMs / trials).toFixed(0)} ms/trial wall, CLI start-up included)`);

  const perTrialBusyMs = (proctorMs * parallel) / trials;
  console.log(`per-trial time in proctor (wall x parallelism / trials): ${perTrialBusyMs.toFixed(0)} ms; docker CLI: ${((cliMs * parallel) / trials).toFixed(0)} ms`);
  console.log(`ratio proctor / docker CLI: ${(proctorMs / cliMs).toFixed(2)}x (target <= 0.4x)`);
} finally {
  await run("bash", ["-c", "docker rm -f $(docker ps -aq --filter label=proctor.bench=trial-overhead) >/dev/null 2>&1 || true"]);
  await rm(work, { recursive: true, force: true });
}
