import { constants } from "node:fs";
import { chmod, link, lstat, mkdir, open, readlink, symlink, unlink, type FileHandle } from "node:fs/promises";
import { join } from "node:path";
import { CorruptArchiveError, LimitExceededError, LinkEscapeError, UnsafePathError } from "./errors";
import type { ExtractLimits } from "./limits";
import { checkSymlinkTarget, entryParts } from "./paths";

/** Permission bits kept from archives: set-uid and set-gid are dropped, the sticky bit is kept. */
const MODE_MASK = 0o1777;
const CREATE_FILE = constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW;
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

  /** Write one regular file from `data`; the bytes are counted against the per-file and total limits as they come. */
  async file(parts: string[], meta: EntryMeta, data: AsyncIterable<Buffer>): Promise<void> {
    if (parts.length === 0) throw new UnsafePathError(meta.name, "names the archive root but is a file");
    await this.ensureParent(parts, meta.name);
    const path = join(this.root, ...parts);
    const handle = await this.create(path, meta.name, () => open(path, CREATE_FILE, 0o600));
    let written = 0;
    try {
      let batch: Buffer[] = [];
      let batchBytes = 0;
      for await (const chunk of data) {
        written += chunk.length;
        this.bytes += chunk.length;
        if (written > this.limits.maxFileBytes) {
          throw new LimitExceededError("maxFileBytes", this.limits.maxFileBytes, written, "archive entry is too large", { entry: meta.name });
        }
        if (this.bytes > this.limits.maxTotalBytes) {
          throw new LimitExceededError("maxTotalBytes", this.limits.maxTotalBytes, this.bytes, "archive expands to too many bytes", { entry: meta.name });
        }
        batch.push(chunk);
        batchBytes += chunk.length;
        if (batchBytes >= WRITE_BATCH_BYTES) {
          await writeAll(handle, batch);
          batch = [];
          batchBytes = 0;
        }
      }
      if (batch.length > 0) await writeAll(handle, batch);
      await handle.chmod((meta.mode ?? 0o644) & MODE_MASK);
      if (meta.mtime !== undefined && !Number.isNaN(meta.mtime.getTime())) await handle.utimes(meta.mtime, meta.mtime);
    } finally {
      await handle.close();
    }
    this.files += 1;
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

async function writeAll(handle: FileHandle, chunks: Buffer[]): Promise<void> {
  let pending = chunks;
  while (pending.length > 0) {
    const { bytesWritten } = await handle.writev(pending);
    let skip = bytesWritten;
    const rest: Buffer[] = [];
    for (const chunk of pending) {
      if (skip >= chunk.length) {
        skip -= chunk.length;
      } else {
        rest.push(skip > 0 ? chunk.subarray(skip) : chunk);
        skip = 0;
      }
    }
    pending = rest;
  }
}

function code(error: unknown): string | undefined {
  return (error as NodeJS.ErrnoException | undefined)?.code;
}
