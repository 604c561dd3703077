import { constants } from "node:os";
import type { ExecResult } from "./types";

/** Default per stream cap on what an ExecResult keeps. */
export const DEFAULT_MAX_OUTPUT_BYTES = 1024 * 1024;

/** Drop an incomplete UTF-8 sequence at the end of `buf`. */
function trimUtf8End(buf: Buffer): Buffer {
  let i = buf.length - 1;
  let back = 0;
  while (i >= 0 && back < 4 && ((buf[i] ?? 0) & 0xc0) === 0x80) {
    i--;
    back++;
  }
  if (i < 0) return buf;
  const lead = buf[i] ?? 0;
  const need = lead >= 0xf0 ? 4 : lead >= 0xe0 ? 3 : lead >= 0xc0 ? 2 : 1;
  return need > back + 1 ? buf.subarray(0, i) : buf;
}

/** Drop UTF-8 continuation bytes at the start of `buf` (the rest of a cut character). */
function trimUtf8Start(buf: Buffer): Buffer {
  let i = 0;
  while (i < buf.length && i < 3 && ((buf[i] ?? 0) & 0xc0) === 0x80) i++;
  return buf.subarray(i);
}

/**
 * Keeps at most `maxBytes` of one output stream in memory: everything while it fits, else the
 * first half and the last half (a ring buffer) with a note of how much was cut in between.
 * Memory stays at `maxBytes` however much passes through.
 */
export class OutputCollector {
  private readonly headCap: number;
  private readonly tailCap: number;
  private chunks: Buffer[] = [];
  private head: Buffer | null = null;
  private ring: Buffer | null = null;
  private ringPos = 0;
  private ringLen = 0;
  private total = 0;

  constructor(readonly maxBytes: number = DEFAULT_MAX_OUTPUT_BYTES) {
    if (!Number.isInteger(maxBytes) || maxBytes < 0) {
      throw new RangeError(`maxOutputBytes must be a non-negative integer, got ${maxBytes}`);
    }
    this.headCap = Math.floor(maxBytes / 2);
    this.tailCap = maxBytes - this.headCap;
  }

  /** Bytes seen in all, kept or not. */
  get totalBytes(): number {
    return this.total;
  }

  /** True once more than maxBytes passed through. */
  get truncated(): boolean {
    return this.total > this.maxBytes;
  }

  push(chunk: Uint8Array): void {
    const data = Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength);
    if (data.length === 0) return;
    this.total += data.length;
    if (this.head === null) {
      if (this.total <= this.maxBytes) {
        this.chunks.push(Buffer.from(data)); // copy: callers may reuse their buffer
        return;
      }
      // First overflow: split what we kept into head and ring, then continue in ring mode.
      const kept = Buffer.concat([...this.chunks, data]);
      this.chunks = [];
      this.head = Buffer.from(kept.subarray(0, this.headCap));
      this.ring = Buffer.alloc(this.tailCap);
      this.writeRing(kept.subarray(this.headCap));
      return;
    }
    this.writeRing(data);
  }

  private writeRing(data: Buffer): void {
    const ring = this.ring as Buffer;
    const cap = ring.length;
    if (cap === 0) return;
    if (data.length >= cap) {
      data.copy(ring, 0, data.length - cap);
      this.ringPos = 0;
      this.ringLen = cap;
      return;
    }
    const first = Math.min(data.length, cap - this.ringPos);
    data.copy(ring, this.ringPos, 0, first);
    if (first < data.length) data.copy(ring, 0, first);
    this.ringPos = (this.ringPos + data.length) % cap;
    this.ringLen = Math.min(cap, this.ringLen + data.length);
  }

  private tail(): Buffer {
    const ring = this.ring as Buffer;
    if (this.ringLen < ring.length) return ring.subarray(0, this.ringLen);
    return Buffer.concat([ring.subarray(this.ringPos), ring.subarray(0, this.ringPos)]);
  }

  /**
   * The kept text (UTF-8). When cut: head, then `\n[proctor: <n> bytes of output cut]\n`, then
   * tail; characters split by the cut are dropped rather than mangled.
   */
  text(): string {
    if (this.head === null) return Buffer.concat(this.chunks).toString("utf8");
    const head = trimUtf8End(this.head);
    const tail = trimUtf8Start(this.tail());
    const cut = this.total - head.length - tail.length;
    return `${head.toString("utf8")}\n[proctor: ${cut} bytes of output cut]\n${tail.toString("utf8")}`;
  }
}

/** 128 + the signal's number, the way shells report a killed process; -1 if unknown. */
export function exitCodeFromSignal(signal: NodeJS.Signals | string | null): number {
  if (!signal) return -1;
  const n = (constants.signals as Record<string, number | undefined>)[signal];
  return n === undefined ? -1 : 128 + n;
}

/** Assemble an ExecResult from the two collectors; shared by every runtime. */
export function buildExecResult(parts: {
  exitCode: number;
  stdout: OutputCollector;
  stderr: OutputCollector;
  timedOut?: boolean;
  aborted?: boolean;
  durationMs: number;
}): ExecResult {
  return {
    exitCode: parts.exitCode,
    stdout: parts.stdout.text(),
    stderr: parts.stderr.text(),
    truncated: parts.stdout.truncated || parts.stderr.truncated,
    timedOut: parts.timedOut ?? false,
    aborted: parts.aborted ?? false,
    durationMs: Math.max(0, Math.round(parts.durationMs)),
  };
}
