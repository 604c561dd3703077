import { createHash, randomBytes } from "node:crypto";
import { lstat, mkdir, readdir, readFile, readlink, rename, rm, writeFile } from "node:fs/promises";
import { dirname, join } from "node:path";

/** Write `text` to `path` through a temp sibling and a rename: readers see the old file or the new one. */
export async function writeFileAtomic(path: string, text: string): Promise<void> {
  await mkdir(dirname(path), { recursive: true });
  const tmp = `${path}.tmp-${process.pid}-${randomBytes(4).toString("hex")}`;
  await writeFile(tmp, text);
  await rename(tmp, path);
}

/** Remove `dir` by first renaming it aside (one atomic step), so no reader ever sees it half-removed. */
export async function removeDir(dir: string): Promise<void> {
  const aside = `${dir}.rm-${process.pid}-${randomBytes(4).toString("hex")}`;
  try {
    await rename(dir, aside);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return;
    throw error;
  }
  await rm(aside, { recursive: true, force: true });
}

/**
 * sha256 over a directory's tree: per file (sorted by path) its kind, path, executable bit and
 * content (a symlink: its target); plus the total bytes. Equal trees give equal digests on every
 * machine.
 */
export async function digestTree(root: string): Promise<{ digest: string; bytes: number }> {
  const hash = createHash("sha256").update("proctor-dataset-tree-v1\0");
  let bytes = 0;
  const walk = async (dir: string, prefix: string): Promise<void> => {
    const entries = (await readdir(dir, { withFileTypes: true })).sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    for (const entry of entries) {
      const abs = join(dir, entry.name);
      const rel = prefix === "" ? entry.name : `${prefix}/${entry.name}`;
      if (entry.isDirectory()) {
        await walk(abs, rel);
      } else if (entry.isSymbolicLink()) {
        const target = await readlink(abs);
        hash.update(`l\0${rel}\0${Buffer.byteLength(target)}\0`).update(target).update("\0");
      } else if (entry.isFile()) {
        const [content, info] = await Promise.all([readFile(abs), lstat(abs)]);
        bytes += content.length;
        hash.update(`f\0${rel}\0${(info.mode & 0o111) !== 0 ? "x" : "-"}\0${content.length}\0`).update(content).update("\0");
      }
    }
  };
  await walk(root, "");
  return { digest: hash.digest("hex"), bytes };
}
