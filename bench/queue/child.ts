/**
 * bench/queue's in-process baseline, run in a fresh process as the workers are: every trial
 * shell is a fork of the process that starts it, and a fork costs more the more memory that
 * process holds (2.5 ms of its CPU at 52 MB RSS, 12.9 ms at 454 MB), so both sides start their
 * shells from processes that did nothing else before. Prints one JSON line.
 *
 *   node --conditions=@proctor/source --import tsx bench/queue/child.ts TASKS_DIR RUN_DIR SANDBOXES_DIR PARALLEL ATTEMPTS
 */
import { startRun } from "../../packages/engine/src/index";
import { LocalRuntime } from "../../packages/sandbox/src/index";
import { loadTasks } from "../../packages/tasks/src/index";
import { procCpuMs, procRssMb } from "./proc";

const [tasksDir, runDir, sandboxes, parallel, attempts] = process.argv.slice(2);
if (!tasksDir || !runDir || !sandboxes || !parallel || !attempts) throw new Error("usage: child.ts TASKS_DIR RUN_DIR SANDBOXES_DIR PARALLEL ATTEMPTS");
const loaded = await loadTasks([tasksDir]);
if (loaded.errors.length > 0) throw new Error(loaded.errors.map((e) => e.message).join("; "));
const rssAtStart = procRssMb("self");
const cpu0 = procCpuMs("self");
const t0 = performance.now();
const run = startRun({ runId: "local", runDir, tasks: loaded.tasks, agent: { kind: "nop" }, runtime: new LocalRuntime({ rootDir: sandboxes }), concurrency: Number(parallel), attempts: Number(attempts) });
let rssPeak = rssAtStart;
const sampler = setInterval(() => (rssPeak = Math.max(rssPeak, procRssMb("self"))), 1000);
const result = await run.done;
clearInterval(sampler);
console.log(JSON.stringify({ ms: performance.now() - t0, cpuMs: procCpuMs("self") - cpu0, passed: result.trials.passed, rssAtStart, rssPeak }));
