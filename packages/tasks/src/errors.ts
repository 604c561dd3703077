export interface TaskLoadErrorOptions {
  /** The task-file field the problem is in, as written in messages (`[agent].timeout_sec`). */
  field?: string;
  /** The task the problem belongs to, when known. */
  taskId?: string;
  cause?: unknown;
}

/**
 * A task (or a task source, or a tasks file) could not be loaded as given. Loaders never throw
 * it for a single bad task: they collect every one in `errors` and keep loading the others.
 * The message starts with the file (`examples/x/task.toml: ...`), names the field and says what
 * was expected and what was found.
 */
export class TaskLoadError extends Error {
  override name = "TaskLoadError";
  /** Path of the file or directory at fault (relative to the working directory when inside it). */
  readonly file: string;
  readonly field: string | undefined;
  readonly taskId: string | undefined;
  /** The message without the leading `<file>: `. */
  readonly detail: string;

  constructor(file: string, detail: string, options: TaskLoadErrorOptions = {}) {
    super(`${file}: ${detail}`, options.cause === undefined ? undefined : { cause: options.cause });
    this.file = file;
    this.detail = detail;
    this.field = options.field;
    this.taskId = options.taskId;
  }
}

/**
 * The task uses a feature of its format that Proctor does not run (yet): a TB1 `solution.yaml`,
 * a multi-container docker-compose.yaml, a dataset `.jsonl` given as a task source. The task is
 * reported, not loaded, so it cannot silently run without the part it relies on.
 */
export class UnsupportedTaskError extends TaskLoadError {
  override name = "UnsupportedTaskError";
}
