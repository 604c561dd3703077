import cliProgress from "cli-progress";
import type { Logger } from "@proctor/schema";
import { loadKeypair } from "@proctor/auth";
import { submitBatch, type WireEnvelope } from "@proctor/server";
import { UsageError } from "../errors";
import { formatDuration, percent, renderTable } from "../format";

export interface SubmitOptions {
  archive: string;
  server: string;
  keyFile?: string;
  token?: string;
  signedFor?: string;
  concurrentTasks?: number;
  json: boolean;
  logger: Logger;
}

interface TaskRow { task_id: string; outcome: string; reward: number; duration_ms: number; error: string | null }

/** `proctor submit`: sign (Epistula) and upload an archive, follow the batch live, print its table. */
export async function submitCommand(options: SubmitOptions): Promise<number> {
  const token = options.token ?? process.env.PROCTOR_TOKEN;
  let keypair;
  if (!token) {
    try {
      keypair = loadKeypair({ file: options.keyFile, logger: options.logger });
    } catch (error) {
      throw new UsageError(
        `no credentials: pass --key-file FILE, set PROCTOR_HOTKEY_URI (a mnemonic, 0x seed or //Dev URI) or PROCTOR_HOTKEY_FILE, or --token / PROCTOR_TOKEN (${error instanceof Error ? error.message : String(error)})`,
        { cause: error },
      );
    }
  }
  const tty = Boolean(process.stderr.isTTY);
  const bar = tty ? new cliProgress.SingleBar({ stream: process.stderr, format: "{bar} {value}/{total} | passed {passed} failed {failed}", hideCursor: true }, cliProgress.Presets.shades_classic) : null;
  const rows = new Map<string, TaskRow>();
  let passed = 0;
  let failed = 0;
  let total = 0;
  const onEvent = (event: WireEnvelope) => {
    if (event.event === "batch_started") {
      total = Number(event.data.total_tasks ?? 0);
      if (bar) bar.start(total, Number(event.data.skipped_tasks ?? 0), { passed, failed });
      else process.stderr.write(`batch ${event.batch_id} started: ${total} tasks\n`);
    } else if (event.event === "task_complete") {
      const row = event.data as unknown as TaskRow;
      rows.set(row.task_id, row);
      if (row.outcome === "passed") passed += 1;
      else failed += 1;
      if (bar) bar.update(passed + failed, { passed, failed });
      else process.stderr.write(`[${passed + failed}/${total}] ${row.outcome.toUpperCase()} ${row.task_id} reward=${row.reward}${row.error ? ` ${row.error}` : ""}\n`);
    } else if (event.event === "snapshot" && Array.isArray(event.data.tasks)) {
      for (const t of event.data.tasks as TaskRow[]) if (t.outcome) rows.set(t.task_id, t);
    }
  };
  const status = await submitBatch({
    server: options.server,
    archivePath: options.archive,
    keypair,
    token,
    signedFor: options.signedFor,
    concurrentTasks: options.concurrentTasks,
    // The client sends Content-Digest, so the server checks the signature before the upload.
    onUploadRetry: (r) => process.stderr.write(`server busy (${r.message}); retrying in ${r.delaySec} s (attempt ${r.attempt})\n`),
    onSubmitted: (s) => process.stderr.write(`submitted: batch ${s.batch_id}, ${s.total_tasks} tasks, ${s.concurrent_tasks} at once\n`),
    onEvent,
  }).finally(() => bar?.stop());
  if (options.json) {
    process.stdout.write(`${JSON.stringify(status, null, 2)}\n`);
  } else {
    const table = [...rows.values()]
      .sort((a, b) => a.task_id.localeCompare(b.task_id))
      .map((r) => [r.task_id, r.outcome, String(r.reward), formatDuration(r.duration_ms), r.error ?? ""]);
    process.stdout.write(`${renderTable(["task", "outcome", "reward", "time", "error"], table)}\n\n`);
    const rate = status.total_tasks > 0 ? status.passed_tasks / status.total_tasks : null;
    process.stdout.write(`batch ${status.batch_id} ${status.status}: ${status.passed_tasks}/${status.total_tasks} passed (${percent(rate)} of all tasks), mean reward ${status.aggregate_reward.toFixed(3)}\n`);
  }
  return status.status === "completed" ? 0 : 1;
}
