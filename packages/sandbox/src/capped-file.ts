import { createWriteStream, type WriteStream } from "node:fs";
import { mkdir } from "node:fs/promises";
import { dirname } from "node:path";

/** A file that accepts at most `capBytes` and then notes that it was cut. */
export class CappedFile {
  private written = 0;
  private truncatedFlag = false;
  private readonly stream: WriteStream;
  private readonly closed: Promise<void>;

  private constructor(readonly path: string, private readonly capBytes: number) {
    this.stream = createWriteStream(path);
    this.closed = new Promise((resolve, reject) => {
      this.stream.once("close", () => resolve());
      this.stream.once("error", reject);
    });
  }

  static async open(path: string, capBytes: number): Promise<CappedFile> {
    await mkdir(dirname(path), { recursive: true });
    return new CappedFile(path, capBytes);
  }

  get truncated(): boolean {
    return this.truncatedFlag;
  }

  write(chunk: Buffer): void {
    if (this.truncatedFlag) return;
    const room = this.capBytes - this.written;
    if (chunk.length <= room) {
      this.written += chunk.length;
      this.stream.write(chunk);
      return;
    }
    if (room > 0) this.stream.write(chunk.subarray(0, room));
    this.written = this.capBytes;
    this.truncatedFlag = true;
    this.stream.write(`\n[proctor: output cut at ${this.capBytes} bytes]\n`);
  }

  async close(): Promise<void> {
    this.stream.end();
    await this.closed;
  }
}
