import { read as fsRead } from "node:fs";
import { open } from "node:fs/promises";
import { pipeline, Readable } from "node:stream";
import { crc32, createInflateRaw, inflateRawSync } from "node:zlib";
import * as yauzl from "yauzl";
import { ArchiveAbortedError, ArchiveError, CorruptArchiveError, LimitExceededError, UnsupportedEntryError } from "./errors";
import type { ExtractLimits } from "./limits";
import { SMALL_FILE_BYTES, type TreeWriter } from "./writer";

const S_IFMT = 0o170000;
const S_IFREG = 0o100000;
const S_IFDIR = 0o040000;
const S_IFLNK = 0o120000;
const UNIX_TYPES: Record<number, string> = {
  0o010000: "FIFO (named pipe)",
  0o020000: "character device",
  0o060000: "block device",
  0o140000: "socket",
};
const READ_AHEAD_BYTES = 256 * 1024;
const CACHED_BLOCKS = 4;
/** Zip "version made by" high byte for Unix: only then do external attributes carry a mode. */
const MADE_BY_UNIX = 3;

/**
 * Extract a zip file (random access, so it must be on disk) through `writer`. `archiveBytes` is the
 * zip's size, the denominator of the compression ratio. Declared sizes are checked against the
 * limits before an entry is read, actual bytes while it streams, and every entry's CRC-32 at its end.
 */
export async function extractZipFile(path: string, archiveBytes: number, writer: TreeWriter, limits: ExtractLimits, signal?: AbortSignal): Promise<void> {
  const file = await open(path, "r");
  const reader = new CachedFileReader(file.fd);
  let zip: yauzl.ZipFile;
  try {
    zip = await yauzl.fromRandomAccessReaderPromise(reader, archiveBytes, { lazyEntries: true, autoClose: false, decodeStrings: false, validateEntrySizes: true, strictFileNames: false });
  } catch (error) {
    await file.close();
    throw corrupt(error);
  }
  try {
    if (zip.entryCount > limits.maxEntries) {
      throw new LimitExceededError("maxEntries", limits.maxEntries, zip.entryCount, "zip archive declares too many entries");
    }
    let declaredTotal = 0;
    const entries = zip.eachEntry();
    for (;;) {
      if (signal?.aborted === true) throw new ArchiveAbortedError({ cause: signal.reason });
      let next: IteratorResult<yauzl.Entry>;
      try {
        next = await entries.next();
      } catch (error) {
        throw corrupt(error);
      }
      if (next.done === true) break;
      const entry = next.value;
      const name = yauzl.getFileNameLowLevel(entry.generalPurposeBitFlag, entry.fileNameRaw, entry.extraFields, false);
      const parts = writer.begin(name);
      const unixMode = entry.versionMadeBy >> 8 === MADE_BY_UNIX ? entry.externalFileAttributes >>> 16 : 0;
      const type = unixMode & S_IFMT;
      const isDirectory = name.endsWith("/") || type === S_IFDIR || (type === 0 && (entry.externalFileAttributes & 0x10) !== 0);
      const permissions = unixMode & 0o7777;
      const meta = { name, mode: permissions === 0 ? (isDirectory ? 0o755 : 0o644) : permissions, mtime: entry.getLastModDate() };

      if (isDirectory) {
        await writer.directory(parts, meta);
        continue;
      }
      const unsupported = UNIX_TYPES[type];
      if (unsupported !== undefined) throw new UnsupportedEntryError(name, unsupported);
      if (type !== 0 && type !== S_IFREG && type !== S_IFLNK) throw new UnsupportedEntryError(name, `zip entry of file type 0o${type.toString(8)}`);
      if (entry.isEncrypted()) throw new UnsupportedEntryError(name, "encrypted zip entry");
      if (entry.compressionMethod !== 0 && entry.compressionMethod !== 8) {
        throw new UnsupportedEntryError(name, `zip entry compressed with method ${entry.compressionMethod} (only stored and deflate are supported)`);
      }

      declaredTotal += entry.uncompressedSize;
      checkRatio(declaredTotal, archiveBytes, limits, name);
      if (type === S_IFLNK) {
        if (entry.uncompressedSize > limits.maxPathLength) {
          throw new LimitExceededError("maxPathLength", limits.maxPathLength, entry.uncompressedSize, "symbolic link target is too long", { entry: name });
        }
        if (entry.compressedSize > SMALL_FILE_BYTES) throw new CorruptArchiveError("zip", `symbolic link data is ${entry.compressedSize} bytes compressed`, { entry: name });
        const target = await readSmall(zip, reader, entry, name);
        await writer.symlink(parts, meta, target.toString("utf8"));
        continue;
      }
      writer.checkFileSize(name, entry.uncompressedSize);
      if (entry.uncompressedSize <= SMALL_FILE_BYTES && entry.compressedSize <= SMALL_FILE_BYTES) {
        await writer.smallFile(parts, meta, [await readSmall(zip, reader, entry, name)]);
        continue;
      }
      await writer.file(parts, meta, checked(await openEntry(zip, file.fd, entry, name), entry, name, writer, archiveBytes, limits), entry.uncompressedSize);
    }
    await entries.return?.();
  } finally {
    zip.close();
    await file.close();
  }
}

