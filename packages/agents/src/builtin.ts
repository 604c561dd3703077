import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { SANDBOX_PATHS } from "@proctor/sandbox";
import { applyDiff } from "./apply-diff";
import { execLogged, toRunResult } from "./capture";
import { MissingSolutionError } from "./errors";
import type { Agent } from "./types";

/**
 * Runs the task's reference solution: uploads `task.solution.dir` to /solution during setup,
 * then runs `task.solution.command` in the workdir. A solution that is a diff
 * (`task.solution.patch`, SWE-bench's gold patch) is applied in the workdir instead, with the
 * patches agent's chain; one that applies nowhere is a `setup` error (the task is broken, no
 * agent could have done better). A task without a solution makes setup throw MissingSolutionError.
 */
export function oracleAgent(): Agent {
  return {
    name: "oracle",
    async setup(ctx) {
      if (!ctx.task.solution) throw new MissingSolutionError(ctx.task.id);
      if (ctx.task.solution.patch !== undefined) return;
      await ctx.sandbox.upload(ctx.task.solution.dir, SANDBOX_PATHS.solution);
    },
    async run(ctx) {
      const solution = ctx.task.solution;
      if (!solution) throw new MissingSolutionError(ctx.task.id);
      if (solution.patch === undefined) return toRunResult(await execLogged(ctx, { shell: solution.command }));
      const started = Date.now();
      const outcome = await applyDiff(ctx, await readFile(join(solution.dir, solution.patch), "utf8"), "");
      const durationMs = Date.now() - started;
      if (outcome.applied) return { exitCode: 0, timedOut: false, aborted: false, durationMs, outputTruncated: false };
      const run = { exitCode: outcome.timedOut || outcome.aborted ? null : 1, timedOut: outcome.timedOut, aborted: outcome.aborted, durationMs, outputTruncated: outcome.outputTruncated };
      return outcome.timedOut || outcome.aborted ? run : { ...run, error: `the task's gold patch does not apply: ${outcome.why}`, errorKind: "setup" };
    },
  };
}

/** Does nothing and "exits" 0: the baseline every real task must fail. */
export function nopAgent(): Agent {
  return {
    name: "nop",
    async run() {
      return { exitCode: 0, timedOut: false, aborted: false, durationMs: 0, outputTruncated: false };
    },
  };
}
