/**
 * bench/queue: trivial trials (local runtime, nop agent, one-line verifier) through the queue
 * (`startRun` with @proctor/queue's dispatcher, two `proctor worker` processes on this machine)
 * vs the in-process engine at the same total parallelism, in one run. Prints the dispatch
 * overhead per trial (the extra slot time a trial costs through Redis: (queue wall - in-process
 * wall) x parallelism / trials; target < 10 ms) and the time to enqueue every trial with no
 * worker running (bundling included; target < 5 s for 10,000), with per-phase times and the CPU
 * each process spent (dispatcher, workers, redis), which a loaded machine distorts less than walls.
 *
 *   node --conditions=@proctor/source --import tsx bench/queue/index.ts [--trials 10000] [--tasks 100] [--workers 2] [--per-worker 4] [--enqueue-only] [--queue-only]
 *
 * BENCH_MARKS=1 prints process.hrtime (µs) at each phase's start and end, to cut a `node
 * --cpu-prof` profile to one phase; BENCH_CPU_PROF_DIR=DIR profiles the workers too.
 */
import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { openSync, readFileSync } from "node:fs";
import { chmod, mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";
import { startRun } from "../../packages/engine/src/index";
import { DirBundleStore, QueueDispatcher, QueueMonitor, remoteRuntime, startRedisServer } from "../../packages/queue/src/index";
import { LOCAL_CAPABILITIES } from "../../packages/sandbox/src/index";
import { loadTasks } from "../../packages/tasks/src/index";
import { reportFigure } from "../lib/figures";
import { procCpuMs, procRssMb } from "./proc";

const { values } = parseArgs({
  options: {
    trials: { type: "string", default: "10000" },
    tasks: { type: "string", default: "100" },
    workers: { type: "string", default: "2" },
    "per-worker": { type: "string", default: "4" },
    "enqueue-only": { type: "boolean", default: false },
    // Profiling the queue side alone: no in-process baseline, so no overhead figure.
    "queue-only": { type: "boolean", default: false },
  },
});
const trials = Number(values.trials);
const taskCount = Math.min(Number(values.tasks), trials);
if (trials % taskCount !== 0) throw new Error(`--trials (${trials}) must be a multiple of --tasks (${taskCount}): trials = tasks x attempts`);
const attempts = trials / taskCount;
const workerCount = Number(values.workers);
const perWorker = Number(values["per-worker"]);
const parallel = workerCount * perWorker;
const repo = resolve(import.meta.dirname, "../..");
const load = () => readFileSync("/proc/loadavg", "utf8").split(" ").slice(0, 3).join(" ");
/** Redis's own CPU ms (INFO cpu). */
function redisCpuMs(port: number): number {
  const info = execFileSync("redis-cli", ["-p", String(port), "info", "cpu"], { encoding: "utf8" });
  const value = (name: string) => Number(new RegExp(`${name}:([0-9.]+)`).exec(info)?.[1] ?? Number.NaN);
  return (value("used_cpu_user") + value("used_cpu_sys")) * 1000;
}
const ms = (value: number) => `${(value / 1000).toFixed(2)} s`;

async function makeTasks(dir: string): Promise<void> {
  for (let i = 0; i < taskCount; i++) {
    const task = join(dir, `trivial-${String(i).padStart(4, "0")}`);
    await mkdir(join(task, "tests"), { recursive: true });
    await writeFile(join(task, "task.toml"), "[metadata]\ncategory = \"bench\"\n");
    await writeFile(join(task, "instruction.md"), "Do nothing.\n");
    await writeFile(join(task, "tests", "test.sh"), '#!/bin/sh\necho 1 > "$PROCTOR_LOGS_DIR/verifier/reward.txt"\n');
    await chmod(join(task, "tests", "test.sh"), 0o755);
  }
}

function spawnWorker(url: string, name: string, workDir: string): ChildProcess {
  // BENCH_CPU_PROF_DIR: profile the workers too (node --cpu-prof), to see where their time goes.
  const profile = process.env.BENCH_CPU_PROF_DIR ? ["--cpu-prof", "--cpu-prof-dir", process.env.BENCH_CPU_PROF_DIR] : [];
  // BENCH_WORKER_NODE_FLAGS: more node flags for the workers (e.g. --trace-gc, which prints to stdout); their stdout goes to BENCH_WORKER_LOG_DIR/<name>.log when set.
  profile.push(...(process.env.BENCH_WORKER_NODE_FLAGS?.split(" ").filter(Boolean) ?? []));
  const logDir = process.env.BENCH_WORKER_LOG_DIR;
  const out = logDir ? openSync(join(logDir, `${name}.log`), "w") : "ignore";
  const child = spawn(process.execPath, [...profile, "--conditions=@proctor/source", "--import", "tsx", join(repo, "apps/cli/src/main.ts"), "worker", "--queue", url, "--runtime", "local", "-n", String(perWorker), "--name", name, "--work-dir", workDir], {
    stdio: ["ignore", out, "pipe"],
  });
  child.stderr?.on("data", (c: Buffer) => {
    if (/error/i.test(c.toString())) process.stderr.write(`[${name}] ${c}`);
  });
  return child;
}

/** --enqueue-only: stop after step 1; --queue-only: after step 3 (cleanup still runs). */
class EnqueueOnly extends Error {}

const work = await mkdtemp(join(tmpdir(), "proctor-bench-queue-"));
const redis = await startRedisServer({ dir: join(work, "redis") });
const workers: ChildProcess[] = [];
try {
  await makeTasks(join(work, "tasks"));
  const loaded = await loadTasks([join(work, "tasks")]);
  if (loaded.errors.length > 0) throw new Error(loaded.errors.map((e) => e.message).join("; "));
  const tasks = loaded.tasks;
  console.log(`queue: ${trials} trivial trials (${taskCount} tasks x ${attempts} attempts), local runtime, nop agent; ${workerCount} workers x ${perWorker} vs in-process -n ${parallel}`);
  console.log(`load average at start: ${load()}`);

  // 1. Enqueue: every trial into Redis with no worker running (bundles packed and published too).
  const puts: number[] = [];
  const store = new (class extends DirBundleStore {
    override async put(bundle: { sha256: string; bytes: Buffer }): Promise<void> {
      await super.put(bundle);
      puts.push(performance.now());
    }
  })(join(work, "bundles"));
  const enqueueDispatcher = new QueueDispatcher({ url: redis.url, prefix: "bench-enqueue", bundles: { store, source: { kind: "dir", dir: store.dir } } });
  const enqueueMonitor = new QueueMonitor({ url: redis.url, prefix: "bench-enqueue" });
  await enqueueDispatcher.waitUntilReady();
  const stop = new AbortController();
  let firstDispatch: number | null = null;
  const timedDispatch: typeof enqueueDispatcher.dispatch = (trial, ctx) => {
    firstDispatch ??= performance.now();
    return enqueueDispatcher.dispatch(trial, ctx);
  };
  const redisCpu0 = redisCpuMs(redis.port);
  const cpu0 = procCpuMs("self");
  const t0 = performance.now();
  const mark = (what: string) => process.env.BENCH_MARKS && console.log(`MARK ${what} ${process.hrtime.bigint() / 1000n}`);
  mark("enqueue-start");
  const enqueueRun = startRun({ runId: "enqueue", runDir: join(work, "runs", "enqueue"), tasks, agent: { kind: "nop" }, runtime: remoteRuntime("local", LOCAL_CAPABILITIES), concurrency: parallel, attempts, dispatch: timedDispatch, signal: stop.signal });
  let started: number | null = null;
  enqueueRun.bus.subscribe((e) => void (e.type === "run_started" && (started ??= performance.now())));
  let firstMs: number | null = null;
  for (;;) {
    const waiting = (await enqueueMonitor.counts()).waiting;
    if (waiting > 0) firstMs ??= performance.now() - t0;
    if (waiting >= trials) break;
    await new Promise((r) => setTimeout(r, 20));
  }
  const enqueueMs = performance.now() - t0;
  mark("enqueue-end");
  const enqueueCpu = procCpuMs("self") - cpu0;
  const enqueueRedisCpu = redisCpuMs(redis.port) - redisCpu0;
  const since = (t: number | null | undefined) => (t == null ? "never" : ms(t - t0));
  console.log(`enqueue: ${trials} jobs in Redis after ${ms(enqueueMs)} (${((enqueueMs * 1000) / trials).toFixed(0)} µs/trial); load ${load()}`);
  console.log(`  phases from startRun: run.json written ${since(started)}, first dispatch ${since(firstDispatch)}, first bundle ${since(puts[0])}, all ${puts.length} bundles ${since(puts.at(-1))}, first job ${firstMs === null ? "never" : ms(firstMs)}, all jobs ${ms(enqueueMs)}`);
  console.log(`  CPU: this process ${ms(enqueueCpu)} (${((enqueueCpu * 1000) / trials).toFixed(0)} µs/trial), redis ${ms(enqueueRedisCpu)} (${((enqueueRedisCpu * 1000) / trials).toFixed(0)} µs/trial)`);
  stop.abort();
  await enqueueRun.done;
  await enqueueDispatcher.close();
  await enqueueMonitor.close();
  if (values["enqueue-only"]) {
    reportFigure({ bench: "queue", figure: `enqueue ${trials} trials (no worker running)`, proctor: { value: enqueueMs / 1000, unit: "s" }, baseline: null, ratio: null, ratioMeaning: "", target: { on: "proctor", op: "<", value: 5 * (trials / 10_000), unit: "s" } });
    throw new EnqueueOnly();
  }

  // 2. In-process baseline, in a fresh process like the workers (see child.ts). CPU counts
  // that process and its trial shells (reaped children).
  let localMs = Number.NaN;
  let localCpu = Number.NaN;
  if (!values["queue-only"]) {
    mark("in-process-start");
    const args = [join(work, "tasks"), join(work, "runs", "local"), join(work, "sandboxes"), String(parallel), String(attempts)];
    const output = execFileSync(process.execPath, ["--conditions=@proctor/source", "--import", "tsx", join(import.meta.dirname, "child.ts"), ...args], { encoding: "utf8", maxBuffer: 16 * 1024 * 1024 });
    mark("in-process-end");
    const local = JSON.parse(output.trim().split("\n").at(-1) ?? "{}") as { ms: number; cpuMs: number; passed: number; rssAtStart: number; rssPeak: number };
    if (local.passed !== trials) throw new Error(`in-process: expected ${trials} passed, got ${local.passed}`);
    localMs = local.ms;
    localCpu = local.cpuMs;
    console.log(`in-process -n ${parallel} (a fresh process, RSS ${local.rssAtStart.toFixed(0)} MB at start, ${local.rssPeak.toFixed(0)} MB at peak): ${(localMs / 1000).toFixed(1)} s (${(localMs / trials).toFixed(2)} ms/trial wall), CPU ${(localCpu / trials).toFixed(2)} ms/trial; load ${load()}`);
  }

  // 3. Through the queue, workers already listening (their start-up CPU is not counted).
  for (let i = 1; i <= workerCount; i++) workers.push(spawnWorker(redis.url, `bench-${i}`, join(work, `worker-${i}`)));
  const monitor = new QueueMonitor({ url: redis.url });
  while ((await monitor.workers()).length < workerCount) await new Promise((r) => setTimeout(r, 100));
  const dispatcher = new QueueDispatcher({ url: redis.url, bundles: { store, source: { kind: "dir", dir: store.dir } } });
  await dispatcher.waitUntilReady();
  const workersCpu = () => workers.reduce((sum, c) => sum + procCpuMs(c.pid as number), 0);
  const [queueSelf0, queueWorkers0, queueRedis0] = [procCpuMs("self"), workersCpu(), redisCpuMs(redis.port)];
  mark("queue-start");
  const t2 = performance.now();
  const queuedRun = startRun({ runId: "queued", runDir: join(work, "runs", "queued"), tasks, agent: { kind: "nop" }, runtime: remoteRuntime("local", LOCAL_CAPABILITIES), concurrency: parallel, attempts, dispatch: dispatcher.dispatch });
  let firstResult: number | null = null;
  queuedRun.bus.subscribe((e) => void (e.type === "trial_finished" && (firstResult ??= performance.now())));
  const queued = await queuedRun.done;
  const queueMs = performance.now() - t2;
  mark("queue-end");
  const [queueSelf, queueWorkers, queueRedis] = [procCpuMs("self") - queueSelf0, workersCpu() - queueWorkers0, redisCpuMs(redis.port) - queueRedis0];
  await dispatcher.close();
  await monitor.close();
  if (queued.trials.passed !== trials) throw new Error(`queue: expected ${trials} passed, got ${JSON.stringify(queued.trials)}`);
  console.log(`  RSS at the end: dispatcher ${procRssMb("self").toFixed(0)} MB, workers ${workers.map((c) => `${procRssMb(c.pid as number).toFixed(0)} MB`).join(", ")}`);
  console.log(`queue, ${workerCount} workers x ${perWorker}: ${(queueMs / 1000).toFixed(1)} s (${(queueMs / trials).toFixed(2)} ms/trial wall, first result after ${ms((firstResult ?? t2) - t2)}); load ${load()}`);
  const perTrial = (cpu: number) => `${(cpu / trials).toFixed(2)} ms`;
  const queueCpu = queueSelf + queueWorkers + queueRedis;
  console.log(`  CPU per trial: dispatcher ${perTrial(queueSelf)} + workers ${perTrial(queueWorkers)} + redis ${perTrial(queueRedis)} = ${perTrial(queueCpu)} vs in-process ${perTrial(localCpu)} (+${perTrial(queueCpu - localCpu)} through the queue)`);

  if (values["queue-only"]) throw new EnqueueOnly();
  const overheadMs = ((queueMs - localMs) * parallel) / trials;
  console.log(`dispatch overhead per trial ((queue - in-process) x ${parallel} / ${trials}): ${overheadMs.toFixed(2)} ms (target < 10 ms)`);
  console.log(`ratio queue / in-process wall: ${(queueMs / localMs).toFixed(2)}x; enqueue ${(enqueueMs / 1000).toFixed(2)} s (target < 5 s); load average at end: ${load()}`);
  reportFigure({
    bench: "queue",
    figure: `${trials} trivial trials, dispatch overhead per trial (${workerCount} workers x ${perWorker} vs in-process -n ${parallel})`,
    proctor: { value: overheadMs, unit: "ms" },
    baseline: { value: (localMs * parallel) / trials, unit: "ms", label: "in-process slot time per trial" },
    ratio: queueMs / localMs,
    ratioMeaning: "queue wall / in-process wall",
    target: { on: "proctor", op: "<", value: 10, unit: "ms" },
  });
  reportFigure({
    bench: "queue",
    figure: `${trials} trivial trials, CPU per trial through the queue (dispatcher + workers + redis) vs in-process`,
    proctor: { value: queueCpu / trials, unit: "ms" },
    baseline: { value: localCpu / trials, unit: "ms", label: "in-process CPU per trial" },
    ratio: queueCpu / localCpu,
    ratioMeaning: "queue CPU / in-process CPU",
    target: null,
  });
  reportFigure({
    bench: "queue",
    figure: `enqueue ${trials} trials (no worker running)`,
    proctor: { value: enqueueMs / 1000, unit: "s" },
    baseline: null,
    ratio: null,
    ratioMeaning: "",
    target: { on: "proctor", op: "<", value: 5 * (trials / 10_000), unit: "s" },
  });
} catch (error) {
  if (!(error instanceof EnqueueOnly)) throw error;
} finally {
  for (const child of workers) child.kill("SIGTERM");
  await Promise.all(workers.map((c) => (c.exitCode !== null ? null : new Promise((r) => c.once("exit", r)))));
  await redis.stop();
  await rm(work, { recursive: true, force: true });
}
