import { closeSync, constants, fchmodSync, futimesSync, lstatSync, openSync, unlinkSync, writevSync } from "node:fs";
import { chmod, link, lstat, mkdir, open, readlink, symlink, unlink, type FileHandle } from "node:fs/promises";
import { join } from "node:path";
import { CorruptArchiveError, LimitExceededError, LinkEscapeError, UnsafePathError } from "./errors";
import type { ExtractLimits } from "./limits";
import { checkSymlinkTarget, entryParts } from "./paths";

/** Permission bits kept from archives: set-uid and set-gid are dropped, the sticky bit is kept. */
const MODE_MASK = 0o1777;
const CREATE_FILE = constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW;
/** Files up to this size are written with synchronous calls (see `file`). */
export const SMALL_FILE_BYTES = 64 * 1024;
/** Files whose mode, mtime and close may be in flight at once. */
const MAX_PENDING = 32;
/** Gather this many bytes of small chunks into one writev. */
const WRITE_BATCH_BYTES = 256 * 1024;

export interface EntryMeta {
  /** The name as written in the archive (for messages). */
  name: string;
  mode?: number | undefined;
  mtime?: Date | undefined;
}

/**
 * Writes entries under one root directory, refusing anything that would land outside it.
 *
 * Invariants: every directory in `dirs` is a real directory this writer created or checked; a
 * directory is never replaced by anything else; files are created with O_EXCL|O_NOFOLLOW after
 * removing whatever non-directory was there, so nothing is ever written through a link.
 */
export class TreeWriter {
  entries = 0;
  files = 0;
  bytes = 0;
  private readonly dirs = new Set<string>([""]);
  private readonly dirModes = new Map<string, number>();
  private readonly pending = new Set<Promise<void>>();
  private deferredError: unknown;

  constructor(
    private readonly root: string,
    private readonly limits: ExtractLimits,
  ) {}

  /** Count one entry and return its checked path components (empty for the root itself). */
  begin(name: string): string[] {
    this.entries += 1;
    if (this.entries > this.limits.maxEntries) {
      throw new LimitExceededError("maxEntries", this.limits.maxEntries, this.entries, "archive holds too many entries", { entry: name });
    }
    return entryParts(name, this.limits);
  }

  /** Check a file's declared size before any of it is written. */
  checkFileSize(name: string, size: number): void {
    if (size > this.limits.maxFileBytes) {
      throw new LimitExceededError("maxFileBytes", this.limits.maxFileBytes, size, "archive entry is too large", { entry: name });
    }
    if (this.bytes + size > this.limits.maxTotalBytes) {
      throw new LimitExceededError("maxTotalBytes", this.limits.maxTotalBytes, this.bytes + size, "archive expands to too many bytes", { entry: name });
    }
  }

  async directory(parts: string[], meta: EntryMeta): Promise<void> {
    if (parts.length === 0) return;
    await this.ensureParent(parts, meta.name);
    const rel = parts.join("/");
    const path = join(this.root, rel);
    if (!this.dirs.has(rel)) {
      try {
        await mkdir(path, 0o755);
      } catch (error) {
        if (code(error) !== "EEXIST") throw error;
        const existing = await lstat(path);
        if (!existing.isDirectory()) {
          await unlink(path);
          await mkdir(path, 0o755);
        }
      }
      this.dirs.add(rel);
    }
    if (meta.mode !== undefined) this.dirModes.set(rel, meta.mode & MODE_MASK);
  }

