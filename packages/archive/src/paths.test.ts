import { describe, expect, it } from "vitest";
import { LimitExceededError, LinkEscapeError, UnsafePathError } from "./errors";
import { DEFAULT_LIMITS, resolveLimits } from "./limits";
import { checkSymlinkTarget, entryParts } from "./paths";
import { isTarHeader, sniffFormat } from "./sniff";

const limits = DEFAULT_LIMITS;

describe("entryParts", () => {
  it("drops . and empty components", () => {
    expect(entryParts("./a//b/./c/", limits)).toEqual(["a", "b", "c"]);
    expect(entryParts("./", limits)).toEqual([]);
  });
  it.each(["/etc/passwd", "C:/x", "a/../b", "..", "a\0b"])("rejects %j", (name) => {
    expect(() => entryParts(name, limits)).toThrow(UnsafePathError);
  });
  it("counts bytes, not characters, for name lengths", () => {
    const name = "é".repeat(128); // 256 bytes
    expect(() => entryParts(name, limits)).toThrow(LimitExceededError);
    expect(entryParts("é".repeat(127), limits)).toHaveLength(1);
  });
});

describe("checkSymlinkTarget", () => {
  const ok = (link: string, target: string) => () => checkSymlinkTarget(link, link.split("/"), target, limits);
  it.each([
    ["a/b/l", "../../x"],
    ["a/l", "../x/y"],
    ["l", "x/y/z"],
    ["l", "."],
    ["a/l", "./../x"],
  ])("accepts %s -> %s", (link, target) => {
    expect(ok(link, target)).not.toThrow();
  });
  it.each([
    ["l", "../x"],
    ["a/b/l", "../../../x"],
    ["l", "/etc"],
    ["l", "x/../.."],
    ["l", "c/.."],
    ["l", ""],
  ])("rejects %s -> %s", (link, target) => {
    expect(ok(link, target)).toThrow(LinkEscapeError);
  });
});

describe("sniffFormat", () => {
  it("recognises formats by magic bytes only", () => {
    expect(sniffFormat(Buffer.from([0x1f, 0x8b, 8, 0]))).toEqual({ format: "tar.gz" });
    expect(sniffFormat(Buffer.from("PK\u0003\u0004rest"))).toEqual({ format: "zip" });
    expect(sniffFormat(Buffer.alloc(1024))).toEqual({ format: "tar" });
    expect(sniffFormat(Buffer.from([0xfd, 0x37, 0x7a, 0x58, 0x5a, 0x00, 1]))).toMatchObject({ format: undefined, detail: "it is xz-compressed data" });
    expect(sniffFormat(Buffer.from("hello"))).toMatchObject({ format: undefined, detail: "unrecognised first bytes 68 65 6c 6c 6f" });
  });
  it("requires a valid tar header checksum", () => {
    const block = Buffer.alloc(512);
    block.write("file.txt", 0);
    block.write("0000644\0", 100);
    block.write("        ", 148);
    let sum = 0;
    for (const byte of block) sum += byte;
    block.write(`${sum.toString(8).padStart(6, "0")}\0 `, 148);
    expect(isTarHeader(block)).toBe(true);
    block[0] = 0x46;
    expect(isTarHeader(block)).toBe(false);
  });
});

describe("resolveLimits", () => {
  it("overlays the caller's values and rejects nonsense", () => {
    expect(resolveLimits({ maxEntries: 5 })).toEqual({ ...DEFAULT_LIMITS, maxEntries: 5 });
    expect(() => resolveLimits({ maxEntries: -1 })).toThrow(TypeError);
    expect(() => resolveLimits({ maxEntrys: 5 } as never)).toThrow(/unknown archive limit "maxEntrys"/);
  });
});
