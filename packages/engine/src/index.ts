export { startRun } from "./run";
export type { RunOptions, RunHandle } from "./run";
export { runTrial, trialIdOf, isRetryableInfra, CHECK_OUTPUT_BYTES, KILL_STRAYS_SCRIPT } from "./trial";
export type { TrialEnvironment } from "./trial";
export { buildRunConfig, configHash, describeConfigChanges, hashDirectory } from "./config";
export type { StoredRunConfig } from "./config";
export { RepoCache, repoUrl } from "./workspace";
export { writeJsonAtomic } from "./store";
export { EngineError, ConfigMismatchError, RunDirectoryError, WorkspaceError } from "./errors";
