import { stat } from "node:fs/promises";
import type { Logger } from "@proctor/schema";
import { loadKeypair } from "@proctor/auth";
import { ProctorClient, type BatchStatusResponse, type ClientAuth } from "@proctor/client";
import { batchTaskTable, createBatchProgress } from "@proctor/report";
import { UsageError } from "../errors";
import { percent } from "../format";

/** How the CLI signs in to a server: --token / $PROCTOR_TOKEN (or a lone token in $PROCTOR_TOKENS), else a hotkey (--key-file, $PROCTOR_HOTKEY_URI / $PROCTOR_HOTKEY_FILE). */
export interface ServerCredentials {
  server: string;
  keyFile?: string;
  token?: string;
  signedFor?: string;
  logger: Logger;
}

export interface SubmitOptions extends ServerCredentials {
  archive: string;
  concurrentTasks?: number;
  /** --max-cost, --max-tokens, --trial-max-cost, --on-budget: the batch's budgets. */
  budget?: { maxCostUsd?: number; maxTokens?: number; trialMaxCostUsd?: number; onBudget?: "finish" | "stop" };
  json: boolean;
}

/**
 * The plain tokens of `PROCTOR_TOKENS`, the variable `proctor serve --auth token` reads
 * (comma- or space-separated; `sha256:<hex>` entries are hashes, no use to a client).
 */
function serverTokens(env: NodeJS.ProcessEnv): string[] {
  return (env.PROCTOR_TOKENS ?? "").split(/[\s,]+/).filter((t) => t !== "" && !t.startsWith("sha256:"));
}

/**
 * The bearer token: --token, else $PROCTOR_TOKEN, else $PROCTOR_TOKENS when it holds exactly one
 * plain token (so `export PROCTOR_TOKENS=...` serves a server and its clients in one shell).
 */
export function clientToken(token: string | undefined, env: NodeJS.ProcessEnv = process.env): string | undefined {
  if (token !== undefined) return token;
  if (env.PROCTOR_TOKEN) return env.PROCTOR_TOKEN;
  const listed = serverTokens(env);
  return listed.length === 1 ? listed[0] : undefined;
}

/** The typed client for `--server` with the caller's credentials; a UsageError naming the flags when there are none. */
export function clientFor(options: ServerCredentials): ProctorClient {
  const token = clientToken(options.token);
  let auth: ClientAuth = { token, signedFor: options.signedFor };
  if (!token) {
    try {
      auth = { keypair: loadKeypair({ file: options.keyFile, logger: options.logger }), signedFor: options.signedFor };
    } catch (error) {
      const several = serverTokens(process.env).length > 1 ? "; $PROCTOR_TOKENS holds several tokens: pick yours with --token or PROCTOR_TOKEN" : "";
      throw new UsageError(
        `no credentials: pass --key-file FILE, set PROCTOR_HOTKEY_URI (a mnemonic, 0x seed or //Dev URI) or PROCTOR_HOTKEY_FILE, or --token / PROCTOR_TOKEN (${error instanceof Error ? error.message : String(error)})${several}`,
        { cause: error },
      );
    }
  }
  try {
    const url = new URL(options.server);
    if (url.protocol !== "http:" && url.protocol !== "https:") throw new Error("not http(s)");
  } catch {
    throw new UsageError(`--server must be an http(s) URL such as http://127.0.0.1:8080, got "${options.server}"`);
  }
  return new ProctorClient({ server: options.server, ...auth });
}

/** What follow says while the server is away, so a wait is never silent. */
export function reconnectLine(info: { attempt: number; maxReconnects: number; reason: string; delayMs: number }): void {
  process.stderr.write(`lost the connection to the server (${info.reason}); reconnecting in ${(info.delayMs / 1000).toFixed(1)} s (attempt ${info.attempt} of ${info.maxReconnects})\n`);
}

/** `proctor submit`: sign (Epistula) and upload an archive, follow the batch live, print its table. */
export async function submitCommand(options: SubmitOptions): Promise<number> {
  const info = await stat(options.archive).catch(() => null);
  if (info === null) throw new UsageError(`${options.archive}: no such file; give the archive to submit (a .tar.gz, .tar or .zip holding tasks/ and agent_code/)`);
  if (info.isDirectory()) throw new UsageError(`${options.archive} is a directory; pack it first: tar czf submission.tar.gz -C ${options.archive} . && proctor submit submission.tar.gz --server ${options.server}`);
  const client = clientFor(options);
  const progress = createBatchProgress(process.stderr);
  const status = await client
    .submit({
      archivePath: options.archive,
      concurrentTasks: options.concurrentTasks,
      ...(options.budget ? { budget: options.budget } : {}),
      // The client sends Content-Digest, so the server checks the signature before the upload.
      onUploadRetry: (r) => process.stderr.write(`server busy (${r.message}); retrying in ${r.delaySec} s (attempt ${r.attempt})\n`),
      onSubmitted: (s) => process.stderr.write(`submitted: batch ${s.batch_id}, ${s.total_tasks} tasks, ${s.concurrent_tasks} at once\n`),
      onEvent: progress.onEvent,
      onReconnect: reconnectLine,
    })
    .finally(() => progress.stop());
  if (options.json) {
    process.stdout.write(`${JSON.stringify(status, null, 2)}\n`);
  } else {
    process.stdout.write(`${batchTaskTable(progress.tasks.values())}\n\n`);
    const rate = status.total_tasks > 0 ? status.passed_tasks / status.total_tasks : null;
    process.stdout.write(`batch ${status.batch_id} ${status.status}: ${status.passed_tasks}/${status.total_tasks} passed (${percent(rate)} of all tasks), mean reward ${status.aggregate_reward.toFixed(3)}${batchCost(status)}\n`);
  }
  return status.status === "completed" ? 0 : 1;
}

/** `, cost $0.1234` (and the unpriced tasks) when the server says what the batch cost. */
function batchCost(status: BatchStatusResponse): string {
  if (status.cost_usd === undefined) return "";
  const unpriced = status.unpriced_tasks ? ` (+${status.unpriced_tasks} unpriced task${status.unpriced_tasks === 1 ? "" : "s"})` : "";
  return `, cost $${status.cost_usd.toFixed(4)}${unpriced}`;
}
