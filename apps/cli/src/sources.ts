import { mkdir, open, rm, stat } from "node:fs/promises";
import { basename, join } from "node:path";
import type { Logger } from "@proctor/schema";
import { extractArchive } from "@proctor/archive";
import { isSwebenchFile, isTb2File, isTermExecutorRoot, loadTermExecutorArchive } from "@proctor/tasks";
import { UsageError } from "./errors";

export interface PreparedSources {
  /** Task dirs, dirs of tasks, or term-executor roots for loadTasks. */
  taskSources: string[];
  /** agent_code/ from an archive, used when --agent is not given. */
  agentDir: string | null;
  /** Each archive given and the directory it was extracted to. */
  extracted: { archive: string; dir: string }[];
}

async function looksLikeArchive(path: string): Promise<boolean> {
  const handle = await open(path, "r");
  try {
    const { buffer, bytesRead } = await handle.read(Buffer.alloc(262), 0, 262, 0);
    const head = buffer.subarray(0, bytesRead);
    const gzip = head[0] === 0x1f && head[1] === 0x8b;
    const zip = head[0] === 0x50 && head[1] === 0x4b;
    const tar = head.subarray(257, 262).toString("latin1") === "ustar";
    return gzip || zip || tar;
  } finally {
    await handle.close();
  }
}

/** agent_code/ of a term-executor root (at the root or one directory down), if any. */
async function archiveAgentDir(dir: string): Promise<string | null> {
  if (!(await isTermExecutorRoot(dir))) return null;
  return (await loadTermExecutorArchive(dir)).agentDir;
}

export interface PrepareOptions {
  /** Called (and awaited) before the first archive is extracted: e.g. to create and lock the run directory. */
  beforeExtract?: () => Promise<unknown>;
  /** An earlier extraction at the same place is replaced (a resume extracts its archives again). */
  replace?: boolean;
}

/** Archives are extracted under the run directory (input/<n>-<name>) so the run keeps what it ran. */
export async function prepareSources(sources: string[], inputDir: string, logger: Logger, options: PrepareOptions = {}): Promise<PreparedSources> {
  const taskSources: string[] = [];
  let agentDir: string | null = null;
  const archives: PreparedSources["extracted"] = [];
  for (const [index, source] of sources.entries()) {
    const info = await stat(source).catch(() => null);
    if (!info) throw new UsageError(`${source}: no such file or directory`);
    if (info.isDirectory()) {
      taskSources.push(source);
      agentDir ??= await archiveAgentDir(source);
      continue;
    }
    // Dataset rows (.jsonl/.json: Terminal-Bench 2 or SWE-bench / SWE-smith rows; .parquet: TB2 rows): loadTasks reads them.
    if (isSwebenchFile(source) || (await isTb2File(source))) {
      taskSources.push(source);
      continue;
    }
    if (!(await looksLikeArchive(source))) throw new UsageError(`${source}: not a directory, and not a .zip, .tar or .tar.gz archive`);
    const dest = join(inputDir, `${index}-${basename(source).replace(/[^A-Za-z0-9._-]/g, "_")}`);
    await options.beforeExtract?.();
    // An extraction of an earlier session of this run (complete or cut off): the archive's files now replace it.
    if (options.replace) await rm(dest, { recursive: true, force: true });
    await mkdir(inputDir, { recursive: true });
    const extracted = await extractArchive(source, dest, undefined, { logger }).catch((error: unknown) => {
      throw new UsageError(`${source}: ${error instanceof Error ? error.message : String(error)}`, { cause: error });
    });
    logger.info("extracted archive", { source, dest, entries: extracted.entries });
    if (!(await isTermExecutorRoot(dest))) throw new UsageError(`${source}: the archive holds no tasks/ or agent_code/ directory (at its root or one directory down)`);
    taskSources.push(dest);
    archives.push({ archive: source, dir: dest });
    agentDir ??= await archiveAgentDir(dest);
  }
  return { taskSources, agentDir, extracted: archives };
}
