import { Writable } from "node:stream";
import { Parser, type ReadEntry } from "tar";
import { CorruptArchiveError, UnknownFormatError, UnsupportedEntryError, type ArchiveFormat } from "./errors";
import { isTarHeader, SNIFF_BYTES } from "./sniff";
import { SMALL_FILE_BYTES, type TreeWriter } from "./writer";

/**
 * A writable that takes an uncompressed tar stream and writes its entries through `writer`, one
 * at a time, pausing the stream while an entry is being written. Anything that is not a plain
 * file, directory or link fails it. Data after the end-of-archive marker is read and dropped.
 */
export function createTarSink(writer: TreeWriter, format: ArchiveFormat): Writable {
  const parser = new Parser({ strict: true, brotli: false, zstd: false });
  let failed = false;
  let finished = false;
  let sawEof = false;
  let checkedHead = false;
  let headBuffer: Buffer[] = [];
  let headLength = 0;
  let current: Promise<void> = Promise.resolve();
  let currentEntry: ReadEntry | undefined;

  const sink = new Writable({
    highWaterMark: 1024 * 1024,
    write(chunk: Buffer, _encoding, callback) {
      if (!checkedHead) {
        headBuffer.push(chunk);
        headLength += chunk.length;
        if (headLength < SNIFF_BYTES) {
          callback();
          return;
        }
        chunk = Buffer.concat(headBuffer, headLength);
        headBuffer = [];
        if (!checkHead(chunk)) return;
      }
      forward(chunk, callback);
    },
    final(callback) {
      if (!checkedHead) {
        const rest = Buffer.concat(headBuffer, headLength);
        if (!checkHead(rest)) return;
        parser.write(rest);
      }
      parser.once("end", () => {
        current.then(() => {
          if (failed) return;
          finished = true;
          callback();
        }, callback);
      });
      parser.end();
    },
    destroy(error, callback) {
      if (error === null && finished) {
        callback(null);
        return;
      }
      failed = true;
      const reason = error ?? new Error("tar extraction stopped");
      parser.abort(reason);
      // Unblock the entry being written (it would otherwise wait for data that never comes).
      currentEntry?.destroy(reason);
      // Let the entry being written settle (close its file) before reporting.
      current.then(() => callback(error), () => callback(error));
    },
  });

  function checkHead(head: Buffer): boolean {
    checkedHead = true;
    if (!isTarHeader(head)) {
      sink.destroy(new UnknownFormatError(format === "tar.gz" ? "gzip-compressed data that is not a tar archive" : "not a tar archive"));
      return false;
    }
    return true;
  }

  function forward(chunk: Buffer, callback: (error?: Error | null) => void): void {
    if (sawEof) {
      callback();
      return;
    }
    if (parser.write(chunk)) callback();
    else parser.once("drain", () => callback());
  }

  function fail(error: unknown): void {
    if (failed) return;
    failed = true;
    sink.destroy(error instanceof Error ? error : new Error(String(error)));
  }

  parser.on("eof", () => {
    sawEof = true;
  });
  parser.on("error", (error: Error & { tarCode?: string }) => {
    if (failed) return;
    // An archive of only end-of-archive blocks is empty, not corrupt.
    if (sawEof && writer.entries === 0 && error.tarCode === "TAR_BAD_ARCHIVE") return;
    fail(new CorruptArchiveError(format, error.message.replace(/^TAR_\w+: /, ""), { cause: error }));
  });
  parser.on("ignoredEntry", (entry: ReadEntry) => {
    fail(new UnsupportedEntryError(entry.path, entry.meta ? "oversized extended header" : `tar entry of type ${entry.type}`));
  });
  parser.on("entry", (entry: ReadEntry) => {
    // Destroying an entry (on failure) emits its error before anyone may be reading it; the
    // failure itself is already being reported through the sink.
    entry.on("error", () => undefined);
    // Entries are handled strictly in order: the next starts once the previous file is closed.
    current = current.then(() => handle(entry)).catch((error: unknown) => {
      entry.resume();
      fail(error);
    });
  });

  async function handle(entry: ReadEntry): Promise<void> {
    if (failed) return;
    currentEntry = entry;
    const name = entry.path;
    const parts = writer.begin(name);
    const meta = { name, mode: entry.mode, mtime: entry.mtime };
    switch (entry.type) {
      case "File":
      case "OldFile":
      case "ContiguousFile":
        writer.checkFileSize(name, entry.size);
        if (entry.size <= SMALL_FILE_BYTES) await writer.smallFile(parts, meta, await collect(entry));
        else await writer.file(parts, meta, entry as AsyncIterable<Buffer>, entry.size);
        return;
      case "Directory":
        await writer.directory(parts, meta);
        break;
      case "SymbolicLink":
        await writer.symlink(parts, meta, entry.linkpath ?? "");
        break;
      case "Link":
        await writer.hardlink(parts, meta, entry.linkpath ?? "");
        break;
      case "CharacterDevice":
        throw new UnsupportedEntryError(name, "character device");
      case "BlockDevice":
        throw new UnsupportedEntryError(name, "block device");
      case "FIFO":
        throw new UnsupportedEntryError(name, "FIFO (named pipe)");
      default:
        throw new UnsupportedEntryError(name, `tar entry of type ${entry.type}`);
    }
    entry.resume();
  }

  return sink;
}

/** All of a (small) entry's data; cheaper than async iteration for the many-small-files case. */
function collect(entry: ReadEntry): Promise<Buffer[]> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    entry.on("data", (chunk: Buffer) => chunks.push(chunk));
    entry.once("end", () => resolve(chunks));
    entry.once("error", reject);
  });
}
