/**
 * tools/soak/trials.ts: many trials through one engine process on Docker, sampling what a leak
 * would grow: the process's RSS and heap, its open file descriptors, containers left with the
 * run's label, and entries in its own temp dir. Prints one row per sample and exits non-zero on growth.
 *
 *   node --conditions=@proctor/source --import tsx tools/soak/trials.ts [--trials 1000] [--parallel 4] [--every 100]
 */
import { execFileSync } from "node:child_process";
import { readdirSync } from "node:fs";
import { chmod, mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { startRun } from "../../packages/engine/src/index";
import { DockerRuntime } from "../../packages/sandbox-docker/src/index";
import { loadTasks } from "../../packages/tasks/src/index";

const { values } = parseArgs({
  options: {
    trials: { type: "string", default: "1000" },
    parallel: { type: "string", default: "4" },
    every: { type: "string", default: "100" },
    image: { type: "string", default: "proctor/busybox:latest" },
  },
});
const trials = Number(values.trials);
const every = Number(values.every);

interface Sample {
  done: number;
  rssMb: number;
  heapMb: number;
  fds: number;
  containers: number;
  tempDirs: number;
}

const tempDirs = () => readdirSync(tmpdir()).length;
const containers = (runId: string) => {
  const out = execFileSync("docker", ["ps", "-aq", "--filter", `label=proctor.run=${runId}`], { encoding: "utf8" }).trim();
  return out === "" ? 0 : out.split("\n").length;
};

function sample(done: number, runId: string): Sample {
  const memory = process.memoryUsage();
  return {
    done,
    rssMb: Math.round(memory.rss / 1024 / 1024),
    heapMb: Math.round(memory.heapUsed / 1024 / 1024),
    fds: readdirSync("/proc/self/fd").length,
    containers: containers(runId),
    tempDirs: tempDirs(),
  };
}

const work = await mkdtemp(join(tmpdir(), "soak-trials-"));
// Everything this process puts in the temp dir lands in a directory of its own, so other
// processes on the machine do not count.
const privateTmp = join(work, "tmp");
await mkdir(privateTmp);
process.env.TMPDIR = privateTmp;
try {
  const taskDir = join(work, "tasks", "tiny");
  await mkdir(join(taskDir, "tests"), { recursive: true });
  await writeFile(join(taskDir, "task.toml"), `[environment]\ndocker_image = "${values.image}"\n[agent]\ntimeout_sec = 30\n[verifier]\ntimeout_sec = 30\n`);
  await writeFile(join(taskDir, "instruction.md"), "Write ok.\n");
  await writeFile(join(taskDir, "tests", "test.sh"), "#!/bin/sh\n[ -f /app/ok ] && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n");
  await mkdir(join(taskDir, "solution"), { recursive: true });
  await writeFile(join(taskDir, "solution", "solve.sh"), "#!/bin/sh\ntouch /app/ok\n");
  await chmod(join(taskDir, "tests", "test.sh"), 0o755);
  const loaded = await loadTasks([join(work, "tasks")]);
  // The native test command runs bash; busybox has none, so run the scripts with sh.
  const tasks = loaded.tasks.map((t) => ({
    ...t,
    verifier: { ...t.verifier, command: 'sh "$PROCTOR_TESTS_DIR/test.sh"' },
    solution: t.solution && { ...t.solution, command: 'sh "$PROCTOR_SOLUTION_DIR/solve.sh"' },
  }));
  const runId = `soak-${process.pid}`;
  const runtime = new DockerRuntime();
  const samples: Sample[] = [sample(0, runId)];
  const handle = startRun({ runId, runDir: join(work, "runs", runId), tasks, agent: { kind: "oracle" }, runtime, concurrency: Number(values.parallel), attempts: trials });
  let done = 0;
  const started = Date.now();
  handle.bus.subscribe((event) => {
    if (event.type !== "trial_finished") return;
    done++;
    if (done % every === 0) {
      const s = sample(done, runId);
      samples.push(s);
      process.stderr.write(`${done}/${trials} trials, ${Math.round((Date.now() - started) / 1000)} s: rss ${s.rssMb} MB, heap ${s.heapMb} MB, fds ${s.fds}, containers ${s.containers}, temp dirs ${s.tempDirs}\n`);
    }
  });
  const summary = await handle.done;
  await runtime.drain();
  const end = sample(done, runId);
  samples.push(end);

  console.log("| trials | rss MB | heap MB | open fds | containers | temp dirs |");
  console.log("|---|---|---|---|---|---|");
  for (const s of samples) console.log(`| ${s.done} | ${s.rssMb} | ${s.heapMb} | ${s.fds} | ${s.containers} | ${s.tempDirs} |`);
  console.log(`\npassed ${summary.trials.passed}/${summary.trials.total} in ${Math.round((Date.now() - started) / 1000)} s`);

  // Growth is judged from the first full sample (warm caches) to the last.
  const first = samples[1] ?? samples[0]!;
  const problems: string[] = [];
  if (end.containers !== 0) problems.push(`${end.containers} container(s) left`);
  if (end.fds - first.fds > 20) problems.push(`open fds grew ${first.fds} -> ${end.fds}`);
  if (end.heapMb > first.heapMb * 1.5 + 20) problems.push(`heap grew ${first.heapMb} -> ${end.heapMb} MB`);
  if (end.tempDirs > samples[0]!.tempDirs) problems.push(`temp dirs grew ${samples[0]!.tempDirs} -> ${end.tempDirs}`);
  if (summary.trials.passed !== trials) problems.push(`only ${summary.trials.passed}/${trials} passed`);
  if (problems.length > 0) {
    console.log(`LEAK: ${problems.join("; ")}`);
    process.exitCode = 1;
  } else {
    console.log("no growth in containers, fds, heap or temp dirs");
  }
} finally {
  await rm(work, { recursive: true, force: true });
}