  /**
   * Write one regular file from `data`; the bytes are counted against the per-file and total
   * limits as they come. Setting its mode and mtime and closing it happen in the background
   * (at most MAX_PENDING at once) so the next entry need not wait; `settle()` waits for them.
   */
  async file(parts: string[], meta: EntryMeta, data: AsyncIterable<Buffer>, declaredSize?: number): Promise<void> {
    if (parts.length === 0) throw new UnsafePathError(meta.name, "names the archive root but is a file");
    this.throwDeferred();
    await this.ensureParent(parts, meta.name);
    const path = join(this.root, ...parts);
    const mode = (meta.mode ?? 0o644) & MODE_MASK;
    if (declaredSize !== undefined && declaredSize <= SMALL_FILE_BYTES) {
      const chunks: Buffer[] = [];
      for await (const chunk of data) chunks.push(chunk);
      this.writeSmall(path, meta, mode, chunks);
      return;
    }
    const handle = await this.create(path, meta.name, () => open(path, CREATE_FILE, mode));
    try {
      let written = 0;
      let batch: Buffer[] = [];
      let batchBytes = 0;
      for await (const chunk of data) {
        written = this.count(meta.name, written, chunk.length);
        batch.push(chunk);
        batchBytes += chunk.length;
        if (batchBytes >= WRITE_BATCH_BYTES) {
          await writeAll(handle, batch);
          batch = [];
          batchBytes = 0;
        }
      }
      if (batch.length > 0) await writeAll(handle, batch);
    } catch (error) {
      await handle.close();
      throw error;
    }
    this.files += 1;
    await this.defer(finalize(handle, mode, meta.mtime));
  }

  /**
   * A file of at most SMALL_FILE_BYTES whose bytes the caller already holds: written with a few
   * synchronous calls in a row, since a thread-pool round trip for each costs more than the call.
   */
  async smallFile(parts: string[], meta: EntryMeta, chunks: Buffer[]): Promise<void> {
    if (parts.length === 0) throw new UnsafePathError(meta.name, "names the archive root but is a file");
    this.throwDeferred();
    await this.ensureParent(parts, meta.name);
    this.writeSmall(join(this.root, ...parts), meta, (meta.mode ?? 0o644) & MODE_MASK, chunks);
  }

  /** Count `length` more bytes of the current file; returns the file's new size. */
  private count(name: string, written: number, length: number): number {
    const size = written + length;
    this.bytes += length;
    if (size > this.limits.maxFileBytes) {
      throw new LimitExceededError("maxFileBytes", this.limits.maxFileBytes, size, "archive entry is too large", { entry: name });
    }
    if (this.bytes > this.limits.maxTotalBytes) {
      throw new LimitExceededError("maxTotalBytes", this.limits.maxTotalBytes, this.bytes, "archive expands to too many bytes", { entry: name });
    }
    return size;
  }

  private writeSmall(path: string, meta: EntryMeta, mode: number, chunks: Buffer[]): void {
    const { name, mtime } = meta;
    let written = 0;
    for (const chunk of chunks) written = this.count(name, written, chunk.length);
    let fd: number;
    try {
      fd = openSync(path, CREATE_FILE, mode);
    } catch (error) {
      if (code(error) !== "EEXIST") throw error;
      if (lstatSync(path).isDirectory()) throw new CorruptArchiveError(undefined, "a directory of the same name was extracted earlier", { entry: name });
      unlinkSync(path);
      fd = openSync(path, CREATE_FILE, mode);
    }
    try {
      let pending = chunks;
      while (pending.length > 0) pending = unwritten(pending, writevSync(fd, pending));
      fchmodSync(fd, mode);
      if (mtime !== undefined && !Number.isNaN(mtime.getTime())) futimesSync(fd, mtime, mtime);
    } finally {
      closeSync(fd);
    }
    this.files += 1;
  }

  /** Wait for every background file finalisation; throws the first error one of them hit. */
  async settle(): Promise<void> {
    await Promise.all(this.pending);
    this.throwDeferred();
  }

  private async defer(work: Promise<void>): Promise<void> {
    const tracked: Promise<void> = work.then(
      () => {
        this.pending.delete(tracked);
      },
      (error: unknown) => {
        this.pending.delete(tracked);
        this.deferredError ??= error;
      },
    );
    this.pending.add(tracked);
    if (this.pending.size >= MAX_PENDING) await Promise.race(this.pending);
  }

  private throwDeferred(): void {
    if (this.deferredError !== undefined) throw this.deferredError;
  }

  async symlink(parts: string[], meta: EntryMeta, target: string): Promise<void> {
    if (parts.length === 0) throw new UnsafePathError(meta.name, "names the archive root but is a symbolic link");
    checkSymlinkTarget(meta.name, parts, target, this.limits);
    await this.ensureParent(parts, meta.name);
    const path = join(this.root, ...parts);
    await this.create(path, meta.name, () => symlink(target, path));
  }

