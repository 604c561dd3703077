import { PassThrough, Readable } from "node:stream";
import type { Stats } from "node:fs";
import * as tar from "tar";
import type { ReadEntry } from "tar";
import { UnsafePathError } from "./errors";

export interface PackDirectoryOptions {
  /** Put every entry under this relative directory in the archive (e.g. `"app"` gives `app/...`). */
  prefix?: string;
  /**
   * Which entries go in, by their path relative to `dir` (`a/b.txt`) and whether they are a
   * directory; a directory left out is not walked. Default: everything.
   */
  include?: (path: string, directory: boolean) => boolean;
}

/**
 * A tar stream of everything inside `dir` (not `dir` itself): file modes, symlinks (as links, not
 * followed) and empty directories are kept; owners and timestamps of directories are dropped
 * (`portable`), so the result is the same on every host. Entries are named `./x` or `<prefix>/x`.
 * A missing or unreadable `dir` surfaces as an `error` event on the returned stream.
 */
export function packDirectory(dir: string, options: PackDirectoryOptions = {}): Readable {
  const prefix = options.prefix === undefined ? undefined : checkRelative(options.prefix).replace(/\/+$/, "");
  const include = options.include;
  // tar names entries "./a/b" (and the root ".").
  const filter = include
    ? (path: string, entry: Stats | ReadEntry) => path === "." || path === "./" || include(path.replace(/^\.\//, "").replace(/\/$/, ""), "isDirectory" in entry ? entry.isDirectory() : entry.type === "Directory")
    : undefined;
  const pack = tar.c({ cwd: dir, portable: true, prefix: prefix || undefined, ...(filter ? { filter } : {}) }, ["."]);
  const out = new PassThrough();
  pack.on("error", (error: unknown) => out.destroy(error instanceof Error ? error : new Error(String(error))));
  pack.pipe(out);
  return out;
}

export interface PackFileEntry {
  /** Relative path inside the archive (`a/b.txt`); parent directories need no entries of their own. */
  path: string;
  data: Buffer | Uint8Array | string;
  /** Permission bits, default 0o644. */
  mode?: number;
}

/** A tar stream holding the given in-memory files (for uploading a few small files into a sandbox). */
export function packFiles(entries: readonly PackFileEntry[]): Readable {
  const mtime = new Date();
  const prepared = entries.map((entry) => ({
    path: checkRelative(entry.path),
    data: typeof entry.data === "string" ? Buffer.from(entry.data, "utf8") : Buffer.from(entry.data.buffer, entry.data.byteOffset, entry.data.byteLength),
    mode: entry.mode ?? 0o644,
  }));
  function* blocks(): Generator<Buffer> {
    for (const entry of prepared) {
      const fields = { path: entry.path, mode: entry.mode & 0o7777, size: entry.data.length, type: "File" as const, mtime, uid: 0, gid: 0 };
      const header = new tar.Header(fields);
      const block = Buffer.alloc(512);
      header.encode(block, 0);
      if (header.needPax) yield new tar.Pax(fields).encode();
      yield block;
      yield entry.data;
      const padding = (512 - (entry.data.length % 512)) % 512;
      if (padding > 0) yield Buffer.alloc(padding);
    }
    yield Buffer.alloc(1024);
  }
  return Readable.from(blocks(), { objectMode: false });
}

function checkRelative(path: string): string {
  const parts = path.split("/");
  if (path === "" || path.startsWith("/") || path.includes("\0") || parts.includes("..")) {
    throw new UnsafePathError(path, "is not a plain relative path");
  }
  return path;
}
