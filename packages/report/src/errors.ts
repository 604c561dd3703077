/** Base of this package's errors. */
export class ReportError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "ReportError";
  }
}

/** Thrown when a path is not a readable run directory. */
export class RunReadError extends ReportError {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "RunReadError";
  }
}

/** Thrown when a format cannot show what was asked (e.g. swebench of two runs). */
export class FormatError extends ReportError {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "FormatError";
  }
}
