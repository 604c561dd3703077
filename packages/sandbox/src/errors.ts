/** Base class of every error a sandbox runtime throws. */
export class SandboxError extends Error {
  override name = "SandboxError";
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
  }
}

/** The runtime cannot be used at all (no daemon, missing binary). Infra. */
export class RuntimeUnavailableError extends SandboxError {
  override name = "RuntimeUnavailableError";
}

/**
 * A runtime was configured wrongly (a bad option or environment variable, e.g. an unknown
 * PROCTOR_OVERLAY_XATTRS value): the user's mistake, not the host's; fixing it needs no engine.
 */
export class SandboxConfigError extends SandboxError {
  override name = "SandboxConfigError";
}

/** The image could not be used, pulled or built. Infra. */
export class ImageError extends SandboxError {
  override name = "ImageError";
  constructor(message: string, readonly image: string | null, options?: { cause?: unknown }) {
    super(message, options);
  }
}

/** Creating or starting the sandbox failed. Infra. */
export class SandboxStartError extends SandboxError {
  override name = "SandboxStartError";
}

/**
 * The sandbox stopped under an operation: something inside it ended its main process (an agent
 * running `kill -9 -1`, the kernel's OOM killer). Not the runtime's fault, so not retried.
 */
export class SandboxStoppedError extends SandboxError {
  override name = "SandboxStoppedError";
}

/** An operation on a sandbox that is already killed. */
export class SandboxClosedError extends SandboxError {
  override name = "SandboxClosedError";
}

/** A file transfer failed or exceeded its limit. */
export class TransferError extends SandboxError {
  override name = "TransferError";
  constructor(message: string, readonly path: string, options?: { cause?: unknown }) {
    super(message, options);
  }
}

/** An operation run through `withTimeout` did not finish within its time limit. */
export class OperationTimeoutError extends SandboxError {
  override name = "OperationTimeoutError";
  constructor(message: string, readonly timeoutMs: number, options?: { cause?: unknown }) {
    super(message, options);
  }
}

/**
 * The sandbox was stopped or removed from outside (a daemon restart, `docker stop`), not by its
 * own processes: an infra failure the engine retries in a fresh sandbox.
 */
export class SandboxLostError extends SandboxError {
  override name = "SandboxLostError";
}
