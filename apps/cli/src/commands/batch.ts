import { writeFile } from "node:fs/promises";
import { percent } from "../format";
import { batchTaskTable, createBatchProgress } from "@proctor/report";
import { clientFor, reconnectLine, type ServerCredentials } from "./submit";

export interface BatchCommandOptions extends ServerCredentials {
  batchId: string;
  json: boolean;
}

/** `proctor status <batch-id>`: the batch's status and per-task table (GET /batch/:id, /tasks). Exit 1 when it failed or was cancelled, else 0. */
export async function statusCommand(options: BatchCommandOptions): Promise<number> {
  const client = clientFor(options);
  const [status, tasks] = await Promise.all([client.status(options.batchId), client.tasks(options.batchId)]);
  if (options.json) {
    process.stdout.write(`${JSON.stringify({ ...status, tasks: tasks.tasks }, null, 2)}\n`);
  } else {
    process.stdout.write(`${batchTaskTable(tasks.tasks)}\n\n`);
    const rate = status.total_tasks > 0 ? status.passed_tasks / status.total_tasks : null;
    const where = status.queue_position === undefined ? "" : ` (position ${status.queue_position} in the queue)`;
    process.stdout.write(
      `batch ${status.batch_id} ${status.status}${where}: ${status.completed_tasks}/${status.total_tasks} done, ${status.passed_tasks} passed (${percent(rate)} of all tasks)\n`,
    );
  }
  return exitCodeOf(status.status);
}

/** `proctor follow <batch-id> [--since SEQ]`: follow a submitted batch live until it ends (reconnecting with `since`), then its table. */
export async function followCommand(options: BatchCommandOptions & { since?: number }): Promise<number> {
  const client = clientFor(options);
  const progress = createBatchProgress(process.stderr);
  await client
    .follow(options.batchId, { onEvent: progress.onEvent, onReconnect: reconnectLine, ...(options.since !== undefined ? { since: options.since } : {}) })
    .finally(() => progress.stop());
  const status = await client.status(options.batchId);
  if (options.json) process.stdout.write(`${JSON.stringify(status, null, 2)}\n`);
  else {
    process.stdout.write(`${batchTaskTable((await client.tasks(options.batchId)).tasks)}\n\n`);
    process.stdout.write(`batch ${status.batch_id} ${status.status}: ${status.passed_tasks}/${status.total_tasks} passed\n`);
  }
  return exitCodeOf(status.status);
}

function exitCodeOf(status: string): number {
  return status === "failed" || status === "cancelled" ? 1 : 0;
}

/**
 * `proctor receipt <batch-id> [-o FILE]`: the finished batch's signed receipt (GET
 * /batch/:id/receipt), on stdout or written to FILE, for `proctor verify-receipt`.
 */
export async function receiptCommand(options: Omit<BatchCommandOptions, "json"> & { out?: string }): Promise<number> {
  const receipt = await clientFor(options).receipt(options.batchId);
  const text = `${JSON.stringify(receipt, null, 2)}\n`;
  if (options.out) {
    await writeFile(options.out, text);
    process.stderr.write(`receipt of batch ${options.batchId} written to ${options.out} (check it: proctor verify-receipt ${options.out})\n`);
  } else process.stdout.write(text);
  return 0;
}
