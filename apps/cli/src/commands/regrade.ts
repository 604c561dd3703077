import { dirname, join, resolve } from "node:path";
import { randomBytes } from "node:crypto";
import { readFile } from "node:fs/promises";
import type { Logger, RunSummary, TaskSpec } from "@proctor/schema";
import { lockRunDir, planRegrade, RunDirectoryError, startRun, type RunLimits } from "@proctor/engine";
import { loadTasks } from "@proctor/tasks";
import { createProgress, diffPins, parseResults, renderRunSummary } from "@proctor/report";
import { UsageError, EXIT_INTERRUPTED } from "../errors";
import { openRuntime, parseRuntimeChoice } from "../runtime";
import { prepareSources } from "../sources";
import { VERSION } from "../program";
import { followRun } from "./run";

export interface RegradeCommandOptions {
  /** The run whose kept outputs are graded again. */
  runDir: string;
  /** --tasks: where the tasks come from (a task dir, a dir of tasks, an archive, dataset rows); default: the run's own sources. */
  tasks?: string;
  /** -o: runs root for the new run (default: the regraded run's runs root). */
  out?: string;
  /** --run-id for the new run (default: <run-id>-regrade-<time>). */
  runId?: string;
  concurrency: number;
  json: boolean;
  logger: Logger;
  stdout?: NodeJS.WritableStream;
  stderr?: NodeJS.WritableStream;
  signal?: AbortSignal;
}

function regradeRunId(of: string): string {
  const now = new Date().toISOString().replace(/[-:]/g, "").replace("T", "-").slice(0, 15);
  return `${of}-regrade-${now}-${randomBytes(2).toString("hex")}`;
}

const list = (items: readonly string[], max = 10) => `${items.slice(0, max).join(", ")}${items.length > max ? `, ... (${items.length} in all)` : ""}`;

/**
 * `proctor regrade RUN_DIR`: grade the outputs each trial of a run kept again, against the run's
 * tasks or those of `--tasks` (matched by task id), without running the agent. Writes a new run
 * directory whose run.json and summary.json name the regraded run (`regradeOf`). Returns the exit code.
 */
