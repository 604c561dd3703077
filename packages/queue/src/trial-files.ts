import { lstatSync, mkdirSync, readdirSync, readFileSync, rmdirSync, unlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";

/**
 * A small trial dir on its way from a worker to the dispatcher, as a file list instead of a tar:
 * `MAGIC`, one JSON line `{dirs: [[path, mode]], files: [[path, mode, size]]}`, then the files'
 * bytes in order (permission bits kept, as tar keeps them; times are not).
 * A trivial trial's dir (a dozen entries, a few KB) costs ~0.3 ms to pack and under 1 ms to
 * write here, against ~2 ms and ~5 ms through tar, whose per-entry headers, modes and times a
 * trial dir does not need. Directories and regular files only; a dir with anything else, or
 * past the budget, goes as a tar.gz (see worker.ts).
 */
const MAGIC = Buffer.from("PROCTOR-TRIAL-FILES 1\n");

/** What a file list may hold: a worker sends one only within this, and a dispatcher refuses more. */
export const SMALL_TRIAL_DIR = { bytes: 1024 * 1024, entries: 256 };

export function isTrialFileList(artifact: Buffer): boolean {
  return artifact.subarray(0, MAGIC.length).equals(MAGIC);
}

/** `dir` as a file list, or null when it holds more than SMALL_TRIAL_DIR or an entry that is not a dir or a regular file. */
export function packTrialFiles(dir: string): Buffer | null {
  const dirs: [string, number][] = [];
  const files: [string, number, number][] = [];
  const contents: Buffer[] = [];
  let bytes = 0;
  const walk = (relative: string): boolean => {
    for (const entry of readdirSync(relative ? join(dir, relative) : dir, { withFileTypes: true })) {
      const path = relative ? `${relative}/${entry.name}` : entry.name;
      if (entry.name.includes("\\")) return false; // writeTrialFiles refuses it; tar carries it
      if (dirs.length + files.length >= SMALL_TRIAL_DIR.entries) return false;
      if (entry.isDirectory()) {
        dirs.push([path, permissions(join(dir, path))]);
        if (!walk(path)) return false;
      } else if (entry.isFile()) {
        // The size first, so a large file is never read whole just to be turned down.
        const stat = lstatSync(join(dir, path));
        if (bytes + stat.size > SMALL_TRIAL_DIR.bytes) return false;
        const content = readFileSync(join(dir, path));
        if ((bytes += content.length) > SMALL_TRIAL_DIR.bytes) return false;
        files.push([path, stat.mode & 0o777, content.length]);
        contents.push(content);
      } else return false;
    }
    return true;
  };
  if (!walk("")) return null;
  return Buffer.concat([MAGIC, Buffer.from(`${JSON.stringify({ dirs, files })}\n`), ...contents]);
}

/**
 * Removes a tree as small as one packTrialFiles accepts, synchronously: a few dozen syscalls cost
 * less than a thread-pool round trip for each. Entries are told apart by readdir's types, so no
 * entry is stat'ed (see removeTreeWithoutStat in @proctor/sandbox).
 */
export function removeSmallTreeSync(dir: string): void {
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) removeSmallTreeSync(path);
    else unlinkSync(path);
  }
  rmdirSync(dir);
}

/**
 * Writes a file list into `dest`, which must not exist yet (its parent must). Synchronous: a
 * small list is a few dozen syscalls, cheaper than a thread-pool round trip for each. Throws on
 * anything a worker would not have sent: a bad header, a path that is absolute or has `..`,
 * sizes that do not add up to the bytes, more than SMALL_TRIAL_DIR.
 */
export function writeTrialFiles(artifact: Buffer, dest: string): void {
  const newline = artifact.indexOf(10, MAGIC.length);
  if (!isTrialFileList(artifact) || newline < 0) throw new Error("not a trial file list (no header line)");
  const { dirs, files } = parseHeader(artifact.subarray(MAGIC.length, newline).toString("utf8"));
  if (dirs.length + files.length > SMALL_TRIAL_DIR.entries) throw new Error(`a trial file list holds at most ${SMALL_TRIAL_DIR.entries} entries; this one has ${dirs.length + files.length}`);
  const total = files.reduce((sum, [, , size]) => sum + size, 0);
  if (total > SMALL_TRIAL_DIR.bytes) throw new Error(`a trial file list holds at most ${SMALL_TRIAL_DIR.bytes} bytes; this one says ${total}`);
  if (total !== artifact.length - newline - 1) throw new Error(`a trial file list's sizes add up to ${total} bytes but ${artifact.length - newline - 1} follow its header`);
  for (const [path] of [...dirs, ...files]) checkPath(path);
  // Not recursive: a listed dir comes after its parent, and dest is new, so nothing here can be a link.
  mkdirSync(dest);
  for (const [path, mode] of dirs) mkdirSync(join(dest, path), { mode });
  let offset = newline + 1;
  for (const [path, mode, size] of files) {
    writeFileSync(join(dest, path), artifact.subarray(offset, offset + size), { flag: "wx", mode });
    offset += size;
  }
}

/** Permission bits (a regular file or dir: the lstat cannot be of a FIFO, see removeTreeWithoutStat). */
function permissions(path: string): number {
  return lstatSync(path).mode & 0o777;
}

function parseHeader(line: string): { dirs: [string, number][]; files: [string, number, number][] } {
  let header: unknown;
  try {
    header = JSON.parse(line);
  } catch {
    throw new Error("a trial file list's header is not JSON");
  }
  const { dirs, files } = (header ?? {}) as { dirs?: unknown; files?: unknown };
  const isMode = (value: unknown) => Number.isInteger(value) && (value as number) >= 0 && (value as number) <= 0o777;
  const isDir = (value: unknown): value is [string, number] => Array.isArray(value) && value.length === 2 && typeof value[0] === "string" && isMode(value[1]);
  const isFile = (value: unknown): value is [string, number, number] =>
    Array.isArray(value) && value.length === 3 && typeof value[0] === "string" && isMode(value[1]) && Number.isSafeInteger(value[2]) && (value[2] as number) >= 0;
  if (!Array.isArray(dirs) || !dirs.every(isDir) || !Array.isArray(files) || !files.every(isFile)) {
    throw new Error("a trial file list's header must be {dirs: [[path, mode]], files: [[path, mode, size]]}");
  }
  return { dirs, files };
}

function checkPath(path: string): void {
  const parts = path.split("/");
  if (path.includes("\0") || path.includes("\\") || parts.some((part) => part === "" || part === "." || part === "..")) {
    throw new Error(`a trial file list names an unsafe path ${JSON.stringify(path)} (relative, no '..', '.', empty parts or backslashes)`);
  }
}
