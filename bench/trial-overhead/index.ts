/**
 * bench/trial-overhead: N trivial trials (instant agent and verifier, prebuilt image) through
 * `proctor run -n P` (which grades each trial in a fresh container from the task's image) vs the
 * same trials through a plain docker-CLI pipeline doing the same at the same parallelism (run -d
 * the agent's container, exec the agent, cp its workdir out, rm -f; run -d the grader's, cp the
 * workdir and tests in, exec the verifier, cp the reward out, rm -f), and vs the floor: two bare
 * `docker run --rm --network none IMG true` one after the other per trial (the agent's and the
 * verifier's container starting and going, nothing else), in one run: `--rounds` rounds of the three
 * sides, the order rotating, so load drift hits them alike. Each side also runs 1 trial per round;
 * the figures with targets are N trials minus that 1 (the fixed costs, proctor's CLI start-up
 * above all, cancel out), so a small --trials measures the same thing as a large one.
 *
 *   node --conditions=@proctor/source --import tsx bench/trial-overhead/index.ts [--trials 100] [--parallel 8] [--rounds 2]
 */
import { execFile, spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import { mkdtemp, mkdir, rm, writeFile, chmod } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { parseArgs, promisify } from "node:util";
import { reportFigure } from "../lib/figures";

const run = promisify(execFile);
const { values } = parseArgs({
  options: {
    trials: { type: "string", default: "100" },
    parallel: { type: "string", default: "8" },
    rounds: { type: "string", default: "2" },
    image: { type: "string", default: "proctor/base:bookworm" },
  },
});
const trials = Number(values.trials);
const rounds = Number(values.rounds);
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

/** The baseline: what a shell script driving the docker CLI does for one trial graded in a fresh container. */
async function cliTrial(i: number, testsDir: string, outDir: string): Promise<void> {
  const agent = `bench-trial-cli-${process.pid}-${i}`;
  const grader = `${agent}-grader`;
  const outputs = join(outDir, `app-${i}`);
  await run("docker", ["run", "-d", "--name", agent, "--network", "none", "--label", "proctor.bench=trial-overhead", image, "sleep", "infinity"]);
  try {
    await run("docker", ["exec", agent, "mkdir", "-p", "/app", "/logs/agent", "/logs/verifier"]);
    await run("docker", ["exec", "-w", "/app", agent, "true"]); // the instant agent
    await run("docker", ["cp", `${agent}:/app`, outputs]);
  } finally {
    await run("docker", ["rm", "-f", agent]);
  }
  await run("docker", ["run", "-d", "--name", grader, "--network", "none", "--label", "proctor.bench=trial-overhead", image, "sleep", "infinity"]);
  try {
    await run("docker", ["exec", grader, "mkdir", "-p", "/logs/verifier"]);
    await run("docker", ["cp", outputs, `${grader}:/app`]);
    await run("docker", ["cp", testsDir, `${grader}:/tests`]);
    await run("docker", ["exec", grader, "bash", "/tests/test.sh"]);
    await run("docker", ["cp", `${grader}:/logs/verifier/reward.txt`, join(outDir, `reward-${i}.txt`)]);
  } finally {
    await run("docker", ["rm", "-f", grader]);
  }
}

/** The floor: the agent's container and then the verifier's start, run `true` and are removed; no trial work at all. */
async function floorTrial(): Promise<void> {
  for (let k = 0; k < 2; k++) await run("docker", ["run", "--rm", "--network", "none", "--label", "proctor.bench=trial-overhead", image, "true"]);
}

async function pool(count: number, width: number, job: (i: number) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(Array.from({ length: width }, async () => {
    while (next < count) await job(next++);
  }));
}

/** Runs proctor; fails if the run left any container behind. */
async function proctorRun(tasksDir: string, outDir: string, runId: string, extraArgs: string[]): Promise<void> {
  await proctorCli(tasksDir, outDir, runId, extraArgs);
  const left = (await run("docker", ["ps", "-aq", "--filter", `label=proctor.run=${runId}`])).stdout.trim();
  if (left !== "") throw new Error(`proctor run ${runId} left containers behind: ${left.replace(/\n/g, " ")}`);
}

function proctorCli(tasksDir: string, outDir: string, runId: string, extraArgs: string[]): Promise<void> {
  const expected = extraArgs.length > 0 ? 1 : trials;
  return new Promise((done, fail) => {
    const child = spawn(process.execPath, ["--conditions=@proctor/source", "--import", "tsx", join(repo, "apps/cli/src/main.ts"),
      "run", tasksDir, "-a", "nop", "--runtime", "docker", "-n", String(parallel), "-o", outDir, "--run-id", runId, "--json", ...extraArgs], { stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (c: Buffer) => (stdout += c));
    child.stderr.on("data", (c: Buffer) => (stderr += c));
    child.on("close", (code) => {
      if (code !== 0) return fail(new Error(`proctor run exited ${code}: ${stderr.slice(-2000)}`));
      const summary = JSON.parse(stdout);
      if (stderr.includes("warning: Docker: container file changes are listed by the daemon")) process.stderr.write(`proctor run said: ${stderr.split("\n").find((line) => line.startsWith("warning: Docker:"))}\n`);
      if (summary.trials.passed !== expected) return fail(new Error(`expected ${expected} passed trials, got ${JSON.stringify(summary.trials)}`));
      done();
    });
  });
}

function load(): string {
  return readFileSync("/proc/loadavg", "utf8").split(" ").slice(0, 3).join(" ");
}

/** Busy CPU of the whole machine so far (every process: proctor, dockerd, containerd, runc...), in ms. */
function busyCpuMs(): number {
  const fields = (readFileSync("/proc/stat", "utf8").split("\n")[0] ?? "").trim().split(/\s+/).slice(1).map(Number);
  const [user = 0, nice = 0, system = 0, , , irq = 0, softirq = 0, steal = 0] = fields;
  return ((user + nice + system + irq + softirq + steal) * 1000) / 100; // USER_HZ is 100 on Linux
}

/** One side of a round: its wall and the machine's busy CPU over N trials and over 1 (which holds the fixed costs: CLI start-up, the run's set-up). */
interface Side {
  name: string;
  /** Runs `count` trials (all of them, or only the first). */
  once(count: "all" | "one", round: number): Promise<void>;
}
interface Timing { wallMs: number; cpuMs: number }
const zero = (): Timing => ({ wallMs: 0, cpuMs: 0 });
async function timed(job: () => Promise<void>): Promise<Timing> {
  const cpu = busyCpuMs();
  const t = performance.now();
  await job();
  return { wallMs: performance.now() - t, cpuMs: busyCpuMs() - cpu };
}

const ONE_RUNS = 3;

const work = await mkdtemp(join(tmpdir(), "proctor-bench-trials-"));
try {
  await makeTasks(join(work, "tasks"));
  const testsDir = join(work, "tasks", "trivial-000", "tests");
  console.log(`trial-overhead: ${trials} trivial trials per side per round, ${rounds} round(s), parallelism ${parallel}, image ${image}`);
  console.log(`each side also runs 1 trial ${ONE_RUNS} times per round: N trials minus the median 1-trial run is the cost of N-1 trials without the fixed costs (proctor's CLI start-up, a run's set-up)`);
  console.log(`load average at start: ${load()}`);

  const sides: Side[] = [
    {
      name: "docker CLI",
      async once(count, round) {
        const out = join(work, `cli-out-${round}-${count}`);
        await mkdir(out);
        await pool(count === "all" ? trials : 1, parallel, (i) => cliTrial(i, testsDir, out));
      },
    },
    {
      name: "proctor",
      async once(count, round) {
        const runId = `bench-trial-overhead-${process.pid}-${round}-${count}`;
        await proctorRun(join(work, "tasks"), join(work, `runs-${round}-${count}`), runId, count === "one" ? ["-i", "trivial-000"] : []);
      },
    },
    {
      name: "floor",
      async once(count) {
        await pool(count === "all" ? trials : 1, parallel, () => floorTrial());
      },
    },
  ];
  const totals = new Map(sides.map((side) => [side.name, { all: zero(), one: zero() }]));
  const add = (into: Timing, t: Timing) => {
    into.wallMs += t.wallMs;
    into.cpuMs += t.cpuMs;
  };
  for (let round = 1; round <= rounds; round++) {
    // Rotate the order each round so drift in machine load hits every side alike.
    const order = sides.slice((round - 1) % sides.length).concat(sides.slice(0, (round - 1) % sides.length));
    const now = new Map<string, { all: Timing; one: Timing }>();
    for (const side of order) {
      // The fixed costs: the median of ONE_RUNS 1-trial runs (one run alone is too noisy to subtract).
      const ones: Timing[] = [];
      for (let k = 0; k < ONE_RUNS; k++) ones.push(await timed(() => side.once("one", round * 100 + k)));
      ones.sort((x, y) => x.wallMs - y.wallMs);
      const one = ones[Math.floor(ONE_RUNS / 2)]!;
      const all = await timed(() => side.once("all", round));
      now.set(side.name, { all, one });
      const total = totals.get(side.name)!;
      add(total.all, all);
      add(total.one, one);
    }
    const [cli, proctor, floor] = ["docker CLI", "proctor", "floor"].map((name) => now.get(name)!) as [{ all: Timing; one: Timing }, { all: Timing; one: Timing }, { all: Timing; one: Timing }];
    const marginal = (x: { all: Timing; one: Timing }) => x.all.wallMs - x.one.wallMs;
    console.log(
      `round ${round}: ${trials} trials: docker CLI ${(cli.all.wallMs / 1000).toFixed(1)} s, proctor ${(proctor.all.wallMs / 1000).toFixed(1)} s, floor ${(floor.all.wallMs / 1000).toFixed(1)} s; ` +
        `1 trial: ${(cli.one.wallMs / 1000).toFixed(1)} s, ${(proctor.one.wallMs / 1000).toFixed(1)} s, ${(floor.one.wallMs / 1000).toFixed(1)} s; ` +
        `proctor / CLI ${(proctor.all.wallMs / cli.all.wallMs).toFixed(2)}x (start-up subtracted ${(marginal(proctor) / marginal(cli)).toFixed(2)}x), ` +
        `proctor / floor ${(proctor.all.wallMs / floor.all.wallMs).toFixed(2)}x (start-up subtracted ${(marginal(proctor) / marginal(floor)).toFixed(2)}x); load ${load()}`,
    );
  }
  const [cli, proctor, floor] = ["docker CLI", "proctor", "floor"].map((name) => totals.get(name)!) as [{ all: Timing; one: Timing }, { all: Timing; one: Timing }, { all: Timing; one: Timing }];
  const n = trials * rounds;
  const extra = (trials - 1) * rounds;
  const wall = (x: { all: Timing; one: Timing }) => x.all.wallMs - x.one.wallMs;
  const cpu = (x: { all: Timing; one: Timing }) => x.all.cpuMs - x.one.cpuMs;
  console.log(`docker CLI pipeline : ${(cli.all.wallMs / 1000).toFixed(1)} s for ${n} trials; ${(cli.one.wallMs / 1000).toFixed(1)} s for ${rounds} x 1 (medians)`);
  console.log(`proctor run -n ${parallel}    : ${(proctor.all.wallMs / 1000).toFixed(1)} s for ${n} trials; ${(proctor.one.wallMs / 1000).toFixed(1)} s for ${rounds} x 1 (medians; the CLI's start-up and a run's set-up, plus one trial)`);
  console.log(`floor (2 x docker run --rm --network none ${image} true per trial, -P ${parallel}): ${(floor.all.wallMs / 1000).toFixed(1)} s for ${n}; ${(floor.one.wallMs / 1000).toFixed(1)} s for ${rounds} x 1 (medians)`);
  console.log(`with start-up     : proctor / CLI ${(proctor.all.wallMs / cli.all.wallMs).toFixed(2)}x, proctor / floor ${(proctor.all.wallMs / floor.all.wallMs).toFixed(2)}x`);
  console.log(`start-up subtracted (N trials - 1 trial): proctor / CLI ${(wall(proctor) / wall(cli)).toFixed(2)}x (target <= 0.4x), proctor / floor ${(wall(proctor) / wall(floor)).toFixed(2)}x (target <= 1.3x)`);
  console.log(
    `machine busy CPU per trial, start-up subtracted (every process on the machine, others' too): proctor ${(cpu(proctor) / extra).toFixed(0)} ms, CLI ${(cpu(cli) / extra).toFixed(0)} ms, floor ${(cpu(floor) / extra).toFixed(0)} ms; ` +
      `proctor / floor ${(cpu(proctor) / cpu(floor)).toFixed(2)}x; load average at end: ${load()}`,
  );
  const figure = `${trials} trivial trials x ${rounds} round(s), -n ${parallel}`;
  reportFigure({
    bench: "trial-overhead",
    figure: `${figure}, wall minus a 1-trial run (start-up)`,
    proctor: { value: wall(proctor) / 1000, unit: "s" },
    baseline: { value: wall(cli) / 1000, unit: "s", label: "docker CLI pipeline, same" },
    ratio: wall(proctor) / wall(cli),
    ratioMeaning: "proctor run / docker CLI pipeline, each minus its 1-trial run",
    target: { on: "ratio", op: "<=", value: 0.4 },
  });
  reportFigure({
    bench: "trial-overhead",
    figure: `${figure}, wall minus a 1-trial run, vs the floor`,
    proctor: { value: wall(proctor) / 1000, unit: "s" },
    baseline: { value: wall(floor) / 1000, unit: "s", label: "two bare docker run --rm --network none IMG true per trial, same" },
    ratio: wall(proctor) / wall(floor),
    ratioMeaning: "proctor run (graded in a fresh container) / two bare docker runs per trial, each minus its 1-trial run",
    target: { on: "ratio", op: "<=", value: 1.3 },
  });
  reportFigure({
    bench: "trial-overhead",
    figure: `${figure}, wall with start-up, vs the floor`,
    proctor: { value: proctor.all.wallMs / 1000, unit: "s" },
    baseline: { value: floor.all.wallMs / 1000, unit: "s", label: "two bare docker run --rm --network none IMG true per trial" },
    ratio: proctor.all.wallMs / floor.all.wallMs,
    ratioMeaning: "proctor run / two bare docker runs per trial, start-up included",
    target: null,
  });
} finally {
  await run("bash", ["-c", "docker rm -f $(docker ps -aq --filter label=proctor.bench=trial-overhead) >/dev/null 2>&1 || true"]);
  await rm(work, { recursive: true, force: true });
}
