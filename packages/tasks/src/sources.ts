import { readdir, readFile, stat } from "node:fs/promises";
import { join, resolve } from "node:path";
import picomatch from "picomatch";
import { TASK_ID_PATTERN, type TaskSpec } from "@proctor/schema";
import { loggerOf, type LoadedTask } from "./common";
import { TaskLoadError, UnsupportedTaskError } from "./errors";
import { displayPath } from "./fields";
import { isSwebenchFile, loadSwebenchFile, type SwebenchOptions } from "./swebench";
import { isTb2File, loadTb2File } from "./tb2";
import type { TermExecutorOptions } from "./term-executor";
import { detectTaskDir, loadTaskDir } from "./task-dir";
import { isTermExecutorRoot, loadTermExecutorArchive } from "./submission";
import { byPath } from "./tree";

export interface LoadTasksOptions extends TermExecutorOptions, SwebenchOptions {
  /** Keep only tasks whose id matches any of these globs (picomatch). Empty or absent: all. */
  include?: readonly string[];
  /** Drop tasks whose id matches any of these globs; wins over include and tasksFile. */
  exclude?: readonly string[];
  /** A file of task ids to keep, one per line (`#` comments, blank lines ignored). */
  tasksFile?: string;
}

export interface LoadTasksResult {
  /** The selected tasks, sorted by id. */
  tasks: TaskSpec[];
  /** Every problem found, in source order; a caller should refuse to run when there is any. */
  errors: TaskLoadError[];
}

const ARCHIVE = /\.(zip|tar|tar\.gz|tgz)$/i;

/** Load the tasks of one source: a task dir, a dir of task dirs, or a term-executor root. */
async function loadSource(source: string, options: LoadTasksOptions): Promise<LoadTasksResult> {
  const path = resolve(source);
  const shown = displayPath(path);
  const info = await stat(path).catch(() => null);
  if (info === null) return fromErrors(new TaskLoadError(shown, "does not exist: give a task directory, a directory of tasks, or a term-executor archive directory"));
  if (info.isFile()) {
    // Terminal-Bench 2 rows are told from SWE-bench rows by their fields (tests_tar / environment_tar).
    if (await isTb2File(path)) return loadTb2File(path, options);
    if (isSwebenchFile(path)) return loadSwebenchFile(path, options);
    if (ARCHIVE.test(path)) {
      return fromErrors(new UnsupportedTaskError(shown, "archives are not supported as a task source yet: extract it and give the directory"));
    }
    return fromErrors(new TaskLoadError(shown, "is a file, not a task directory"));
  }
  if (!info.isDirectory()) return fromErrors(new TaskLoadError(shown, "is not a directory"));

  if ((await detectTaskDir(path)) !== null) return fromLoaded([await loadTaskDir(path, options)]);
  if (await isTermExecutorRoot(path)) {
    const archive = await loadTermExecutorArchive(path, options);
    return { tasks: archive.tasks, errors: archive.errors };
  }

  const logger = loggerOf(options);
  const loaded: LoadedTask[] = [];
  const entries = (await readdir(path, { withFileTypes: true })).sort((a, b) => byPath(a.name, b.name));
  for (const entry of entries) {
    if (!entry.isDirectory() || entry.name.startsWith(".")) continue;
    const child = join(path, entry.name);
    if ((await detectTaskDir(child)) === null) {
      logger.warn("skipping a directory that holds no task", { dir: displayPath(child) });
      continue;
    }
    loaded.push(await loadTaskDir(child, options));
  }
  if (loaded.length === 0) {
    return fromErrors(
      new TaskLoadError(shown, "holds no tasks: expected a task directory (task.toml/instruction.md or task.yaml), a directory of them, or tasks/<id>/workspace.yaml"),
    );
  }
  return fromLoaded(loaded);
}

function fromErrors(...errors: TaskLoadError[]): LoadTasksResult {
  return { tasks: [], errors };
}

function fromLoaded(loaded: LoadedTask[]): LoadTasksResult {
  return { tasks: loaded.flatMap((l) => (l.task ? [l.task] : [])), errors: loaded.flatMap((l) => l.errors) };
}

/**
 * Load every task of `sources`, then select: tasksFile (ids to keep), include globs (any match),
 * exclude globs (always win). Problems are collected, never thrown: a task that fails to load,
 * a duplicate id across sources, an id in the tasks file that no source has.
 */
export async function loadTasks(sources: readonly string[], options: LoadTasksOptions = {}): Promise<LoadTasksResult> {
  const errors: TaskLoadError[] = [];
  const all: TaskSpec[] = [];
  const seenSources = new Set<string>();
  for (const source of sources) {
    const key = resolve(source);
    if (seenSources.has(key)) continue;
    seenSources.add(key);
    const result = await loadSource(source, options);
    all.push(...result.tasks);
    errors.push(...result.errors);
  }

  const byId = new Map<string, TaskSpec[]>();
  for (const task of all) byId.set(task.id, [...(byId.get(task.id) ?? []), task]);
  for (const [id, copies] of byId) {
    if (copies.length < 2) continue;
    const [first, ...others] = copies.map((task) => displayPath(task.sourcePath));
    errors.push(
      new TaskLoadError(others.join(", "), `task id "${id}" is also loaded from ${first}: task ids must be unique across sources`, {
        taskId: id,
      }),
    );
    byId.delete(id);
  }

  let selected = [...byId.values()].flat();
  if (options.tasksFile !== undefined) {
    const wanted = await readTasksFile(options.tasksFile, errors);
    if (wanted !== null) {
      for (const { id, line } of wanted) {
        // Ids that failed to load or were duplicated already have their own error.
        if (!all.some((task) => task.id === id) && !errors.some((error) => error.taskId === id)) {
          errors.push(new TaskLoadError(`${displayPath(resolve(options.tasksFile))}:${line}`, `task id "${id}" is not in any source`, { taskId: id }));
        }
      }
      const keep = new Set(wanted.map((w) => w.id));
      selected = selected.filter((task) => keep.has(task.id));
    }
  }
  if (options.include && options.include.length > 0) {
    const match = picomatch([...options.include], { dot: true });
    selected = selected.filter((task) => match(task.id));
    const logger = loggerOf(options);
    for (const pattern of options.include) {
      const one = picomatch(pattern, { dot: true });
      if (!all.some((task) => one(task.id))) logger.warn("include pattern matched no task id", { pattern });
    }
  }
  if (options.exclude && options.exclude.length > 0) {
    const match = picomatch([...options.exclude], { dot: true });
    selected = selected.filter((task) => !match(task.id));
  }
  selected.sort((a, b) => byPath(a.id, b.id));
  return { tasks: selected, errors };
}

/** The ids of a tasks file with their line numbers; null (and an error) when it cannot be read. */
async function readTasksFile(file: string, errors: TaskLoadError[]): Promise<{ id: string; line: number }[] | null> {
  const shown = displayPath(resolve(file));
  let text: string;
  try {
    text = await readFile(file, "utf8");
  } catch (error) {
    errors.push(new TaskLoadError(shown, `cannot be read: ${(error as Error).message}`, { cause: error }));
    return null;
  }
  const ids: { id: string; line: number }[] = [];
  text.split(/\r?\n/).forEach((raw, index) => {
    const id = raw.replace(/(^|\s)#.*$/, "").trim();
    if (id === "") return;
    if (!TASK_ID_PATTERN.test(id)) {
      errors.push(new TaskLoadError(`${shown}:${index + 1}`, `${JSON.stringify(id)} is not a valid task id: one id per line, # starts a comment`));
      return;
    }
    ids.push({ id, line: index + 1 });
  });
  return ids;
}
