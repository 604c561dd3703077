import cliProgress from "cli-progress";
import { formatDuration, textTable } from "./text";

/** A task of a server batch as its routes and WebSocket show it (@proctor/client TaskJson). */
export interface BatchTaskRow {
  task_id: string;
  outcome: string | null;
  reward: number | null;
  duration_ms: number | null;
  error: string | null;
}

/** A batch's WebSocket message (@proctor/client WireEnvelope): the fields progress reads. */
interface BatchMessage {
  event: string;
  batch_id: string;
  data: Record<string, unknown>;
}

/** The per-task table of a batch, sorted by task id (pending tasks say so). */
export function batchTaskTable(tasks: Iterable<BatchTaskRow>): string {
  const rows = [...tasks]
    .sort((a, b) => a.task_id.localeCompare(b.task_id))
    .map((r) => [r.task_id, r.outcome ?? "pending", r.reward === null ? "" : String(r.reward), r.duration_ms === null ? "" : formatDuration(r.duration_ms), r.error ?? ""]);
  return textTable(["task", "outcome", "reward", "time", "error"], rows);
}

/**
 * Live output for a followed batch's WebSocket messages: a bar on a TTY, one line per finished
 * task otherwise. `tasks` collects the finished tasks (a snapshot's too) for the final table.
 */
export function createBatchProgress(
  stream: NodeJS.WritableStream & { isTTY?: boolean },
  options: { tty?: boolean } = {},
): { onEvent: (message: BatchMessage) => void; stop: () => void; tasks: Map<string, BatchTaskRow> } {
  const tty = options.tty ?? Boolean(stream.isTTY);
  const bar = tty ? new cliProgress.SingleBar({ stream, format: "{bar} {value}/{total} | passed {passed} failed {failed}", hideCursor: true }, cliProgress.Presets.shades_classic) : null;
  const tasks = new Map<string, BatchTaskRow>();
  let passed = 0;
  let failed = 0;
  let total = 0;
  const onEvent = (message: BatchMessage) => {
    if (message.event === "batch_started") {
      total = Number(message.data.total_tasks ?? 0);
      if (bar) bar.start(total, Number(message.data.skipped_tasks ?? 0), { passed, failed });
      else stream.write(`batch ${message.batch_id} started: ${total} tasks\n`);
    } else if (message.event === "task_complete") {
      const row = message.data as unknown as BatchTaskRow;
      tasks.set(row.task_id, row);
      if (row.outcome === "passed") passed += 1;
      else failed += 1;
      if (bar) bar.update(passed + failed, { passed, failed });
      else stream.write(`[${passed + failed}/${total}] ${String(row.outcome).toUpperCase()} ${row.task_id} reward=${row.reward}${row.error ? ` ${row.error}` : ""}\n`);
    } else if (message.event === "snapshot" && Array.isArray(message.data.tasks)) {
      total = Number(message.data.total_tasks ?? total);
      for (const t of message.data.tasks as BatchTaskRow[]) if (t.outcome) tasks.set(t.task_id, t);
    }
  };
  return { onEvent, stop: () => bar?.stop(), tasks };
}
