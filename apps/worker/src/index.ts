export { runWorker } from "./worker";
export type { RunWorkerOptions, WorkerConfig } from "./worker";
export { workerCommand } from "./program";
export { WorkerError, EXIT_INTERRUPTED } from "./errors";
