import picomatch from "picomatch";
import type { TrialResult } from "@proctor/schema";

/** The `--retry` words that pick trials by outcome; anything else is a task id (or glob). */
export const RETRY_KINDS = ["errors", "infra", "agent-errors"] as const;

/**
 * Which finished trials a resume runs again, from `--retry` values: `errors` (every errored
 * trial), `infra` (infra errors), `agent-errors` (agent errors), or task ids and globs (every
 * attempt of those tasks). A trial matching any value is picked.
 */
export function retrySelector(values: readonly string[]): (result: TrialResult) => boolean {
  const kinds = new Set(values.filter((v) => (RETRY_KINDS as readonly string[]).includes(v)));
  const tasks = values.filter((v) => !kinds.has(v));
  const taskMatch = tasks.length > 0 ? picomatch(tasks) : () => false;
  return (r) =>
    (kinds.has("errors") && r.status === "error") ||
    (kinds.has("infra") && r.error?.kind === "infra") ||
    (kinds.has("agent-errors") && r.error?.kind === "agent") ||
    taskMatch(r.taskId);
}
