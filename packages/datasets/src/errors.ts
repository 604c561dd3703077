/**
 * Base of every error this package throws on purpose. The message is one line saying what was
 * wrong and what to do; `exitCode` is what a CLI should exit with (2: the input is wrong and
 * retrying will not help; 1: something could not be reached, a retry may).
 */
export class DatasetError extends Error {
  override name = "DatasetError";
  constructor(message: string, readonly exitCode: 1 | 2 = 2, options?: { cause?: unknown }) {
    super(message, options);
  }
}

/** A source string that is neither NAME@VERSION, org/name@ref nor git+URL[@ref][#path]; or a bad commit id. */
export class SourceSpecError extends DatasetError {
  override name = "SourceSpecError";
}

/** The registry cannot be read (file missing, URL unreachable with no cached copy), is not JSON, or has a bad entry. */
export class RegistryError extends DatasetError {
  override name = "RegistryError";
  constructor(message: string, readonly location: string, exitCode: 1 | 2 = 2, options?: { cause?: unknown }) {
    super(message, exitCode, options);
  }
}

/** A dataset name or version the registry does not have (the message lists what it has). */
export class UnknownDatasetError extends DatasetError {
  override name = "UnknownDatasetError";
  constructor(message: string, readonly dataset: string, options?: { cause?: unknown }) {
    super(message, 2, options);
  }
}

/**
 * A git fetch that failed. `kind`: `unreachable` (the repository cannot be reached: a network
 * error, an unknown host, no repository there; exit 1), `commit` (the repository has no such
 * commit or ref; exit 2), `path` (the commit has no such directory; exit 2), `git` (git itself
 * failed otherwise, or is not installed; exit 1).
 */
export class FetchError extends DatasetError {
  override name = "FetchError";
  constructor(message: string, readonly kind: "unreachable" | "commit" | "path" | "git", readonly repository: string, options?: { cause?: unknown }) {
    super(message, kind === "commit" || kind === "path" ? 2 : 1, options);
  }
}
