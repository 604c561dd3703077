import { createReadStream, createWriteStream } from "node:fs";
import { mkdir, mkdtemp, readdir, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { Readable, type Writable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { createGunzip, type ZlibOptions } from "node:zlib";
import { silentLogger, type Logger } from "@proctor/schema";
import { ArchiveAbortedError, ArchiveError, CorruptArchiveError, DestinationNotEmptyError, LimitExceededError, UnknownFormatError, type ArchiveFormat } from "./errors";
import { resolveLimits, type ExtractLimits } from "./limits";
import { sniffFormat, SNIFF_BYTES } from "./sniff";
import { CompressedCounter, RatioGuard, splitHead } from "./streams";
import { createTarSink } from "./tar";
import { TreeWriter } from "./writer";
import { extractZipFile } from "./zip";

/** Bytes each stage may run ahead of the next, so decompression overlaps with file writes. */
const STAGE_BUFFER_BYTES = 1024 * 1024;

// zlib hands these options to its Transform base too; the typings only list zlib's own.
const gunzipOptions = { chunkSize: 128 * 1024, readableHighWaterMark: STAGE_BUFFER_BYTES } as ZlibOptions;

export interface ExtractOptions {
  signal?: AbortSignal;
  logger?: Logger;
  /** Where a zip arriving as a stream is spooled before reading (zip needs random access). Default: the OS temp dir. */
  tempDir?: string;
}

export interface ExtractResult {
  /** Entries in the archive (files, directories, links, including the root entry `./` if present). */
  entries: number;
  /** Regular files written. */
  files: number;
  /** Bytes of file content written. */
  bytes: number;
  format: ArchiveFormat;
}

/**
 * Extract a tar, tar.gz or zip archive (recognised by its first bytes) into `destDir`, which must
 * not exist yet or be empty; it is created. `source` is a file path or a stream (e.g. an HTTP
 * upload), read once, never held in memory whole. Every entry is checked before anything is
 * written for it; on any failure everything written is removed (a `destDir` this call created is
 * deleted, a pre-existing empty one is emptied) and the error is an `ArchiveError` subclass
 * (file-system and source-stream errors are passed on as they are). A stream `source` is not
 * destroyed on failure, only no longer read: the caller decides (e.g. answer 413, then close).
 */
export async function extractArchive(
  source: string | Readable,
  destDir: string,
  limits: Partial<ExtractLimits> = {},
  options: ExtractOptions = {},
): Promise<ExtractResult> {
  const resolvedLimits = resolveLimits(limits);
  const logger = options.logger ?? silentLogger;
  const root = resolve(destDir);
  const created = await prepareDestination(root);
  const writer = new TreeWriter(root, resolvedLimits);
  const label = typeof source === "string" ? source : "stream";
  try {
    const format = await run(source, writer, resolvedLimits, options);
    await writer.finish();
    logger.debug("archive extracted", { source: label, destDir: root, format, entries: writer.entries, files: writer.files, bytes: writer.bytes });
    return { entries: writer.entries, files: writer.files, bytes: writer.bytes, format };
  } catch (error) {
    const mapped = mapError(error, options.signal);
    logger.warn("archive rejected", { source: label, destDir: root, error: mapped instanceof Error ? mapped.message : String(mapped) });
    // Files still being closed in the background must be done before their directory goes.
    await writer.settle().catch(() => undefined);
    await removeOutput(root, created);
    throw mapped;
  }
}

async function run(source: string | Readable, writer: TreeWriter, limits: ExtractLimits, options: ExtractOptions): Promise<ArchiveFormat> {
  const { signal } = options;
  if (signal?.aborted === true) throw new ArchiveAbortedError({ cause: signal.reason });
  let input: Readable;
  if (typeof source === "string") {
    const size = (await stat(source)).size;
    if (size > limits.maxCompressedBytes) {
      throw new LimitExceededError("maxCompressedBytes", limits.maxCompressedBytes, size, `archive file ${source} is too large`);
    }
    input = createReadStream(source, { highWaterMark: 256 * 1024 });
  } else {
    input = source;
  }

  const counter = new CompressedCounter(limits);
  // Not stream.pipeline: a caller's stream must not be destroyed when we stop reading it.
  const onSourceError = (error: Error): void => {
    counter.destroy(error);
  };
  input.on("error", onSourceError);
  input.pipe(counter);
  try {
    const { head, rest } = await splitHead(counter, SNIFF_BYTES);
    const sniffed = sniffFormat(head);
    if (sniffed.format === undefined) {
      rest.destroy();
      throw new UnknownFormatError(sniffed.detail);
    }
    const format = sniffed.format;
    if (format === "zip") {
      if (typeof source === "string") {
        rest.destroy();
        await extractZipFile(source, (await stat(source)).size, writer, limits, signal);
      } else {
        await extractSpooledZip(rest, counter, writer, limits, options);
      }
      return format;
    }
    const stages: (Readable | Writable | NodeJS.ReadWriteStream)[] = [rest];
    if (format === "tar.gz") stages.push(createGunzip(gunzipOptions), new RatioGuard(limits, () => counter.bytes));
    stages.push(createTarSink(writer, format));
    await pipelineStages(stages, signal, format);
    return format;
  } finally {
    input.off("error", onSourceError);
    input.unpipe(counter);
    if (typeof source === "string") input.destroy();
  }
}

async function pipelineStages(stages: (Readable | Writable | NodeJS.ReadWriteStream)[], signal: AbortSignal | undefined, format: ArchiveFormat): Promise<void> {
  try {
    await (pipeline as (...args: unknown[]) => Promise<void>)(...stages, signal === undefined ? {} : { signal });
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (!(error instanceof ArchiveError) && typeof code === "string" && code.startsWith("Z_")) {
      throw new CorruptArchiveError(format, `gzip data is invalid (${(error as Error).message})`, { cause: error });
    }
    throw error;
  }
}

/** Zip needs random access: copy the stream to a private temp file (under the same size limit), then read it there. */
async function extractSpooledZip(rest: Readable, counter: CompressedCounter, writer: TreeWriter, limits: ExtractLimits, options: ExtractOptions): Promise<void> {
  const spoolDir = await mkdtemp(join(options.tempDir ?? tmpdir(), "proctor-zip-"));
  try {
    const file = join(spoolDir, "upload.zip");
    await pipeline(rest, createWriteStream(file, { flags: "wx", mode: 0o600 }), options.signal === undefined ? {} : { signal: options.signal });
    await extractZipFile(file, counter.bytes, writer, limits, options.signal);
  } finally {
    await rm(spoolDir, { recursive: true, force: true });
  }
}

/** Create the destination; returns whether this call created it. Refuses a non-empty existing directory. */
async function prepareDestination(root: string): Promise<boolean> {
  const made = await mkdir(root, { recursive: true });
  if (made !== undefined) return true;
  const existing = await stat(root);
  if (!existing.isDirectory() || (await readdir(root)).length > 0) throw new DestinationNotEmptyError(root);
  return false;
}

async function removeOutput(root: string, created: boolean): Promise<void> {
  if (created) {
    await rm(root, { recursive: true, force: true });
    return;
  }
  for (const name of await readdir(root)) await rm(join(root, name), { recursive: true, force: true });
}

function mapError(error: unknown, signal: AbortSignal | undefined): unknown {
  if (error instanceof ArchiveError) return error;
  if (error instanceof Error && (error.name === "AbortError" || signal?.aborted === true)) return new ArchiveAbortedError({ cause: error });
  return error;
}
