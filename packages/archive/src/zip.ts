import type { Readable } from "node:stream";
import { crc32 } from "node:zlib";
import * as yauzl from "yauzl";
import { ArchiveAbortedError, ArchiveError, CorruptArchiveError, LimitExceededError, UnsupportedEntryError } from "./errors";
import type { ExtractLimits } from "./limits";
import type { TreeWriter } from "./writer";

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
/** Zip "version made by" high byte for Unix: only then do external attributes carry a mode. */
const MADE_BY_UNIX = 3;

/**
 * Extract a zip file (random access, so it must be on disk) through `writer`. `archiveBytes` is the
 * zip's size, the denominator of the compression ratio. Declared sizes are checked against the
 * limits before an entry is read, actual bytes while it streams, and every entry's CRC-32 at its end.
 */
export async function extractZipFile(path: string, archiveBytes: number, writer: TreeWriter, limits: ExtractLimits, signal?: AbortSignal): Promise<void> {
  let zip: yauzl.ZipFile;
  try {
    zip = await yauzl.openPromise(path, { lazyEntries: true, autoClose: false, decodeStrings: false, validateEntrySizes: true, strictFileNames: false });
  } catch (error) {
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
        const target = await readAll(zip, entry, name, writer, archiveBytes, limits);
        await writer.symlink(parts, meta, target.toString("utf8"));
        continue;
      }
      writer.checkFileSize(name, entry.uncompressedSize);
      await writer.file(parts, meta, checked(await openEntry(zip, entry, name), entry, name, writer, archiveBytes, limits));
    }
    await entries.return?.();
  } finally {
    zip.close();
  }
}

/** Pass the entry's chunks on, checking the whole-archive ratio as bytes come and the CRC-32 at the end. */
async function* checked(opened: { stream: Readable; failure: () => unknown }, entry: yauzl.Entry, name: string, writer: TreeWriter, archiveBytes: number, limits: ExtractLimits): AsyncGenerator<Buffer> {
  const { stream, failure } = opened;
  let crc = 0;
  try {
    for await (const chunk of stream as AsyncIterable<Buffer>) {
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
 * Open an entry's data. yauzl's streams are piped internally and can fail (size checks, inflate)
 * before anyone reads them, so the error is caught at once and re-thrown to the reader.
 */
async function openEntry(zip: yauzl.ZipFile, entry: yauzl.Entry, name: string): Promise<{ stream: Readable; failure: () => unknown }> {
  let stream: Readable;
  try {
    stream = await zip.openReadStreamPromise(entry);
  } catch (error) {
    throw corrupt(error, name);
  }
  let failure: unknown;
  stream.on("error", (error: unknown) => {
    failure ??= error;
  });
  return { stream, failure: () => failure };
}

async function readAll(zip: yauzl.ZipFile, entry: yauzl.Entry, name: string, writer: TreeWriter, archiveBytes: number, limits: ExtractLimits): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of checked(await openEntry(zip, entry, name), entry, name, writer, archiveBytes, limits)) chunks.push(chunk);
  return Buffer.concat(chunks);
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
