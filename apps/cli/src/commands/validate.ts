import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import type { AgentSpec, Logger, TaskSpec, TrialResult } from "@proctor/schema";
import { startRun } from "@proctor/engine";
import { loadTasks } from "@proctor/tasks";
import { UsageError } from "../errors";
import { DEFAULT_DOCKER_IMAGE, openRuntime, parseRuntimeChoice } from "../runtime";
import { createProgress } from "@proctor/report";
import { prepareSources } from "../sources";

export interface ValidateOptions {
  /** Task sources, as for `proctor run`: task dirs, archives, SWE-bench / TB2 rows. */
  paths: string[];
  runtime: string;
  concurrency: number;
  defaultImage?: string;
  /** --repos-dir: bare mirrors `<owner>__<name>.git` for SWE-bench rows. */
  reposDir?: string;
  /** --image: image template for SWE-bench rows without image_name. */
  image?: string;
  /** --env-setup: per-repo, per-version setup for SWE-bench rows. */
  envSetup?: string;
  include?: string[];
  exclude?: string[];
  logger: Logger;
  keep: boolean;
  stdout?: NodeJS.WritableStream;
  stderr?: NodeJS.WritableStream & { isTTY?: boolean };
}

type AgentKind = "oracle" | "nop";
interface Outcome { oracle?: TrialResult; nop?: TrialResult }

const MAX_NAMED = 8;

function listed(ids: readonly string[]): string {
  return ids.length > MAX_NAMED ? `${ids.slice(0, MAX_NAMED).join(", ")} and ${ids.length - MAX_NAMED} more` : ids.join(", ");
}

function firstLine(text: string): string {
  const line = text.split("\n")[0] ?? "";
  return line.length > 200 ? `${line.slice(0, 197)}...` : line;
}

/** What went wrong with the oracle's trial, naming the tests (or checks) that failed. */
function oracleProblem(r: TrialResult | undefined): string | null {
  if (!r) return "oracle did not run";
  if (r.status === "passed") return null;
  if (r.status === "error") return `oracle error (${r.error?.kind}: ${firstLine(r.error?.message ?? "")})`;
  if (r.grading) {
    const parts = [];
    if (r.grading.failToPass.failure.length > 0) parts.push(`FAIL_TO_PASS failing: ${listed(r.grading.failToPass.failure.map((id) => `${id} (${r.grading?.tests[id] ?? "not run"})`))}`);
    if (r.grading.passToPass.failure.length > 0) parts.push(`PASS_TO_PASS failing: ${listed(r.grading.passToPass.failure.map((id) => `${id} (${r.grading?.tests[id] ?? "not run"})`))}`);
    return `oracle does not resolve: ${parts.join("; ") || "no failing test named"}`;
  }
  const failing = (r.checks ?? []).filter((c) => !c.passed).map((c) => `${c.name} (${c.timedOut ? "timed out" : `exit ${c.exitCode}`})`);
  return `oracle reward ${r.reward}, expected 1${failing.length > 0 ? `; failing checks: ${listed(failing)}` : ""}`;
}

/** What went wrong with nop's trial: it must score 0 without an error. */
function nopProblem(r: TrialResult | undefined): string | null {
  if (!r) return "nop did not run";
  if (r.status === "error") return `nop error (${r.error?.kind}: ${firstLine(r.error?.message ?? "")})`;
  if (r.status === "failed" && r.reward === 0) return null;
  if (r.grading) {
    // The tests that should fail before the fix but pass with no change at all.
    const passing = r.grading.failToPass.success;
    return `nop resolves: ${passing.length > 0 ? `FAIL_TO_PASS already passing without a fix: ${listed(passing)}` : "every FAIL_TO_PASS test passes without a fix"}`;
  }
  const passing = (r.checks ?? []).filter((c) => c.passed).map((c) => c.name);
  return `nop reward ${r.reward}, expected 0${passing.length > 0 ? `; checks passing without a fix: ${listed(passing)}` : ""}`;
}

