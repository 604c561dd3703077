import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import type { AgentSpec, Logger, TrialResult } from "@proctor/schema";
import { startRun } from "@proctor/engine";
import { loadTasks } from "@proctor/tasks";
import { UsageError } from "../errors";
import { DEFAULT_DOCKER_IMAGE, openRuntime, parseRuntimeChoice } from "../runtime";
import { renderTable } from "../format";
import { createProgress } from "../progress";

export interface ValidateOptions {
  paths: string[];
  runtime: string;
  concurrency: number;
  defaultImage?: string;
  logger: Logger;
  keep: boolean;
}

/** `proctor tasks validate`: the oracle must score 1 and nop 0 on every task. Returns the exit code. */
export async function validateCommand(options: ValidateOptions): Promise<number> {
  const loaded = await loadTasks(options.paths.map((p) => resolve(p)), {});
  if (loaded.errors.length > 0) {
    process.stdout.write(`${loaded.errors.length} task(s) failed to load:\n${loaded.errors.map((e) => `  ${e.message}`).join("\n")}\n`);
    return 2;
  }
  if (loaded.tasks.length === 0) throw new UsageError(`no tasks found in ${options.paths.join(", ")}`);
  const runtime = await openRuntime(parseRuntimeChoice(options.runtime), options.logger);
  const root = await mkdtemp(join(tmpdir(), "proctor-validate-"));
  const results = new Map<string, { oracle?: TrialResult; nop?: TrialResult }>();
  try {
    for (const agent of [{ kind: "oracle" }, { kind: "nop" }] as AgentSpec[]) {
      const progress = createProgress(process.stderr);
      const handle = startRun({
        runId: `validate-${agent.kind}`,
        runDir: join(root, `validate-${agent.kind}`),
        tasks: loaded.tasks,
        agent,
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
          entry[agent.kind as "oracle" | "nop"] = event.data;
          results.set(event.taskId, entry);
        }
      });
      await handle.done.finally(() => {
        unsubscribe();
        progress.stop();
      });
    }
  } finally {
    if (options.keep) process.stderr.write(`run directories kept in ${root}\n`);
    else await rm(root, { recursive: true, force: true });
  }

  const describe = (r: TrialResult | undefined) =>
    !r ? "not run" : r.status === "error" ? `error (${r.error?.kind}: ${r.error?.message})` : `reward ${r.reward}`;
  const broken: string[][] = [];
  for (const task of loaded.tasks) {
    const r = results.get(task.id) ?? {};
    const problems: string[] = [];
    if (r.oracle?.status !== "passed") problems.push(`oracle ${describe(r.oracle)}, expected a pass`);
    if (!r.nop || r.nop.status !== "failed" || r.nop.reward !== 0) problems.push(`nop ${describe(r.nop)}, expected reward 0`);
    if (problems.length > 0) broken.push([task.id, problems.join("; ")]);
  }
  if (broken.length === 0) {
    process.stdout.write(`all ${loaded.tasks.length} tasks valid: oracle passes and nop scores 0 on each\n`);
    return 0;
  }
  process.stdout.write(`${broken.length} of ${loaded.tasks.length} tasks are broken:\n${renderTable(["task", "problem"], broken)}\n`);
  return 1;
}
