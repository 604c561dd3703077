export type {
  ExecCommand, ExecOptions, ExecResult, SandboxCreateOptions, ImageRequest, Sandbox, SandboxRuntime,
} from "./types";
export { SANDBOX_PATHS, SANDBOX_PATH_ENV, LABELS } from "./types";
export { SandboxError, RuntimeUnavailableError, ImageError, SandboxStartError, SandboxClosedError, TransferError } from "./errors";