/**
 * Pass the entry's chunks on, checking as bytes come that there are no more than declared and
 * the whole-archive ratio, and at the end the size and the CRC-32.
 */
async function* checked(opened: { stream: Readable; failure: () => unknown }, entry: yauzl.Entry, name: string, writer: TreeWriter, archiveBytes: number, limits: ExtractLimits): AsyncGenerator<Buffer> {
  const { stream, failure } = opened;
  let crc = 0;
  let size = 0;
  try {
    for await (const chunk of stream as AsyncIterable<Buffer>) {
      size += chunk.length;
      if (size > entry.uncompressedSize) throw new CorruptArchiveError("zip", `entry holds more than the ${entry.uncompressedSize} bytes it declares`, { entry: name });
      crc = crc32(chunk, crc);
      checkRatio(writer.bytes + chunk.length, archiveBytes, limits, name);
      yield chunk;
    }
  } catch (error) {
    throw corrupt(failure() ?? error, name);
  } finally {
    stream.destroy();
  }
  if (failure() !== undefined) throw corrupt(failure(), name);
  if (size !== entry.uncompressedSize) throw new CorruptArchiveError("zip", `entry holds ${size} bytes but declares ${entry.uncompressedSize}`, { entry: name });
  if (crc >>> 0 !== entry.crc32 >>> 0) {
    throw new CorruptArchiveError("zip", `CRC-32 mismatch (stored ${hex(entry.crc32)}, data ${hex(crc)})`, { entry: name });
  }
}

function checkRatio(uncompressed: number, archiveBytes: number, limits: ExtractLimits, name: string): void {
  if (uncompressed <= limits.compressionRatioGraceBytes) return;
  const ratio = uncompressed / Math.max(1, archiveBytes);
  if (ratio > limits.maxCompressionRatio) {
    throw new LimitExceededError("maxCompressionRatio", limits.maxCompressionRatio, Math.round(ratio), `zip archive of ${archiveBytes} bytes expands to at least ${uncompressed} bytes (a compression bomb?)`, { entry: name });
  }
}

/**
 * Open a large entry's data: its byte range of the file, inflated with large output chunks
 * (yauzl's own stream uses 16 KiB ones and an extra byte-count stage, which cost more than the
 * inflate). The stream can fail before anyone reads it, so its error is kept and re-thrown to
 * the reader by `checked`.
 */
async function openEntry(zip: yauzl.ZipFile, fd: number, entry: yauzl.Entry, name: string): Promise<{ stream: Readable; failure: () => unknown }> {
  let fileDataStart: number;
  try {
    ({ fileDataStart } = await zip.readLocalFileHeaderPromise(entry, { minimal: true }));
  } catch (error) {
    throw corrupt(error, name);
  }
  const raw = new RangeStream(fd, fileDataStart, fileDataStart + entry.compressedSize);
  const stream = entry.compressionMethod === 0 ? raw : pipeline(raw, createInflateRaw({ chunkSize: 128 * 1024 }), () => undefined);
  let failure: unknown;
  stream.on("error", (error: unknown) => {
    failure ??= error;
  });
  return { stream, failure: () => failure };
}

/**
 * A small entry's data in one piece: one read (usually served from the reader's cache) and a
 * synchronous inflate, instead of a stream and a zlib context per entry. The output is capped at
 * the declared size, and size and CRC-32 are checked.
 */
