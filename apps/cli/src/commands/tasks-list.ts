import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { isAbsolute, join, relative } from "node:path";
import type { Logger, TaskSpec } from "@proctor/schema";
import { textTable } from "@proctor/report";
import { loadTasks } from "@proctor/tasks";
import { UsageError } from "../errors";
import { prepareSources } from "../sources";
import { originsOf, resolveRemoteSources } from "../remote-sources";

export interface TasksListOptions {
  sources: string[];
  /** --registry FILE|URL for sources that name a dataset. */
  registry?: string;
  include: string[];
  exclude: string[];
  json: boolean;
  logger: Logger;
  stdout?: NodeJS.WritableStream;
  stderr?: NodeJS.WritableStream;
}

/** One row of `proctor tasks list`. */
interface ListedTask {
  id: string;
  category: string | null;
  difficulty: string | null;
  /** The format the task was loaded from: native (Harbor/TB2), tb1, term-executor, ... */
  kind: TaskSpec["format"];
  /** Where the task is: its directory, or `<archive>:<path inside it>`. */
  path: string;
}

function shown(path: string): string {
  const rel = relative(process.cwd(), path);
  return rel === "" ? "." : !rel.startsWith("..") && !isAbsolute(rel) ? rel : path;
}

/**
 * `proctor tasks list <source...>`: what a source holds, loaded exactly as `proctor run` loads it
 * (archives are extracted to a temporary directory, removed after). A source that cannot be read
 * or a task that does not load is bad usage (exit 2), named with its path and what is wrong; the
 * tasks that did load are still listed.
 */
export async function tasksListCommand(options: TasksListOptions): Promise<number> {
  const out = options.stdout ?? process.stdout;
  const err = options.stderr ?? process.stderr;
  if (options.sources.length === 0) throw new UsageError("give at least one task source: proctor tasks list <source>... (a task dir, a dir of tasks, or an archive)");
  const scratch = await mkdtemp(join(tmpdir(), "proctor-tasks-list-"));
  try {
    const remote = await resolveRemoteSources(options.sources, { registry: options.registry, err });
    const prepared = await prepareSources(remote.localPaths, scratch, options.logger);
    const loaded = await loadTasks(prepared.taskSources, { include: options.include, exclude: options.exclude });
    const origins = new Map(originsOf(loaded.tasks, remote.dirs).map((o) => [o.taskId, o]));
    const where = (task: TaskSpec) => {
      // A task fetched from git: where it is pinned, not the cache's directory.
      const origin = origins.get(task.id);
      if (origin) return `${origin.repository}@${origin.commit.slice(0, 12)}#${origin.path}`;
      const from = prepared.extracted.find((x) => task.sourcePath === x.dir || task.sourcePath.startsWith(`${x.dir}/`));
      return from ? `${shown(from.archive)}:${relative(from.dir, task.sourcePath) || "."}` : shown(task.sourcePath);
    };
    const tasks: ListedTask[] = loaded.tasks.map((t) => ({ id: t.id, category: t.category, difficulty: t.difficulty, kind: t.format, path: where(t) }));
    // Archives were extracted into scratch: say the archive, not a path that is about to go.
    const errors = loaded.errors.map((e) => prepared.extracted.reduce((m, x) => m.split(x.dir).join(shown(x.archive)), e.message));
    if (options.json) {
      out.write(`${JSON.stringify({ tasks, errors }, null, 2)}\n`);
    } else if (tasks.length > 0) {
      const rows = tasks.map((t) => [t.id, t.category ?? "-", t.difficulty ?? "-", t.kind, t.path]);
      out.write(`${textTable(["task", "category", "difficulty", "kind", "path"], rows, "left")}\n${tasks.length} task(s)\n`);
    }
    if (errors.length > 0) {
      err.write(`proctor: ${errors.length} problem(s) loading ${options.sources.join(", ")}:\n${errors.map((m) => `  ${m}`).join("\n")}\n`);
      return 2;
    }
    if (tasks.length === 0) {
      const filtered = options.include.length > 0 || options.exclude.length > 0;
      err.write(`proctor: no tasks${filtered ? " matched --include/--exclude" : ""} in ${options.sources.join(", ")}\n`);
      return 2;
    }
    return 0;
  } finally {
    await rm(scratch, { recursive: true, force: true });
  }
}
