/**
 * bench/cold-builds: a cold `proctor run --agent oracle -n P` of N native tasks whose Dockerfiles
 * share a heavy prefix (FROM the base image + an identical RUN of several CPU seconds, then a
 * COPY and a RUN of their own), as real datasets do, against building the same N images one at a
 * time with `docker build` (builds only, no trials). Each side gets Dockerfiles no build has seen
 * (a fresh id in the shared RUN), so both start cold. Also reports how many times the shared step
 * ran in Proctor's run (distinct layers of that step over the N images: 1 means shared).
 *
 *   node --conditions=@proctor/source --import tsx bench/cold-builds/index.ts [--tasks 24] [--parallel 8]
 */
import { execFile } from "node:child_process";
import { randomUUID } from "node:crypto";
import { chmod, mkdir, mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { parseArgs, promisify } from "node:util";
import { reportFigure } from "../lib/figures";

const run = promisify(execFile);
const { values } = parseArgs({
  options: {
    tasks: { type: "string", default: "24" },
    parallel: { type: "string", default: "8" },
    base: { type: "string", default: "proctor/base:bookworm" },
  },
});
const count = Number(values.tasks);
const parallel = Number(values.parallel);
const base = values.base;
const repo = resolve(import.meta.dirname, "../..");

/** N native tasks sharing `FROM base` + one heavy RUN unique to `nonce`; each then copies a file of its own. */
async function makeTasks(dir: string, nonce: string): Promise<void> {
  for (let i = 0; i < count; i++) {
    const task = join(dir, `shared-${String(i).padStart(3, "0")}`);
    await mkdir(join(task, "environment"), { recursive: true });
    await mkdir(join(task, "tests"));
    await mkdir(join(task, "solution"));
    await writeFile(
      join(task, "environment", "Dockerfile"),
      [
        `FROM ${base}`,
        `RUN echo "prefix ${nonce}" && head -c 400000000 /dev/zero | sha256sum > /opt/prefix.sum && head -c 120000000 /dev/urandom | gzip -1 > /opt/data.gz`,
        "COPY own.txt /app/own.txt",
        `RUN echo task-${i} > /app/id`,
        "",
      ].join("\n"),
    );
    await writeFile(join(task, "environment", "own.txt"), `own ${i}\n`);
    await writeFile(join(task, "instruction.md"), "Copy /app/id to /app/answer.\n");
    await writeFile(join(task, "task.toml"), "[agent]\ntimeout_sec = 120\n[verifier]\ntimeout_sec = 60\n");
    await writeFile(join(task, "tests", "test.sh"), '#!/usr/bin/env bash\nmkdir -p /logs/verifier\nif [ "$(cat /app/answer)" = "$(cat /app/id)" ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi\n');
    await writeFile(join(task, "solution", "solve.sh"), "#!/usr/bin/env bash\ncp /app/id /app/answer\n");
    await chmod(join(task, "tests", "test.sh"), 0o755);
  }
}

async function layers(image: string): Promise<string[]> {
  const { stdout } = await run("docker", ["image", "inspect", image, "--format", "{{json .RootFS.Layers}}"]);
  return JSON.parse(stdout) as string[];
}

const work = await mkdtemp(join(tmpdir(), "proctor-bench-cold-builds-"));
const images = new Set<string>();
try {
  const baseLayers = (await layers(base)).length;

  // Proctor: a cold run, builds and trials.
  const proctorTasks = join(work, "proctor-tasks");
  await makeTasks(proctorTasks, randomUUID());
  const runs = join(work, "runs");
  let started = Date.now();
  await run(process.execPath, ["--conditions=@proctor/source", "--import", "tsx", join(repo, "apps/cli/src/main.ts"), "run", proctorTasks, "--agent", "oracle", "-n", String(parallel), "-o", runs], { cwd: repo, maxBuffer: 64 * 1024 * 1024 });
  const proctorMs = Date.now() - started;
  const [runDir] = await readdir(runs);
  const results = (await readFile(join(runs, runDir ?? "", "results.jsonl"), "utf8")).trim().split("\n").map((line) => JSON.parse(line) as { status: string; environment?: { image?: string }; phases: { phase: string; durationMs: number }[] });
  const passed = results.filter((r) => r.status === "passed").length;
  for (const r of results) if (r.environment?.image) images.add(r.environment.image);
  const prefixLayers = new Set(await Promise.all([...images].map(async (image) => (await layers(image))[baseLayers])));
  const phase = (name: (p: string) => boolean) => results.reduce((sum, r) => sum + r.phases.filter((p) => name(p.phase)).reduce((s, p) => s + p.durationMs, 0), 0) / 1000;

  // Baseline: the same images built one at a time with the docker CLI (a fresh prefix, so cold too).
  const cliTasks = join(work, "cli-tasks");
  await makeTasks(cliTasks, randomUUID());
  started = Date.now();
  for (const name of (await readdir(cliTasks)).sort()) {
    const tag = `proctor-bench-cold-builds/${name}:${process.pid}`;
    await run("docker", ["build", "-q", "-t", tag, join(cliTasks, name, "environment")], { env: { ...process.env, DOCKER_BUILDKIT: "0" } });
    images.add(tag);
  }
  const cliMs = Date.now() - started;

  process.stdout.write(
    `${count} tasks, -n ${parallel}: proctor run ${(proctorMs / 1000).toFixed(1)} s (${passed}/${results.length} passed; environment phases ${phase((p) => p === "environment").toFixed(1)} s, other phases ${phase((p) => p !== "environment").toFixed(1)} s summed over trials; the shared step ran ${prefixLayers.size} time(s)); docker build one at a time ${(cliMs / 1000).toFixed(1)} s\n`,
  );
  if (passed !== results.length) throw new Error(`${results.length - passed} trial(s) did not pass`);
  reportFigure({
    bench: "cold-builds",
    figure: `cold proctor run of ${count} tasks sharing a Dockerfile prefix, -n ${parallel} (builds and trials)`,
    proctor: { value: proctorMs / 1000, unit: "s" },
    baseline: { value: cliMs / 1000, unit: "s", label: "docker build of the same images, one at a time (builds only)" },
    ratio: proctorMs / cliMs,
    ratioMeaning: "proctor run (builds + trials) / sequential docker build (builds only)",
    target: null,
  });
  reportFigure({
    bench: "cold-builds",
    figure: `executions of the shared prefix step over ${count} images`,
    proctor: { value: prefixLayers.size, unit: "" },
    baseline: null,
    ratio: null,
    ratioMeaning: "",
    target: { on: "proctor", op: "<=", value: 1 },
  });
} finally {
  for (const image of images) await run("docker", ["rmi", "-f", image]).catch(() => undefined);
  await rm(work, { recursive: true, force: true });
}
