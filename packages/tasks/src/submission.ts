import { readdir } from "node:fs/promises";
import { join, resolve } from "node:path";
import type { TaskSpec } from "@proctor/schema";
import { TaskLoadError } from "./errors";
import { displayPath } from "./fields";
import { detectTaskDir, loadTaskDir } from "./task-dir";
import type { TermExecutorOptions } from "./term-executor";
import { byPath, isDir, isFile } from "./tree";

export interface TermExecutorArchive {
  /** Tasks that loaded, sorted by id. */
  tasks: TaskSpec[];
  /** The archive's agent_code/ directory, or null when it has none. */
  agentDir: string | null;
  /** Every task that failed to load (and problems with the layout itself); never silently skipped. */
  errors: TaskLoadError[];
}

/**
 * Load an extracted submission archive: `tasks/<id>/` and `agent_code/`, at `rootDir` or in the
 * one directory below it. Each task directory may be in any format Proctor reads: Harbor /
 * Terminal-Bench 2 (task.toml, instruction.md, tests/), Terminal-Bench 1 (task.yaml), a
 * competition, or term-executor's (workspace.yaml, prompt.md, tests/ or checks.txt).
 */
export async function loadTermExecutorArchive(rootDir: string, options: TermExecutorOptions = {}): Promise<TermExecutorArchive> {
  const errors: TaskLoadError[] = [];
  const root = await findRoot(resolve(rootDir), errors);
  if (root === null) return { tasks: [], agentDir: null, errors };
  const agentDir = (await isDir(join(root, "agent_code"))) ? join(root, "agent_code") : null;
  const tasksDir = join(root, "tasks");
  if (!(await isDir(tasksDir))) {
    errors.push(new TaskLoadError(displayPath(root), "has no tasks/ directory: a submission archive holds tasks/<id>/ beside agent_code/"));
    return { tasks: [], agentDir, errors };
  }
  const names = await subdirs(tasksDir);
  if (names.length === 0) errors.push(new TaskLoadError(displayPath(tasksDir), "holds no task directories"));
  const tasks: TaskSpec[] = [];
  for (const name of names) {
    const loaded = await loadTaskDir(join(tasksDir, name), options);
    if (loaded.task) tasks.push(loaded.task);
    errors.push(...loaded.errors);
  }
  return { tasks, agentDir, errors };
}

/** True when `dir` looks like a submission root (agent_code/, or tasks/ holding a task directory), or holds one a level down. */
export async function isTermExecutorRoot(dir: string): Promise<boolean> {
  if (await looksLikeRoot(dir)) return true;
  const children = await subdirs(dir);
  for (const child of children) if (await looksLikeRoot(join(dir, child))) return true;
  return false;
}

async function looksLikeRoot(dir: string): Promise<boolean> {
  if (await isDir(join(dir, "agent_code"))) return true;
  const tasksDir = join(dir, "tasks");
  if (!(await isDir(tasksDir))) return false;
  for (const name of await subdirs(tasksDir)) {
    const task = join(tasksDir, name);
    if ((await detectTaskDir(task)) !== null || (await isFile(join(task, "prompt.md")))) return true;
  }
  return false;
}

async function subdirs(dir: string): Promise<string[]> {
  const entries = await readdir(dir, { withFileTypes: true }).catch(() => []);
  return entries.filter((e) => e.isDirectory() && !e.name.startsWith(".") && e.name !== "__MACOSX").map((e) => e.name).sort(byPath);
}

async function findRoot(dir: string, errors: TaskLoadError[]): Promise<string | null> {
  if (!(await isDir(dir))) {
    errors.push(new TaskLoadError(displayPath(dir), "is not a directory: give the extracted archive's directory"));
    return null;
  }
  if ((await isDir(join(dir, "tasks"))) || (await isDir(join(dir, "agent_code")))) return dir;
  const candidates: string[] = [];
  for (const child of await subdirs(dir)) {
    if ((await isDir(join(dir, child, "tasks"))) || (await isDir(join(dir, child, "agent_code")))) candidates.push(child);
  }
  const [only] = candidates;
  if (only !== undefined && candidates.length === 1) return join(dir, only);
  errors.push(
    new TaskLoadError(
      displayPath(dir),
      candidates.length === 0
        ? "has no tasks/ or agent_code/ directory, at its root or one directory down"
        : `has several directories holding tasks/ or agent_code/ (${candidates.join(", ")}); put one at the root`,
    ),
  );
  return null;
}
