import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { AgentSpec, Logger, TaskSpec, TrialResult } from "@proctor/schema";
import { DEFAULT_TRIAL_LIMITS, startRun } from "@proctor/engine";
import { loadTasks } from "@proctor/tasks";
import { UsageError } from "../errors";
import { DEFAULT_DOCKER_IMAGE, openRuntime, parseRuntimeChoice } from "../runtime";
import { createProgress, readFirstFailure, validationProblems } from "@proctor/report";
import { prepareSources } from "../sources";
import { resolveRemoteSources } from "../remote-sources";

export interface ValidateOptions {
  /** Task sources, as for `proctor run`: task dirs, archives, SWE-bench / TB2 rows. */
  paths: string[];
  /** --registry FILE|URL for sources that name a dataset. */
  registry?: string;
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

/**
 * `proctor tasks validate`: runs the oracle, then nop, over every task with the engine (the same
 * trials `proctor run` makes). A task is valid when the oracle passes (SWE-bench: resolves) and nop
 * scores 0 without an error. Every broken task is named with the failing tests or checks.
 * Returns the exit code: 0 all valid, 1 some broken, 2 a task did not load.
 */
export async function validateCommand(options: ValidateOptions): Promise<number> {
  const out = options.stdout ?? process.stdout;
  const err = options.stderr ?? process.stderr;
  if (options.paths.length === 0) throw new UsageError("give at least one task source: proctor tasks validate <source>... (a task dir, a dir of tasks, an archive, or dataset rows)");
  const root = await mkdtemp(join(tmpdir(), "proctor-validate-"));
  const results = new Map<string, Outcome>();
  let tasks: TaskSpec[] = [];
  const broken: string[] = [];
  try {
    const remote = await resolveRemoteSources(options.paths, { registry: options.registry, err });
    const prepared = await prepareSources(remote.localPaths, join(root, "input"), options.logger);
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
      // nop scoring 0 is what a valid task does: its line names no log (its run directory goes when every task is valid).
      const progress = createProgress(err, { runDir, ...(kind === "nop" ? { showLog: (r: TrialResult) => !(r.status === "failed" && r.reward === 0) } : {}) });
      const handle = startRun({
        runId: `validate-${kind}`,
        runDir,
        tasks,
        agent: { kind } as AgentSpec,
        runtime,
        concurrency: options.concurrency,
        attempts: 1,
        defaultImage: options.defaultImage ?? (runtime.name === "docker" ? DEFAULT_DOCKER_IMAGE : null),
        // The limits `proctor run` gives a task that names none: a valid task fits in them or says what it needs.
        limits: { defaults: { ...DEFAULT_TRIAL_LIMITS } },
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
    for (const task of tasks) {
      const r = results.get(task.id) ?? {};
      const failure = r.oracle ? await readFirstFailure(r.oracle, join(root, "validate-oracle", "trials", r.oracle.trialId)) : null;
      const problems = validationProblems(r, failure);
      if (problems.length > 0) broken.push([`  ${task.id}`, ...problems.map((p) => `    ${p}`)].join("\n"));
    }
  } finally {
    // The logs the progress lines name stay while they explain a broken task.
    if (options.keep || broken.length > 0) err.write(`run directories kept in ${root} (trials/<id>/verifier/ holds the tests' output; remove the directory when done)\n`);
    else await rm(root, { recursive: true, force: true });
  }

  if (broken.length === 0) {
    out.write(`all ${tasks.length} task(s) valid: the oracle passes and nop scores 0 on each\n`);
    return 0;
  }
  out.write(`${broken.length} of ${tasks.length} task(s) are broken:\n${broken.join("\n")}\n`);
  return 1;
}