async function readSmall(zip: yauzl.ZipFile, reader: CachedFileReader, entry: yauzl.Entry, name: string): Promise<Buffer> {
  let data: Buffer;
  try {
    const { fileDataStart } = await zip.readLocalFileHeaderPromise(entry, { minimal: true });
    const raw = Buffer.allocUnsafe(entry.compressedSize);
    await reader.readFully(raw, fileDataStart);
    data = entry.compressionMethod === 0 ? raw : inflateRawSync(raw, { maxOutputLength: Math.max(1, entry.uncompressedSize) });
  } catch (error) {
    throw corrupt(error, name);
  }
  if (data.length !== entry.uncompressedSize) {
    throw new CorruptArchiveError("zip", `entry holds ${data.length} bytes but declares ${entry.uncompressedSize}`, { entry: name });
  }
  const crc = crc32(data);
  if (crc >>> 0 !== entry.crc32 >>> 0) throw new CorruptArchiveError("zip", `CRC-32 mismatch (stored ${hex(entry.crc32)}, data ${hex(crc)})`, { entry: name });
  return data;
}

/**
 * yauzl reads the central directory and local headers in many tiny reads, each a thread-pool
 * round trip; this serves reads of up to 64 KiB from a few 256 KiB read-ahead blocks instead
 * (one follows the central directory, another the entries' data, which alternate).
 */
class CachedFileReader extends yauzl.RandomAccessReader {
  private blocks: { start: number; data: Buffer }[] = [];

  constructor(private readonly fd: number) {
    super();
  }

  override _readStreamForRange(start: number, end: number): Readable {
    return new RangeStream(this.fd, start, end);
  }

  override read(buffer: Buffer, offset: number, length: number, position: number, callback: (error: Error | null, bytesRead?: number) => void): void {
    for (const block of this.blocks) {
      const at = position - block.start;
      if (at >= 0 && at + length <= block.data.length) {
        block.data.copy(buffer, offset, at, at + length);
        process.nextTick(callback, null, length);
        return;
      }
    }
    if (length > SMALL_FILE_BYTES) {
      fsRead(this.fd, buffer, offset, length, position, (error, bytesRead) => callback(error, bytesRead));
      return;
    }
    const data = Buffer.allocUnsafe(READ_AHEAD_BYTES);
    fsRead(this.fd, data, 0, data.length, position, (error, bytesRead) => {
      if (error !== null) {
        callback(error);
        return;
      }
      this.blocks = [{ start: position, data: data.subarray(0, bytesRead) }, ...this.blocks.slice(0, CACHED_BLOCKS - 1)];
      const available = Math.min(length, bytesRead);
      data.copy(buffer, offset, 0, available);
      callback(null, available);
    });
  }

  /** Fill `buffer` from `position`, or fail with "unexpected end of file". */
  readFully(buffer: Buffer, position: number): Promise<void> {
    if (buffer.length === 0) return Promise.resolve();
    return new Promise((resolve, reject) => {
      this.read(buffer, 0, buffer.length, position, (error, bytesRead) => {
        if (error !== null) reject(error);
        else if (bytesRead !== buffer.length) reject(new Error("unexpected end of file"));
        else resolve();
      });
    });
  }
}

/** Bytes [start, end) of a shared file descriptor, which it never closes (fs.ReadStream would). */
class RangeStream extends Readable {
  private position: number;

  constructor(
    private readonly fd: number,
    start: number,
    private readonly end: number,
  ) {
    super({ highWaterMark: READ_AHEAD_BYTES });
    this.position = start;
  }

  override _read(): void {
    const length = Math.min(READ_AHEAD_BYTES, this.end - this.position);
    if (length <= 0) {
      this.push(null);
      return;
    }
    fsRead(this.fd, Buffer.allocUnsafe(length), 0, length, this.position, (error, bytesRead, buffer) => {
      if (error !== null) this.destroy(error);
      else if (bytesRead === 0) this.destroy(new Error("unexpected end of file"));
      else {
        this.position += bytesRead;
        this.push(buffer.subarray(0, bytesRead));
      }
    });
  }
}

function corrupt(error: unknown, entry?: string): unknown {
  if (error instanceof ArchiveError) return error;
  if (!(error instanceof Error)) return error;
  // File-system errors (ENOSPC, EACCES...) are not the archive's fault: pass them on unchanged.
  if (typeof (error as NodeJS.ErrnoException).code === "string" && (error as NodeJS.ErrnoException).syscall !== undefined) return error;
  return new CorruptArchiveError("zip", error.message, { entry, cause: error });
}

function hex(value: number): string {
  return (value >>> 0).toString(16).padStart(8, "0");
}
