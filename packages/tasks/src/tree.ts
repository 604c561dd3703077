import { createHash, randomBytes, type Hash } from "node:crypto";
import { createReadStream } from "node:fs";
import { lstat, mkdir, readdir, readlink, rename, rm, stat, writeFile, cp, chmod } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";

export async function isFile(path: string): Promise<boolean> {
  return (await stat(path).catch(() => null))?.isFile() ?? false;
}

export async function isDir(path: string): Promise<boolean> {
  return (await stat(path).catch(() => null))?.isDirectory() ?? false;
}

/** One file of a tree: a regular file (hashed by content) or a symlink (hashed by its target). */
export interface TreeEntry {
  /** Path relative to the tree's root, `/`-separated. */
  rel: string;
  abs: string;
  kind: "file" | "symlink";
  executable: boolean;
}

/** Code-unit order: the same on every machine and locale. */
export function byPath(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

/** Every file and symlink under `root`, sorted by relative path; symlinked dirs are not entered. */
export async function listTree(root: string): Promise<TreeEntry[]> {
  const out: TreeEntry[] = [];
  async function walk(dir: string, prefix: string): Promise<void> {
    for (const entry of await readdir(dir, { withFileTypes: true })) {
      const abs = join(dir, entry.name);
      const rel = prefix === "" ? entry.name : `${prefix}/${entry.name}`;
      if (entry.isDirectory()) await walk(abs, rel);
      else if (entry.isSymbolicLink()) out.push({ rel, abs, kind: "symlink", executable: false });
      else if (entry.isFile()) out.push({ rel, abs, kind: "file", executable: ((await lstat(abs)).mode & 0o111) !== 0 });
      // sockets, fifos and devices carry no task content
    }
  }
  await walk(root, "");
  return out.sort((a, b) => byPath(a.rel, b.rel));
}

/** A file to hash or write whose content is given inline rather than read from disk. */
export interface InlineEntry {
  rel: string;
  content: string;
  executable: boolean;
}

export type AnyEntry = TreeEntry | InlineEntry;

/**
 * Feed entries into `hash` unambiguously: per entry its kind, path, x bit and length-prefixed
 * content, so no two different trees can produce the same byte stream.
 */
export async function hashEntries(hash: Hash, entries: readonly AnyEntry[]): Promise<void> {
  for (const entry of [...entries].sort((a, b) => byPath(a.rel, b.rel))) {
    if ("content" in entry) {
      const bytes = Buffer.from(entry.content, "utf8");
      hash.update(`file\0${entry.rel}\0${entry.executable ? 1 : 0}\0${bytes.length}\0`);
      hash.update(bytes);
    } else if (entry.kind === "symlink") {
      const target = await readlink(entry.abs);
      hash.update(`link\0${entry.rel}\0${Buffer.byteLength(target)}\0${target}`);
    } else {
      const size = (await stat(entry.abs)).size;
      hash.update(`file\0${entry.rel}\0${entry.executable ? 1 : 0}\0${size}\0`);
      for await (const chunk of createReadStream(entry.abs)) hash.update(chunk as Buffer);
    }
  }
}

/** Where loaders put directories they prepare (TB1 tests + run-tests.sh, ...) unless told otherwise. */
export function defaultCacheDir(): string {
  return join(tmpdir(), "proctor-tasks-cache");
}

/**
 * A directory holding exactly `entries` (at their `rel` paths, modes kept), under
 * `<cacheRoot>/<name>-<content hash>`. Content-addressed: loading the same task again reuses it,
 * a changed file gives a new directory. Built in a temp sibling and renamed into place, so
 * concurrent loaders never see a half-written directory.
 */
export async function prepareDir(cacheRoot: string, name: string, entries: readonly AnyEntry[]): Promise<string> {
  const hash = createHash("sha256");
  await hashEntries(hash, entries);
  const dest = join(cacheRoot, `${name}-${hash.digest("hex").slice(0, 16)}`);
  if (await isDir(dest)) return dest;
  await mkdir(cacheRoot, { recursive: true });
  const temp = `${dest}.tmp-${process.pid}-${randomBytes(4).toString("hex")}`;
  try {
    await mkdir(temp);
    for (const entry of entries) {
      const target = join(temp, entry.rel);
      await mkdir(dirname(target), { recursive: true });
      if ("content" in entry) {
        await writeFile(target, entry.content);
        await chmod(target, entry.executable ? 0o755 : 0o644);
      } else {
        await cp(entry.abs, target, { verbatimSymlinks: true, preserveTimestamps: false });
      }
    }
    await rename(temp, dest).catch(async (error: NodeJS.ErrnoException) => {
      // Another loader finished the same directory first: theirs is identical, use it.
      if ((error.code === "ENOTEMPTY" || error.code === "EEXIST") && (await isDir(dest))) return;
      throw error;
    });
  } finally {
    await rm(temp, { recursive: true, force: true });
  }
  return dest;
}
