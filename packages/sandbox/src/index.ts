export type {
  ExecCommand, ExecOptions, ExecResult, SandboxCreateOptions, SandboxMount, ContainerSettings, ImageRequest, ImageBuildUpdate, Sandbox, SandboxRuntime, SandboxCapabilities, FileChange, SandboxProcess, DownloadOptions, DownloadReport,
  FileAudit, FileAuditReport, FileAuditProcess, FileAccess,
} from "./types";
export { SANDBOX_PATHS, SANDBOX_PATH_ENV, LABELS } from "./types";
export {
  SandboxError, RuntimeUnavailableError, SandboxConfigError, ImageError, SandboxStartError, SandboxStoppedError, SandboxLostError, SandboxClosedError, TransferError, OperationTimeoutError,
} from "./errors";
export { LocalRuntime, LocalSandbox, LOCAL_ROOT_PREFIX, DEFAULT_ENV_ALLOWLIST, LOCAL_CAPABILITIES } from "./local";
export type { LocalRuntimeOptions } from "./local";
export { OutputCollector, buildExecResult, exitCodeFromSignal, DEFAULT_MAX_OUTPUT_BYTES } from "./output";
export { checkedEntries, normalizeSandboxPath, hostPathOf, sandboxPathEnv } from "./paths";
export { CappedFile } from "./capped-file";
export { copyTreeBounded } from "./bounded-copy";
export { ownedTempPrefix, makeOwnedTempDir, findOrphanTempDirs, removeOrphanTempDirs, removeTreeWithoutStat } from "./owned-temp";
export { SlotPool, Slot, SlotPoolExhaustedError, SlotGoneError, SlotPathError, SLOT_ENV } from "./slots";
export type { SlotPoolOptions, SlotRequest, SlotRepo, SlotPoolStats, BatchItem } from "./slots";
export { raceSignal } from "./signal";
