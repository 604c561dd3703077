import { describe, expect, it } from "vitest";
import { FrameDemuxer } from "./frames";

function frame(type: number, payload: string): Buffer {
  const body = Buffer.from(payload);
  const header = Buffer.alloc(8);
  header[0] = type;
  header.writeUInt32BE(body.length, 4);
  return Buffer.concat([header, body]);
}

function collect(input: Buffer[]): { out: string; err: string; order: string[]; incomplete: boolean } {
  let out = "";
  let err = "";
  const order: string[] = [];
  const demux = new FrameDemuxer((stream, chunk) => {
    if (stream === "stdout") out += chunk.toString();
    else err += chunk.toString();
    if (order.at(-1) !== stream) order.push(stream);
  });
  for (const piece of input) demux.push(piece);
  return { out, err, order, incomplete: demux.incomplete };
}

describe("FrameDemuxer", () => {
  const wire = Buffer.concat([frame(1, "hello "), frame(2, "oops\n"), frame(1, "world\n"), frame(1, "")]);

  it("separates stdout and stderr and keeps their order", () => {
    const result = collect([wire]);
    expect(result).toEqual({ out: "hello world\n", err: "oops\n", order: ["stdout", "stderr", "stdout"], incomplete: false });
  });

  it("gives the same result when every byte arrives on its own", () => {
    const bytes = [...wire].map((b) => Buffer.from([b]));
    expect(collect(bytes)).toEqual(collect([wire]));
  });

  it("reports a stream cut in the middle of a frame", () => {
    expect(collect([wire.subarray(0, 10)]).incomplete).toBe(true);
    expect(collect([wire.subarray(0, 3)]).incomplete).toBe(true);
  });
});
