import { hostname } from "node:os";

/** Base class of every error the engine throws (trial failures are results, not throws). */
export class EngineError extends Error {
  override name = "EngineError";
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
  }
}

/**
 * `resume: true` on a run directory whose run.json describes a different run (tasks added,
 * removed or edited, another agent, attempts, runtime, ...). `changes` names each difference.
 * Rejects RunHandle.done before any trial starts.
 */
export class ConfigMismatchError extends EngineError {
  override name = "ConfigMismatchError";
  constructor(readonly runDir: string, readonly changes: string[], options?: { cause?: unknown }) {
    super(
      `cannot resume ${runDir}: the run configuration changed since it started (${changes.join("; ")}). ` +
        "Resume with the same tasks, agent and options, or start a new run.",
      options,
    );
  }
}

/**
 * The run directory cannot be used: `resume: true` without a readable run.json, or a fresh
 * run pointed at a directory that already holds one. Rejects RunHandle.done.
 */
export class RunDirectoryError extends EngineError {
  override name = "RunDirectoryError";
  constructor(message: string, readonly runDir: string, options?: { cause?: unknown }) {
    super(message, options);
  }
}

/**
 * Another process writes the run directory now (a run or a resume of it): its lock file names a
 * process that is alive. Nothing was written. Rejects RunHandle.done.
 */
export class RunLockedError extends RunDirectoryError {
  override name = "RunLockedError";
  constructor(runDir: string, readonly owner: { pid: number; host: string; since: string }, readonly lockFile: string) {
    const sameHost = owner.host === hostname();
    super(
      sameHost
        ? `${runDir} is in use: proctor process ${owner.pid} is writing it (since ${owner.since || "an unknown time"}); wait for it to finish or stop it (kill ${owner.pid}), then run this again`
        : `${runDir} is in use: process ${owner.pid} on host ${owner.host} is writing it (since ${owner.since || "an unknown time"}), which cannot be checked from ${hostname()}; wait for it to finish, or if that process is gone, remove ${lockFile} and run this again`,
      runDir,
    );
  }
}

/**
 * Preparing a task's workspace failed: the repository could not be fetched, or base_commit
 * could not be checked out. The trial ends with error kind "setup".
 */
export class WorkspaceError extends EngineError {
  override name = "WorkspaceError";
  constructor(message: string, readonly repo: string, options?: { cause?: unknown }) {
    super(message, options);
  }
}

/**
 * The run directory could not be written (a full disk, lost permissions). The run stops; every
 * trial recorded before stays, complete, in results.jsonl, so a resume continues it.
 */
export class RunStorageError extends EngineError {
  override name = "RunStorageError";
  constructor(readonly runDir: string, cause: unknown) {
    const detail = cause instanceof Error ? cause.message : String(cause);
    const full = /ENOSPC/.test(detail) || (cause as { cause?: { code?: string } })?.cause?.code === "ENOSPC";
    super(
      `cannot write the run directory ${runDir}${full ? " (the disk is full)" : ""}: ${detail}. ` +
        `Finished trials are kept; ${full ? "free some space, then " : ""}continue with: proctor run --resume ${runDir}`,
      { cause },
    );
  }
}
