import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { formatWorkerTrialLine, QueueUrlError, startWorker } from "@proctor/queue";
import { DockerRuntime } from "@proctor/sandbox-docker";
import type { Logger } from "@proctor/schema";
import { EXIT_INTERRUPTED, UsageError } from "../errors";
import { openRuntime, parseRuntimeChoice } from "../runtime";

export interface WorkerCommandOptions {
  queue: string;
  concurrency: number;
  runtime: string;
  name?: string;
  /** --worker-token, else PROCTOR_WORKER_TOKEN: for a server's GET /v1/bundles/:sha. */
  workerToken?: string;
  /** Bundle cache and scratch trial dirs; default <tmp>/proctor-worker. */
  workDir?: string;
  logger: Logger;
  stderr?: NodeJS.WritableStream;
  /** Tests: stop like SIGTERM does. */
  signal?: AbortSignal;
}

/** `proctor worker --queue URL`: runs trial jobs until SIGTERM/SIGINT, which drains (running trials finish, then exit 0). */
export async function workerCommand(options: WorkerCommandOptions): Promise<number> {
  const err = options.stderr ?? process.stderr;
  const runtime = await openRuntime(parseRuntimeChoice(options.runtime), options.logger);
  const token = options.workerToken ?? process.env.PROCTOR_WORKER_TOKEN;
  const lockMs = Number(process.env.PROCTOR_WORKER_LOCK_MS ?? 0) || 0;
  let handle;
  try {
    handle = await startWorker({
      url: options.queue,
      runtime,
      concurrency: options.concurrency,
      workDir: resolve(options.workDir ?? join(tmpdir(), "proctor-worker")),
      logger: options.logger,
      ...(options.name ? { name: options.name } : {}),
      ...(token ? { token } : {}),
      containers: runtime instanceof DockerRuntime ? runtime.docker : null,
      // One line per trial started and finished, so the worker's log says what it ran.
      onTrial: (update) => err.write(`${formatWorkerTrialLine(update)}\n`),
      // Tests: find a killed worker's jobs sooner than BullMQ's 30 s lock.
      ...(lockMs ? { lockDurationMs: lockMs, stalledIntervalMs: lockMs } : {}),
    });
  } catch (error) {
    if (error instanceof QueueUrlError) throw new UsageError(error.message, { cause: error });
    throw error;
  }
  err.write(`worker ${handle.name} ready: queue ${options.queue.replace(/\/\/[^@/]*@/, "//")}, runtime ${runtime.name}, ${options.concurrency} trial(s) at once (SIGTERM drains)\n`);

  let stopping = false;
  const onSignal = (name: string) => () => {
    if (stopping) {
      err.write(`${name} again: exiting now; running trials are lost to this worker and run again elsewhere\n`);
      process.exit(EXIT_INTERRUPTED);
    }
    stopping = true;
    err.write(`${name}: draining: no new trials; running ones finish, then the worker exits\n`);
    void handle.drain();
  };
  const sigint = onSignal("SIGINT");
  const sigterm = onSignal("SIGTERM");
  process.on("SIGINT", sigint);
  process.on("SIGTERM", sigterm);
  options.signal?.addEventListener("abort", () => void handle.drain(), { once: true });
  try {
    await handle.closed;
  } finally {
    process.off("SIGINT", sigint);
    process.off("SIGTERM", sigterm);
  }
  err.write(`worker ${handle.name} stopped\n`);
  return 0;
}
