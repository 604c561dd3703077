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

/** Thrown when a receipt cannot be built or a value cannot be put in canonical JSON. */
export class ReceiptError extends ReportError {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "ReceiptError";
  }
}

/**
 * Thrown when a receipt is unreadable or not a receipt of this format: `source` is its file (or
 * "receipt"), `field` the first field at fault (null when the whole file is, e.g. not JSON).
 */
export class ReceiptFormatError extends ReceiptError {
  readonly source: string;
  readonly field: string | null;
  constructor(source: string, field: string | null, problem: string, options?: { cause?: unknown }) {
    super(field === null ? `${source}: ${problem}` : `${source}: field ${field}: ${problem}`, options);
    this.name = "ReceiptFormatError";
    this.source = source;
    this.field = field;
  }
}
