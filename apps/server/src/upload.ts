import { createHash, randomUUID } from "node:crypto";
import { createReadStream, createWriteStream } from "node:fs";
import { mkdir, rm } from "node:fs/promises";
import { join } from "node:path";
import type { Readable } from "node:stream";
import { Transform } from "node:stream";
import { pipeline } from "node:stream/promises";
import Busboy from "@fastify/busboy";
import { BadHeaderError, BadRequestError, PayloadTooLargeError, TooManyUploadsError, UnavailableError } from "./errors";

/** A request body written to disk as it arrived, with the sha256 of its exact bytes. */
export interface StagedBody {
  path: string;
  sha256: string;
  bytes: number;
}

/**
 * Stream `source` to a fresh file under `dir` while hashing and counting it; throws
 * PayloadTooLargeError as soon as more than `maxBytes` arrived, and a 400 naming Content-Digest
 * when `expectedSha256` is given and the body does not match it (the file is removed either way).
 * Memory stays bounded by the stream's chunk size whatever the body's size.
 */
export async function stageBody(source: Readable, options: { dir: string; maxBytes: number; expectedSha256?: string | null }): Promise<StagedBody> {
  await mkdir(options.dir, { recursive: true });
  const path = join(options.dir, `${randomUUID()}.upload`);
  const hash = createHash("sha256");
  let bytes = 0;
  const meter = new Transform({
    transform(chunk: Buffer, _encoding, callback) {
      bytes += chunk.length;
      if (bytes > options.maxBytes) {
        callback(new PayloadTooLargeError(`request body is larger than the server's upload limit of ${options.maxBytes} bytes; upload a smaller archive`));
        return;
      }
      hash.update(chunk);
      callback(null, chunk);
    },
  });
  let sha256: string;
  try {
    await pipeline(source, meter, createWriteStream(path, { flags: "wx" }));
    sha256 = hash.digest("hex");
    if (options.expectedSha256 != null && sha256 !== options.expectedSha256) throw contentDigestMismatch(bytes);
  } catch (error) {
    await rm(path, { force: true });
    throw error;
  }
  return { path, sha256, bytes };
}

/** The 400 for a body whose sha256 is not the one its Content-Digest header declared. */
export function contentDigestMismatch(bytes: number): BadHeaderError {
  return new BadHeaderError(
    "content_digest_mismatch",
    "Content-Digest",
    `request header Content-Digest does not match the ${bytes}-byte body that arrived (sha-256 differs); the upload was discarded. Send the digest of the exact bytes of the body, and the body unchanged`,
  );
}

/**
 * Caps on uploads in progress: in total and per credential (hotkey, token, or client address
 * under auth none). `acquire` throws 429 (this caller's own limit) or 503 (the server's), both
 * with Retry-After, and returns the release function.
 */
export class UploadSlots {
  private readonly perKey = new Map<string, number>();
  private total = 0;

  constructor(
    readonly maxTotal: number,
    readonly maxPerKey: number,
    private readonly retryAfterSec = 5,
  ) {}

  get inUse(): number {
    return this.total;
  }

  acquire(key: string, shownAs: string): () => void {
    const mine = this.perKey.get(key) ?? 0;
    if (mine >= this.maxPerKey) {
      throw new TooManyUploadsError(
        `${shownAs} already has ${mine} upload(s) in progress, the limit per credential (maxConcurrentUploadsPerKey, --max-uploads-per-key ${this.maxPerKey}); wait for one to finish`,
        this.retryAfterSec,
      );
    }
    if (this.total >= this.maxTotal) {
      throw new UnavailableError(
        `the server is receiving ${this.total} uploads, its limit (maxConcurrentUploads, --max-uploads ${this.maxTotal}); retry shortly`,
        { code: "too_many_uploads", retryAfterSec: this.retryAfterSec },
      );
    }
    this.perKey.set(key, mine + 1);
    this.total += 1;
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.total -= 1;
      const left = (this.perKey.get(key) ?? 1) - 1;
      if (left <= 0) this.perKey.delete(key);
      else this.perKey.set(key, left);
    };
  }
}

/** sha256 hex of a body held in memory (small bodies, and the empty body of GETs). */
export function sha256Hex(body: Buffer | string): string {
  return createHash("sha256").update(body).digest("hex");
}

/** The multipart form fields that may carry the archive (term-executor accepts both). */
export const ARCHIVE_FIELDS = ["archive", "file"] as const;

/**
 * Parse a staged multipart/form-data body and hand the first `archive` (or `file`) part to
 * `consume` as a stream. Other files are ignored, text fields go to `onField` (when given); a
 * second archive part is a 400. Throws BadRequestError when the body is not multipart or holds
 * no archive part.
 */
export async function consumeArchivePart<T>(
  staged: StagedBody,
  contentType: string,
  consume: (stream: Readable, filename: string) => Promise<T>,
  onField?: (name: string, value: string) => void,
): Promise<T> {
  let busboy: InstanceType<typeof Busboy>;
  try {
    busboy = new Busboy({ headers: { "content-type": contentType }, limits: { files: 1, fields: 100, fieldSize: 64 * 1024, parts: 200 } });
  } catch (error) {
    throw new BadRequestError(`Content-Type must be multipart/form-data with a boundary, got "${contentType}"`, { cause: error });
  }
  return new Promise<T>((resolve, reject) => {
    let outcome: Promise<T> | null = null;
    let failed = false;
    const file = createReadStream(staged.path);
    const fail = (error: unknown) => {
      if (failed) return;
      failed = true;
      file.destroy();
      reject(error);
    };
    busboy.on("file", (field: string, stream: Readable, filename: string) => {
      if (outcome !== null || !(ARCHIVE_FIELDS as readonly string[]).includes(field)) {
        stream.resume();
        return;
      }
      outcome = consume(stream, filename);
      // The consumer must read the stream to its end (or fail); either settles the promise.
      outcome.then(
        (value) => {
          stream.resume();
          if (!failed) finish(value);
        },
        (error: unknown) => {
          stream.resume();
          fail(error);
        },
      );
    });
    let parsed = false;
    let value: { v: T } | null = null;
    const finish = (v: T) => {
      value = { v };
      if (parsed) resolve(v);
    };
    if (onField) busboy.on("field", (name: string, value: string) => onField(name, value));
    busboy.on("filesLimit", () => fail(new BadRequestError("the form holds more than one file; send the archive alone in the `archive` field")));
    busboy.on("partsLimit", () => fail(new BadRequestError("the form has too many parts; send only the `archive` field")));
    busboy.on("error", (error: unknown) => fail(new BadRequestError(`the multipart body is malformed: ${(error as Error).message}`, { cause: error })));
    busboy.on("finish", () => {
      parsed = true;
      if (outcome === null) {
        fail(new BadRequestError("the form has no `archive` (or `file`) field; upload the .tar.gz or .zip as multipart field `archive`"));
        return;
      }
      if (value !== null) resolve(value.v);
    });
    file.on("error", fail);
    file.pipe(busboy);
  });
}
