export type { RunWorkerOptions, WorkerConfig } from "./worker";
export { runWorker, workerCommand } from "./program";
export { WorkerError, EXIT_INTERRUPTED } from "./errors";
