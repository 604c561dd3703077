import type { TrialStatus } from "@proctor/schema";

/** What a worker tells its host about one trial job: it started, or it ended (with a result, or without one). */
export type WorkerTrialUpdate =
  | { event: "started"; runId: string; trialId: string; attempt: number }
  | { event: "finished"; runId: string; trialId: string; status: TrialStatus; durationMs: number; error: string | null }
  /** No result from this worker: the job runs again (an infra error, here or elsewhere) or the worker was stopped. */
  | { event: "released"; runId: string; trialId: string; reason: string; durationMs: number };

function seconds(ms: number): string {
  const s = ms / 1000;
  if (s < 60) return `${s.toFixed(1)}s`;
  const m = Math.floor(s / 60);
  return `${m}m${String(Math.round(s - m * 60)).padStart(2, "0")}s`;
}

function firstLine(text: string, max = 160): string {
  const line = text.split("\n")[0] ?? "";
  return line.length > max ? `${line.slice(0, max - 3)}...` : line;
}

/**
 * One line per trial event for a worker's log, e.g.
 * `started  run r1 trial fix-git__1 (job attempt 1)`,
 * `finished run r1 trial fix-git__1 passed in 12.3s`,
 * `finished run r1 trial fix-git__1 error in 2.0s: infra: image missing`.
 */
export function formatWorkerTrialLine(update: WorkerTrialUpdate): string {
  const what = `run ${update.runId} trial ${update.trialId}`;
  if (update.event === "started") return `started  ${what} (job attempt ${update.attempt})`;
  if (update.event === "released") return `released ${what} after ${seconds(update.durationMs)}: ${firstLine(update.reason)}`;
  return `finished ${what} ${update.status} in ${seconds(update.durationMs)}${update.error ? `: ${firstLine(update.error)}` : ""}`;
}
