import { Readable, Transform, type TransformCallback } from "node:stream";
import { LimitExceededError } from "./errors";
import type { ExtractLimits } from "./limits";

/** Counts the bytes of an upload as they arrive and fails as soon as there are more than the limit. */
export class CompressedCounter extends Transform {
  bytes = 0;
  constructor(private readonly limits: ExtractLimits) {
    super({ highWaterMark: 256 * 1024 });
  }
  override _transform(chunk: Buffer, _encoding: BufferEncoding, callback: TransformCallback): void {
    this.bytes += chunk.length;
    if (this.bytes > this.limits.maxCompressedBytes) {
      callback(new LimitExceededError("maxCompressedBytes", this.limits.maxCompressedBytes, this.bytes, "archive upload is too large"));
      return;
    }
    callback(null, chunk);
  }
}

/** Sits after a decompressor: fails when the output outgrows the input by more than the allowed ratio. */
export class RatioGuard extends Transform {
  bytes = 0;
  constructor(
    private readonly limits: ExtractLimits,
    private readonly compressedBytes: () => number,
  ) {
    super({ highWaterMark: 1024 * 1024 });
  }
  override _transform(chunk: Buffer, _encoding: BufferEncoding, callback: TransformCallback): void {
    this.bytes += chunk.length;
    if (this.bytes > this.limits.compressionRatioGraceBytes) {
      const ratio = this.bytes / Math.max(1, this.compressedBytes());
      if (ratio > this.limits.maxCompressionRatio) {
        callback(
          new LimitExceededError("maxCompressionRatio", this.limits.maxCompressionRatio, Math.round(ratio), `archive decompresses to ${this.bytes} bytes from ${this.compressedBytes()} (a compression bomb?)`),
        );
        return;
      }
    }
    callback(null, chunk);
  }
}

/**
 * Read the first `size` bytes of `stream` (fewer if it ends sooner) and return them with a stream
 * that replays them followed by the rest. Destroying `rest` destroys `stream`.
 */
export async function splitHead(stream: Readable, size: number): Promise<{ head: Buffer; rest: Readable }> {
  const iterator = stream[Symbol.asyncIterator]() as AsyncIterator<Buffer>;
  const chunks: Buffer[] = [];
  let length = 0;
  let done = false;
  while (length < size) {
    const next = await iterator.next();
    if (next.done === true) {
      done = true;
      break;
    }
    chunks.push(next.value);
    length += next.value.length;
  }
  const head = Buffer.concat(chunks, length);
  async function* replay(): AsyncGenerator<Buffer> {
    let finished = done;
    try {
      if (length > 0) yield head;
      while (!finished) {
        const next = await iterator.next();
        if (next.done === true) {
          finished = true;
          return;
        }
        yield next.value;
      }
    } finally {
      if (!finished) await iterator.return?.();
    }
  }
  return { head: head.subarray(0, size), rest: Readable.from(replay(), { objectMode: false, highWaterMark: 256 * 1024 }) };
}