/**
 * `proctor tasks validate`: runs the oracle, then nop, over every task with the engine (the same
 * trials `proctor run` makes). A task is valid when the oracle passes (SWE-bench: resolves) and nop
 * scores 0 without an error. Every broken task is named with the failing tests or checks.
 * Returns the exit code: 0 all valid, 1 some broken, 2 a task did not load.
 */
export async function validateCommand(options: ValidateOptions): Promise<number> {
  const out = options.stdout ?? process.stdout;
  const err = options.stderr ?? process.stderr;
  if (options.paths.length === 0) throw new UsageError("proctor tasks validate: give at least one task source (a task dir, a dir of tasks, an archive, or dataset rows)");
  const root = await mkdtemp(join(tmpdir(), "proctor-validate-"));
  const results = new Map<string, Outcome>();
  let tasks: TaskSpec[];
  try {
    const prepared = await prepareSources(options.paths.map((p) => resolve(p)), join(root, "input"), options.logger);
    const loaded = await loadTasks(prepared.taskSources, {
      include: options.include ?? [],
      exclude: options.exclude ?? [],
      ...(options.reposDir !== undefined ? { reposDir: options.reposDir } : {}),
      ...(options.image !== undefined ? { imageTemplate: options.image } : {}),
      ...(options.envSetup !== undefined ? { envSetup: options.envSetup } : {}),
    });
    if (loaded.errors.length > 0) {
      err.write(`proctor: ${loaded.errors.length} task(s) failed to load:\n${loaded.errors.map((e) => `  ${e.message}`).join("\n")}\n`);
      return 2;
    }
    tasks = loaded.tasks;
    if (tasks.length === 0) throw new UsageError(`no tasks found in ${options.paths.join(", ")}`);
    const runtime = await openRuntime(parseRuntimeChoice(options.runtime), options.logger);
    for (const kind of ["oracle", "nop"] as AgentKind[]) {
      err.write(`validate: ${kind} on ${tasks.length} task(s)\n`);
      const runDir = join(root, `validate-${kind}`);
      const progress = createProgress(err, { runDir });
      const handle = startRun({
        runId: `validate-${kind}`,
        runDir,
        tasks,
        agent: { kind } as AgentSpec,
        runtime,
        concurrency: options.concurrency,
        attempts: 1,
        defaultImage: options.defaultImage ?? (runtime.name === "docker" ? DEFAULT_DOCKER_IMAGE : null),
        logger: options.logger,
      });
      const unsubscribe = handle.bus.subscribe((event) => {
        progress.onEvent(event);
        if (event.type === "trial_finished") {
          const entry = results.get(event.taskId) ?? {};
          entry[kind] = event.data;
          results.set(event.taskId, entry);
        }
      });
      await handle.done.finally(() => {
        unsubscribe();
        progress.stop();
      });
    }
  } finally {
    if (options.keep) err.write(`run directories kept in ${root}\n`);
    else await rm(root, { recursive: true, force: true });
  }

  const broken: string[] = [];
  for (const task of tasks) {
    const r = results.get(task.id) ?? {};
    const problems = [oracleProblem(r.oracle), nopProblem(r.nop)].filter((p): p is string => p !== null);
    if (problems.length > 0) broken.push([`  ${task.id}`, ...problems.map((p) => `    ${p}`)].join("\n"));
  }
  if (broken.length === 0) {
    out.write(`all ${tasks.length} task(s) valid: the oracle passes and nop scores 0 on each\n`);
    return 0;
  }
  out.write(`${broken.length} of ${tasks.length} task(s) are broken:\n${broken.join("\n")}\n`);
  // The logs the progress lines named were in the removed run directories.
  if (!options.keep) err.write("the validation run directories were removed; run again with --keep to read the trials' logs\n");
  return 1;
}
