/**
 * Splits Docker's multiplexed attach stream (8-byte header: stream type, 3 zero bytes, big-endian
 * payload length; then the payload) into stdout and stderr chunks, in arrival order. Frames may
 * be split across reads at any byte, headers included.
 */
export class FrameDemuxer {
  private readonly header = Buffer.alloc(8);
  private headerFill = 0;
  private remaining = 0;
  private stream: "stdout" | "stderr" = "stdout";

  constructor(private readonly onChunk: (stream: "stdout" | "stderr", chunk: Buffer) => void) {}

  push(data: Buffer): void {
    let offset = 0;
    while (offset < data.length) {
      if (this.remaining === 0) {
        const n = Math.min(8 - this.headerFill, data.length - offset);
        data.copy(this.header, this.headerFill, offset, offset + n);
        this.headerFill += n;
        offset += n;
        if (this.headerFill < 8) return;
        this.headerFill = 0;
        // 1 = stdout; 2 = stderr; 3 (systemerr on newer engines) is an error message: stderr too.
        this.stream = this.header[0] === 1 ? "stdout" : "stderr";
        this.remaining = this.header.readUInt32BE(4);
        continue;
      }
      const n = Math.min(this.remaining, data.length - offset);
      this.remaining -= n;
      this.onChunk(this.stream, data.subarray(offset, offset + n));
      offset += n;
    }
  }

  /** True when the input stopped in the middle of a frame (the daemon cut the stream). */
  get incomplete(): boolean {
    return this.headerFill > 0 || this.remaining > 0;
  }
}