  /** A hard link to a regular file this archive already extracted. */
  async hardlink(parts: string[], meta: EntryMeta, targetName: string): Promise<void> {
    if (parts.length === 0) throw new UnsafePathError(meta.name, "names the archive root but is a hard link");
    let targetParts: string[];
    try {
      targetParts = entryParts(targetName, this.limits);
    } catch (error) {
      throw new LinkEscapeError(meta.name, targetName, "is a hard link to a path outside the archive", { cause: error });
    }
    const targetDir = targetParts.slice(0, -1).join("/");
    const targetPath = join(this.root, ...targetParts);
    const target = targetParts.length === 0 || !this.dirs.has(targetDir) ? undefined : await lstat(targetPath).catch(() => undefined);
    if (target === undefined || !target.isFile()) {
      throw new LinkEscapeError(meta.name, targetName, "is a hard link to something that is not a regular file extracted earlier from this archive");
    }
    await this.ensureParent(parts, meta.name);
    const path = join(this.root, ...parts);
    await this.create(path, meta.name, () => link(targetPath, path));
  }

  /** Apply directory modes last (deepest first), so read-only directories could still be filled. */
  async finish(): Promise<void> {
    await this.settle();
    const dirs = [...this.dirModes.entries()].sort((a, b) => b[0].split("/").length - a[0].split("/").length);
    for (const [rel, mode] of dirs) await chmod(join(this.root, rel), mode);
  }

  /** Make sure every parent directory of the entry exists as a real directory (never a link). */
  private async ensureParent(parts: string[], name: string): Promise<void> {
    const parentDepth = parts.length - 1;
    if (this.dirs.has(parts.slice(0, parentDepth).join("/"))) return;
    let rel = "";
    for (let i = 0; i < parentDepth; i += 1) {
      rel = rel === "" ? (parts[i] as string) : `${rel}/${parts[i] as string}`;
      if (this.dirs.has(rel)) continue;
      const path = join(this.root, rel);
      try {
        await mkdir(path, 0o755);
      } catch (error) {
        if (code(error) !== "EEXIST") throw error;
        const existing = await lstat(path);
        if (existing.isSymbolicLink()) {
          const target = await readlink(path);
          throw new LinkEscapeError(name, target, `would be written through the symbolic link "${rel}"`);
        }
        if (!existing.isDirectory()) {
          throw new CorruptArchiveError(undefined, `"${rel}" is a file but a later entry uses it as a directory`, { entry: name });
        }
      }
      this.dirs.add(rel);
    }
  }

  /** Run `make` (an O_EXCL create); if the name exists, remove it unless it is a directory, and retry once. */
  private async create<T>(path: string, name: string, make: () => Promise<T>): Promise<T> {
    try {
      return await make();
    } catch (error) {
      if (code(error) !== "EEXIST") throw error;
    }
    const existing = await lstat(path);
    if (existing.isDirectory()) {
      throw new CorruptArchiveError(undefined, "a directory of the same name was extracted earlier", { entry: name });
    }
    await unlink(path);
    return make();
  }
}

/** Set the exact mode (open() applied the umask) and mtime, then close. */
async function finalize(handle: FileHandle, mode: number, mtime: Date | undefined): Promise<void> {
  try {
    await handle.chmod(mode);
    if (mtime !== undefined && !Number.isNaN(mtime.getTime())) await handle.utimes(mtime, mtime);
  } finally {
    await handle.close();
  }
}

async function writeAll(handle: FileHandle, chunks: Buffer[]): Promise<void> {
  let pending = chunks;
  while (pending.length > 0) pending = unwritten(pending, (await handle.writev(pending)).bytesWritten);
}

/** What is left of `chunks` after a (possibly partial) writev of `bytesWritten` bytes. */
function unwritten(chunks: Buffer[], bytesWritten: number): Buffer[] {
  let skip = bytesWritten;
  const rest: Buffer[] = [];
  for (const chunk of chunks) {
    if (skip >= chunk.length) {
      skip -= chunk.length;
    } else {
      rest.push(skip > 0 ? chunk.subarray(skip) : chunk);
      skip = 0;
    }
  }
  return rest;
}

function code(error: unknown): string | undefined {
  return (error as NodeJS.ErrnoException | undefined)?.code;
}
