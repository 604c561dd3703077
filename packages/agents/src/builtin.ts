import { SANDBOX_PATHS } from "@proctor/sandbox";
import { execLogged, toRunResult } from "./capture";
import { MissingSolutionError } from "./errors";
import type { Agent } from "./types";

/**
 * Runs the task's reference solution: uploads `task.solution.dir` to /solution during setup,
 * then runs `task.solution.command` in the workdir. A task without a solution makes setup
 * throw MissingSolutionError.
 */
export function oracleAgent(): Agent {
  return {
    name: "oracle",
    async setup(ctx) {
      if (!ctx.task.solution) throw new MissingSolutionError(ctx.task.id);
      await ctx.sandbox.upload(ctx.task.solution.dir, SANDBOX_PATHS.solution);
    },
    async run(ctx) {
      if (!ctx.task.solution) throw new MissingSolutionError(ctx.task.id);
      return toRunResult(await execLogged(ctx, { shell: ctx.task.solution.command }));
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
