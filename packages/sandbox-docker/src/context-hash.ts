import { createHash } from "node:crypto";
import { createReadStream } from "node:fs";
import { lstat, readdir, readlink } from "node:fs/promises";
import { join } from "node:path";
import type { ContextFilter } from "./build-context";

/**
 * sha256 (hex) over a build context's contents: every entry's relative path, type, permission
 * bits and bytes (symlinks by their target, not followed), in sorted order. Timestamps and owners
 * do not count, so the same context gives the same hash on every machine. Paths `include` turns
 * down are not part of the context (see contextFilter; the build sends the same ones).
 */
export async function hashContext(dir: string, buildArgs?: Record<string, string>, include?: ContextFilter | null): Promise<string> {
  const hash = createHash("sha256");
  // Build args change the image; without any the hash stays what it was before they existed.
  for (const [name, value] of Object.entries(buildArgs ?? {}).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) hash.update(`A\0${name}\0${value}\0`);
  async function walk(relative: string): Promise<void> {
    const names = (await readdir(join(dir, relative))).sort();
    for (const name of names) {
      const rel = relative === "" ? name : `${relative}/${name}`;
      const full = join(dir, rel);
      const info = await lstat(full);
      if (include && !include(rel, info.isDirectory())) continue;
      const mode = (info.mode & 0o7777).toString(8);
      if (info.isSymbolicLink()) {
        hash.update(`L\0${rel}\0${await readlink(full)}\0`);
      } else if (info.isDirectory()) {
        hash.update(`D\0${rel}\0${mode}\0`);
        await walk(rel);
      } else if (info.isFile()) {
        hash.update(`F\0${rel}\0${mode}\0${info.size}\0`);
        for await (const chunk of createReadStream(full)) hash.update(chunk as Buffer);
      } else {
        hash.update(`O\0${rel}\0`);
      }
    }
  }
  await walk("");
  return hash.digest("hex");
}
