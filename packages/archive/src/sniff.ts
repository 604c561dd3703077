import type { ArchiveFormat } from "./errors";

/** Bytes needed to recognise every supported format (one tar header block). */
export const SNIFF_BYTES = 512;

export type Sniffed = { format: ArchiveFormat } | { format: undefined; detail: string };

const KNOWN_UNSUPPORTED: [Buffer, string][] = [
  [Buffer.from("BZh"), "bzip2-compressed data"],
  [Buffer.from([0xfd, 0x37, 0x7a, 0x58, 0x5a, 0x00]), "xz-compressed data"],
  [Buffer.from([0x28, 0xb5, 0x2f, 0xfd]), "zstd-compressed data"],
  [Buffer.from([0x37, 0x7a, 0xbc, 0xaf, 0x27, 0x1c]), "a 7-Zip archive"],
  [Buffer.from("Rar!"), "a RAR archive"],
];

/** Recognise an archive from its first bytes (up to `SNIFF_BYTES`), never from its name. */
export function sniffFormat(head: Buffer): Sniffed {
  if (head.length === 0) return { format: undefined, detail: "the upload is empty" };
  if (head.length >= 4 && head[0] === 0x50 && head[1] === 0x4b && ((head[2] === 3 && head[3] === 4) || (head[2] === 5 && head[3] === 6))) {
    return { format: "zip" };
  }
  if (head.length >= 2 && head[0] === 0x1f && head[1] === 0x8b) return { format: "tar.gz" };
  if (isTarHeader(head)) return { format: "tar" };
  for (const [magic, what] of KNOWN_UNSUPPORTED) {
    if (head.length >= magic.length && head.subarray(0, magic.length).equals(magic)) return { format: undefined, detail: `it is ${what}` };
  }
  const shown = head.subarray(0, 8).toString("hex").replace(/(..)/g, "$1 ").trim();
  return { format: undefined, detail: `unrecognised first bytes ${shown}` };
}

/**
 * A tar archive starts with a header block whose checksum matches (POSIX, GNU and old v7 tars
 * all do), or with the two zero blocks of an empty archive.
 */
export function isTarHeader(block: Buffer): boolean {
  if (block.length < SNIFF_BYTES) return false;
  const header = block.subarray(0, SNIFF_BYTES);
  if (header.every((byte) => byte === 0)) return true;
  const stored = parseOctal(header.subarray(148, 156));
  if (stored === undefined) return false;
  let unsigned = 0;
  let signed = 0;
  for (let i = 0; i < SNIFF_BYTES; i += 1) {
    const byte = i >= 148 && i < 156 ? 0x20 : (header[i] as number);
    unsigned += byte;
    signed += byte > 127 ? byte - 256 : byte;
  }
  return stored === unsigned || stored === signed;
}

function parseOctal(field: Buffer): number | undefined {
  const text = field.toString("latin1").replace(/[\0 ]+$/g, "").replace(/^ +/, "");
  if (!/^[0-7]+$/.test(text)) return undefined;
  return parseInt(text, 8);
}