export async function regradeCommand(options: RegradeCommandOptions): Promise<number> {
  const out = options.stdout ?? process.stdout;
  const err = options.stderr ?? process.stderr;
  const from = resolve(options.runDir);
  const plan = await planRegrade(from).catch((error: unknown) => {
    if (error instanceof RunDirectoryError) throw new UsageError(`regrade ${options.runDir}: not a run directory (${error.message})`, { cause: error });
    throw error;
  });
  const { config, source, missing } = plan;
  if (missing.length > 0) {
    err.write(`${missing.length} trial(s) of ${config.runId} kept no outputs and are not regraded: ${list(missing.map((m) => `${m.trialId} (${m.why})`), 5)}\n`);
  }
  if (source.trials.size === 0) throw new UsageError(`regrade ${options.runDir}: no trial of run ${config.runId} kept its outputs, so there is nothing to grade again`);

  const sources = options.tasks !== undefined ? [resolve(options.tasks)] : config.sources;
  if (sources.length === 0) throw new UsageError(`regrade ${options.runDir}: run ${config.runId} recorded no task sources; name them with --tasks DIR`);
  const runsRoot = resolve(options.out ?? dirname(from));
  const runId = options.runId ?? regradeRunId(config.runId);
  const runDir = join(runsRoot, runId);
  const lock = await lockRunDir(runDir);
  try {
    const prepared = await prepareSources(sources, join(runDir, "input"), options.logger);
    const taskIds = new Set(plan.taskIds);
    const loaded = await loadTasks(prepared.taskSources, { ...(config.dataset ?? {}) });
    if (loaded.errors.length > 0) throw new UsageError(`${loaded.errors.length} task(s) failed to load:\n${loaded.errors.map((e) => `  ${e.message}`).join("\n")}`);
    const tasks: TaskSpec[] = loaded.tasks.filter((t) => taskIds.has(t.id));
    const found = new Set(tasks.map((t) => t.id));
    const absent = [...taskIds].filter((id) => !found.has(id)).sort();
    if (absent.length > 0) throw new UsageError(`regrade: ${absent.length} task(s) of run ${config.runId} are not in ${sources.join(", ")}: ${list(absent)} (give the source that has them with --tasks)`);

    const runtime = await openRuntime(parseRuntimeChoice(config.runtime === "docker" || config.runtime === "local" ? config.runtime : "auto"), options.logger);
    err.write(`regrading ${source.trials.size} trial(s) of ${config.runId} from their kept outputs (no agent runs), tasks from ${sources.join(", ")}\nrun directory: ${runDir}\n`);
    const progress = createProgress(err, { runDir });
    // Ctrl-C stops it as it stops a run: no new trial starts, running sandboxes are removed.
    const controller = new AbortController();
    const onSignal = () => {
      err.write("stopping: no new trials start, running sandboxes are removed\n");
      controller.abort(new Error("interrupted"));
    };
    process.once("SIGINT", onSignal);
    process.once("SIGTERM", onSignal);
    options.signal?.addEventListener("abort", () => controller.abort(options.signal?.reason), { once: true });
    let summary: RunSummary;
    const handle = startRun({
      runId,
      runDir,
      lock,
      tasks,
      agent: config.agent,
      regrade: source,
      runtime,
      concurrency: options.concurrency,
      attempts: config.attempts,
      timeoutMultiplier: config.timeoutMultiplier,
      defaultImage: config.defaultImage,
      ...(config.isolateVerifier !== undefined ? { isolateVerifier: config.isolateVerifier } : {}),
      ...(config.grading !== undefined ? { grading: config.grading } : {}),
      ...(config.limits ? { limits: config.limits as RunLimits } : {}),
      ...(config.container ? { container: config.container } : {}),
      ...(config.dataset ? { dataset: config.dataset } : {}),
      sources,
      proctorVersion: VERSION,
      logger: options.logger,
      signal: controller.signal,
    });
    try {
      summary = await followRun(handle, progress);
    } finally {
      process.off("SIGINT", onSignal);
      process.off("SIGTERM", onSignal);
    }

    // What changed: each trial whose verdict differs from the regraded run's, and the pins that differ.
    const before = new Map(parseResults(await readFile(join(from, "results.jsonl"), "utf8").catch(() => "")).results.map((r) => [r.trialId, r.status]));
    const after = parseResults(await readFile(join(runDir, "results.jsonl"), "utf8").catch(() => "")).results;
    const changed = after.filter((r) => before.get(r.trialId) !== undefined && before.get(r.trialId) !== r.status).map((r) => `${r.trialId} ${before.get(r.trialId)} -> ${r.status}`);
    const oldSummary = await readFile(join(from, "summary.json"), "utf8").then((t) => JSON.parse(t) as Partial<RunSummary>, () => null);
    const pinDiff = diffPins(oldSummary?.pins ?? config.pins ?? null, summary.pins ?? null);
    const table = renderRunSummary(summary);
    const lines = [
      `regrade of ${config.runId}: ${changed.length} verdict(s) changed${changed.length > 0 ? `: ${list(changed)}` : ""}`,
      ...(pinDiff.length > 0 ? [`pins differ: ${pinDiff.join(", ")}`] : []),
      `run directory: ${runDir}`,
    ];
    if (options.json) {
      err.write(`${table}\n${lines.join("\n")}\n`);
      out.write(`${JSON.stringify({ ...summary, runDir }, null, 2)}\n`);
    } else out.write(`\n${table}\n${lines.join("\n")}\n`);
    if (summary.status === "interrupted") {
      err.write(`interrupted: run proctor regrade ${options.runDir} again\n`);
      return EXIT_INTERRUPTED;
    }
    return 0;
  } finally {
    await lock.release({ discardUnstarted: true });
  }
}
