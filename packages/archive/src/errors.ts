/** Which archive layout an upload was recognised as (by its magic bytes, never its file name). */
export type ArchiveFormat = "tar" | "tar.gz" | "zip";

/** The limits an extraction enforces; see `DEFAULT_LIMITS` for the defaults. */
export type LimitName =
  | "maxCompressedBytes"
  | "maxTotalBytes"
  | "maxEntries"
  | "maxFileBytes"
  | "maxCompressionRatio"
  | "maxPathDepth"
  | "maxNameLength"
  | "maxPathLength";

/** Stable, machine-readable reason for an `ArchiveError`. */
export type ArchiveErrorCode =
  | "UNSAFE_PATH"
  | "LINK_ESCAPE"
  | "LIMIT_EXCEEDED"
  | "UNSUPPORTED_ENTRY"
  | "CORRUPT_ARCHIVE"
  | "UNKNOWN_FORMAT"
  | "DESTINATION_NOT_EMPTY"
  | "ABORTED";

export interface ArchiveErrorOptions {
  /** The archive entry (path as written in the archive) the problem was found at, if any. */
  entry?: string;
  cause?: unknown;
}

/**
 * Base class of every error this package throws. `code` says what kind of problem it is,
 * `entry` names the archive entry it was found at (undefined when it concerns the whole archive).
 */
export class ArchiveError extends Error {
  readonly code: ArchiveErrorCode;
  readonly entry: string | undefined;

  constructor(code: ArchiveErrorCode, message: string, options: ArchiveErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = "ArchiveError";
    this.code = code;
    this.entry = options.entry;
  }
}

/** Thrown when an entry's path is absolute, climbs out with `..`, or is otherwise unusable (NUL bytes, empty). */
export class UnsafePathError extends ArchiveError {
  constructor(entry: string, reason: string, options: Omit<ArchiveErrorOptions, "entry"> = {}) {
    super("UNSAFE_PATH", `archive entry "${printable(entry)}" ${reason}; archives must only hold relative paths inside the archive`, { ...options, entry });
    this.name = "UnsafePathError";
  }
}

/**
 * Thrown when a hard or symbolic link points outside the destination, or when an entry would be
 * written through a symlink (e.g. a symlink `x -> /etc` followed by a file `x/passwd`).
 */
export class LinkEscapeError extends ArchiveError {
  readonly linkTarget: string;
  constructor(entry: string, linkTarget: string, reason: string, options: Omit<ArchiveErrorOptions, "entry"> = {}) {
    super("LINK_ESCAPE", `archive entry "${printable(entry)}" ${reason} (link target "${printable(linkTarget)}"); links must stay inside the archive`, { ...options, entry });
    this.name = "LinkEscapeError";
    this.linkTarget = linkTarget;
  }
}

/** Thrown as soon as one of the extraction limits is passed; `limit` names it, `limitValue` is its value. */
export class LimitExceededError extends ArchiveError {
  readonly limit: LimitName;
  readonly limitValue: number;
  readonly actual: number;
  constructor(limit: LimitName, limitValue: number, actual: number, message: string, options: ArchiveErrorOptions = {}) {
    const where = options.entry === undefined ? "" : `archive entry "${printable(options.entry)}": `;
    super("LIMIT_EXCEEDED", `${where}${message} (limit ${limit} = ${limitValue}, got ${actual}); make the archive smaller or raise the limit`, options);
    this.name = "LimitExceededError";
    this.limit = limit;
    this.limitValue = limitValue;
    this.actual = actual;
  }
}

/** Thrown for entries that are neither files, directories nor links: devices, fifos, sockets, sparse or unknown types. */
export class UnsupportedEntryError extends ArchiveError {
  readonly entryType: string;
  constructor(entry: string, entryType: string, options: Omit<ArchiveErrorOptions, "entry"> = {}) {
    super("UNSUPPORTED_ENTRY", `archive entry "${printable(entry)}" is a ${entryType}; only regular files, directories and links are accepted`, { ...options, entry });
    this.name = "UnsupportedEntryError";
    this.entryType = entryType;
  }
}

/** Thrown when the archive is truncated, fails a checksum, or cannot be parsed as the format its magic bytes announce. */
export class CorruptArchiveError extends ArchiveError {
  readonly format: ArchiveFormat | undefined;
  constructor(format: ArchiveFormat | undefined, detail: string, options: ArchiveErrorOptions = {}) {
    super("CORRUPT_ARCHIVE", `${format ?? "archive"} is corrupt or truncated${options.entry === undefined ? "" : ` at entry "${printable(options.entry)}"`}: ${detail}; re-create the archive and upload it again`, options);
    this.name = "CorruptArchiveError";
    this.format = format;
  }
}

/** Thrown when the first bytes are not those of a tar, gzip or zip file. */
export class UnknownFormatError extends ArchiveError {
  constructor(detail: string, options: Omit<ArchiveErrorOptions, "entry"> = {}) {
    super("UNKNOWN_FORMAT", `not a tar, tar.gz or zip archive: ${detail}; upload a .tar, .tar.gz/.tgz or .zip file`, options);
    this.name = "UnknownFormatError";
  }
}

/** Thrown when the destination directory exists and is not empty (nothing is written or deleted then). */
export class DestinationNotEmptyError extends ArchiveError {
  readonly destDir: string;
  constructor(destDir: string, options: Omit<ArchiveErrorOptions, "entry"> = {}) {
    super("DESTINATION_NOT_EMPTY", `destination ${destDir} already exists and is not empty; extract into a new or empty directory`, options);
    this.name = "DestinationNotEmptyError";
    this.destDir = destDir;
  }
}

/** Thrown when the caller's AbortSignal fires during extraction; the partial output is removed. */
export class ArchiveAbortedError extends ArchiveError {
  constructor(options: ArchiveErrorOptions = {}) {
    super("ABORTED", "archive extraction was aborted", options);
    this.name = "ArchiveAbortedError";
  }
}

/** Make an attacker-controlled name safe to put in a message: control characters escaped, length capped. */
export function printable(name: string): string {
  // eslint-disable-next-line no-control-regex
  const escaped = name.replace(/[\u0000-\u001f\u007f]/g, (c) => `\\x${c.charCodeAt(0).toString(16).padStart(2, "0")}`);
  return escaped.length > 200 ? `${escaped.slice(0, 200)}…(${escaped.length} chars)` : escaped;
}
