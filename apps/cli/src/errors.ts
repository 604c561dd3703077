/** A CLI failure with the process exit code it maps to (DESIGN.md "CLI": 2 usage, 3 runtime, 130 interrupted). */
export class CliError extends Error {
  override name = "CliError";
  constructor(message: string, readonly exitCode: number, options?: { cause?: unknown }) {
    super(message, options);
  }
}

/** Bad flags, bad arguments, or tasks that do not load. Exit 2. */
export class UsageError extends CliError {
  override name = "UsageError";
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, 2, options);
  }
}

/** The requested sandbox runtime cannot be used. Exit 3. */
export class RuntimeMissingError extends CliError {
  override name = "RuntimeMissingError";
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, 3, options);
  }
}

export const EXIT_INTERRUPTED = 130;

/** The run stopped on an error no trial can avoid (a rejected model key, an unknown model); finished trials are kept. */
export const EXIT_FATAL_AGENT = 4;

/** `--fail-on errors|failures`: the run finished, and a trial errored (or did not pass). Apart from 1 (an unwritable run directory, an unexpected error). */
export const EXIT_TRIALS_FAILED = 5;

/** A run budget (`--max-cost`, `--max-tokens`) was spent: no more trials started, the rest are not run; resume with a higher budget. */
export const EXIT_BUDGET = 6;
