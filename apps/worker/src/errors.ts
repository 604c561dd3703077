/** A worker that cannot start: bad configuration (exit 2) or no sandbox runtime (exit 3). The message names the flag or variable and the fix. */
export class WorkerError extends Error {
  override name = "WorkerError";
  constructor(
    message: string,
    readonly exitCode: 2 | 3,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

/** Exit code after a second SIGTERM/SIGINT: running trials were given up (they run again elsewhere). */
export const EXIT_INTERRUPTED = 130;
