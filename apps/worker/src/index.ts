import type { RunWorkerOptions, WorkerConfig } from "./worker";
export type { RunWorkerOptions, WorkerConfig } from "./worker";

/** Runs a worker until it is told to stop; its exit code. The queue and engine load on the first call, so importing this package for its command stays light. */
export async function runWorker(config: WorkerConfig, options: RunWorkerOptions = {}): Promise<number> {
  return (await import("./worker")).runWorker(config, options);
}
export { workerCommand } from "./program";
export { WorkerError, EXIT_INTERRUPTED } from "./errors";
