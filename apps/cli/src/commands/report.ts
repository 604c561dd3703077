import { writeFile } from "node:fs/promises";
import { resolve } from "node:path";
import { FORMATS, LEADERBOARD_FORMATS, ReportError, findRunDirs, loadRun, pinsOf, pinsWarning, renderLeaderboard, renderReport, withFirstFailures, type LeaderboardFormat, type ReportFormat } from "@proctor/report";
import { UsageError } from "../errors";

export interface ReportOptions {
  /** Run directories; two give a paired comparison (the second against the first). */
  runDirs: string[];
  format: ReportFormat;
  /** Write here instead of stdout. */
  out?: string;
  /** Bootstrap seed, so the same runs always print the same intervals. */
  seed?: number;
  /** The leaderboard over the runs (run dirs, or dirs holding run dirs) instead of per-run reports. */
  leaderboard?: boolean;
}

/** `proctor report RUN... [--format F] [-o FILE]` (`--leaderboard`: one leaderboard over the runs): the run's numbers with intervals and every failed/errored trial with its reason. */
export async function reportCommand(options: ReportOptions): Promise<number> {
  if (!FORMATS.includes(options.format)) throw new UsageError(`--format must be one of ${FORMATS.join(", ")}, got "${options.format}"`);
  if (options.leaderboard && !(LEADERBOARD_FORMATS as readonly string[]).includes(options.format)) {
    throw new UsageError(`--leaderboard prints --format ${LEADERBOARD_FORMATS.join(", ")}, got "${options.format}"`);
  }
  let text: string;
  try {
    if (options.leaderboard) {
      const dirs = await findRunDirs(options.runDirs);
      if (dirs.length === 0) throw new UsageError(`no run directories in ${options.runDirs.join(", ")}`);
      text = renderLeaderboard(await Promise.all(dirs.map((dir) => loadRun(dir))), options.format as LeaderboardFormat);
    } else {
      const runs = await Promise.all(options.runDirs.map(async (dir) => withFirstFailures(await loadRun(dir))));
      text = await renderReport(runs, options.format, { seed: options.seed });
      // Two runs that ran different things: said on stderr too, whatever the format (the table says it first as well).
      const [a, b] = runs;
      const warning = runs.length === 2 && a && b ? pinsWarning(pinsOf(a), pinsOf(b)) : null;
      if (warning && (options.out !== undefined || (options.format !== "table" && options.format !== "md"))) process.stderr.write(`proctor: warning: ${warning}\n`);
    }
  } catch (error) {
    if (error instanceof ReportError) throw new UsageError(error.message, { cause: error });
    throw error;
  }
  if (options.out) {
    await writeFile(resolve(options.out), text);
    process.stderr.write(`proctor: wrote ${options.format} report to ${options.out}\n`);
  } else {
    process.stdout.write(text);
  }
  return 0;
}
