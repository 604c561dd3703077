/** Base of every error @proctor/queue throws. */
export class QueueError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "QueueError";
  }
}

/** A queue URL that is not `redis://[user:pass@]HOST:PORT[/DB]` (thrown before anything connects). */
export class QueueUrlError extends QueueError {
  constructor(
    message: string,
    readonly url: string,
  ) {
    super(message);
    this.name = "QueueUrlError";
  }
}

/** Redis did not answer when a run or a server started (nothing was queued). */
export class QueueUnreachableError extends QueueError {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "QueueUnreachableError";
  }
}

/**
 * A task bundle a worker could not get or must not use: not found, refused by the server (401
 * for a wrong worker token), or its bytes do not hash to the sha256 the job names (tampered).
 */
export class BundleError extends QueueError {
  constructor(
    message: string,
    readonly sha256: string,
    readonly statusCode: number | null = null,
    options?: { cause?: unknown },
  ) {
    super(message, options);
    this.name = "BundleError";
  }
}

/** A run the queue cannot carry (an Agent object, a host path it cannot ship). */
export class DispatchError extends QueueError {
  constructor(message: string) {
    super(message);
    this.name = "DispatchError";
  }
}

/** A job names a published task or run record (by sha256) that is not in Redis or does not match its hash. */
export class SpecError extends QueueError {
  constructor(
    message: string,
    readonly sha256: string,
  ) {
    super(message);
    this.name = "SpecError";
  }
}
