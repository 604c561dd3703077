import type { Dirent } from "node:fs";
import { lstat, mkdtemp, readdir, rmdir, unlink } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { processStartTime, sameProcessAlive } from "./process";

/**
 * Temp directories named after the process that made them: `<prefix><pid>-<start>-XXXXXX`, the
 * start time as in /proc/<pid>/stat ("unknown" without /proc). A process killed with -9 never
 * removes its own; whoever finds one later can tell that its process is gone and remove it.
 */
export function ownedTempPrefix(prefix: string, pid: number = process.pid, startTime: string | null = ownStartTime()): string {
  return `${prefix}${pid}-${startTime ?? "unknown"}-`;
}

let ownStart: { value: string | null } | undefined;
function ownStartTime(): string | null {
  ownStart ??= { value: processStartTime(process.pid) };
  return ownStart.value;
}

/** A fresh temp directory of this process under `parent` (default: the OS temp dir). */
export async function makeOwnedTempDir(prefix: string, parent: string = tmpdir()): Promise<string> {
  return mkdtemp(join(parent, ownedTempPrefix(prefix)));
}

/**
 * The `prefix` temp directories in `parent` whose process is gone, as removeOrphanTempDirs would
 * remove them (nothing is removed): a live process's, names in any other form, and entries that
 * are not directories of this user (another user's in a shared /tmp, or a link planted under one
 * of our names) are not listed; one whose owner cannot be read is in `failed`.
 */
export async function findOrphanTempDirs(prefix: string, parent: string = tmpdir()): Promise<{ found: string[]; failed: { path: string; error: string }[] }> {
  const name = new RegExp(`^${prefix.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}(\\d+)-(\\d+|unknown)-[A-Za-z0-9]{6}$`);
  const found: string[] = [];
  const failed: { path: string; error: string }[] = [];
  const uid = process.getuid?.();
  for (const entry of await readdir(parent, { withFileTypes: true })) {
    const match = name.exec(entry.name);
    if (!match || !entry.isDirectory()) continue;
    const [, pid, start] = match as unknown as [string, string, string];
    if (sameProcessAlive(Number(pid), start === "unknown" ? null : start)) continue;
    const path = join(parent, entry.name);
    try {
      // A directory (readdir's type), so this lstat cannot be of a FIFO (see removeTreeWithoutStat).
      if (uid !== undefined && (await lstat(path)).uid !== uid) continue;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== "ENOENT") failed.push({ path, error: (error as Error).message });
      continue;
    }
    found.push(path);
  }
  return { found, failed };
}

/**
 * Removes the `prefix` temp directories in `parent` whose process is gone (findOrphanTempDirs).
 * One that cannot be removed is listed in `failed` and the rest still go.
 */
export async function removeOrphanTempDirs(prefix: string, parent: string = tmpdir()): Promise<{ removed: string[]; failed: { path: string; error: string }[] }> {
  const removed: string[] = [];
  const { found, failed } = await findOrphanTempDirs(prefix, parent);
  for (const path of found) {
    try {
      await removeTreeWithoutStat(path);
      removed.push(path);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === "ENOENT") continue;
      failed.push({ path, error: (error as Error).message });
    }
  }
  return { removed, failed };
}

/**
 * `rm -rf` in this process without a stat of anything but directories. Node's fs.realpathSync,
 * which require() uses, reads the result of the process's last stat, and after a stat of a FIFO
 * it stops resolving symlinks (nodejs/node#51142): a pnpm package then finds the wrong
 * dependency versions. fs.rm lstats every entry, and exec-channel dirs are full of FIFOs. Here
 * `path` itself is unlinked first (a link is removed, never followed; unlink refuses a directory
 * with EISDIR, or EPERM off Linux), and entries below it are told apart by readdir's types
 * (Node falls back to an lstat only on file systems that do not report them).
 */
export async function removeTreeWithoutStat(path: string): Promise<void> {
  try {
    await unlink(path);
    return;
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === "ENOENT") return;
    if (code !== "EISDIR" && code !== "EPERM") throw error;
  }
  await removeDirectory(path);
}

async function removeDirectory(dir: string): Promise<void> {
  let entries: Dirent[];
  try {
    entries = await readdir(dir, { withFileTypes: true });
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return;
    throw error;
  }
  await Promise.all(entries.map((entry) => (entry.isDirectory() ? removeDirectory(join(dir, entry.name)) : unlink(join(dir, entry.name)).catch(ignoreMissing))));
  await rmdir(dir).catch(ignoreMissing);
}

function ignoreMissing(error: NodeJS.ErrnoException): void {
  if (error.code !== "ENOENT") throw error;
}
