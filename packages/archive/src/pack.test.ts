import { execFileSync } from "node:child_process";
import { createWriteStream } from "node:fs";
import { chmod, lstat, mkdir, mkdtemp, readFile, readlink, rm, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pipeline } from "node:stream/promises";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { UnsafePathError } from "./errors";
import { packDirectory, packFiles } from "./pack";

let work: string;
beforeEach(async () => {
  work = await mkdtemp(join(tmpdir(), "proctor-pack-"));
});
afterEach(async () => {
  await rm(work, { recursive: true, force: true });
});

/** Unpack with GNU tar, the way a container's tar (or Docker's putArchive) would see the stream. */
async function untar(stream: NodeJS.ReadableStream, into: string): Promise<string[]> {
  const file = join(work, "out.tar");
  await pipeline(stream, createWriteStream(file));
  await mkdir(into, { recursive: true });
  execFileSync("tar", ["-xf", file, "-C", into]);
  return execFileSync("tar", ["-tf", file], { encoding: "utf8" }).trim().split("\n");
}

describe("packDirectory", () => {
  it("keeps contents, modes, symlinks and empty directories", async () => {
    const src = join(work, "src");
    await mkdir(join(src, "bin"), { recursive: true });
    await mkdir(join(src, "empty", "nested"), { recursive: true });
    await writeFile(join(src, "bin", "run.sh"), "#!/bin/sh\necho hi\n");
    await chmod(join(src, "bin", "run.sh"), 0o755);
    await writeFile(join(src, "secret.txt"), "s");
    await chmod(join(src, "secret.txt"), 0o600);
    await symlink("bin/run.sh", join(src, "run"));

    const dest = join(work, "dest");
    const names = await untar(packDirectory(src), dest);

    expect(names).toContain("./bin/run.sh");
    expect(await readFile(join(dest, "bin", "run.sh"), "utf8")).toBe("#!/bin/sh\necho hi\n");
    expect((await lstat(join(dest, "bin", "run.sh"))).mode & 0o777).toBe(0o755);
    expect((await lstat(join(dest, "secret.txt"))).mode & 0o777).toBe(0o600);
    expect(await readlink(join(dest, "run"))).toBe("bin/run.sh");
    expect((await lstat(join(dest, "empty", "nested"))).isDirectory()).toBe(true);
  });

  it("puts entries under a prefix", async () => {
    const src = join(work, "src");
    await mkdir(src);
    await writeFile(join(src, "a.txt"), "a");
    const dest = join(work, "dest");
    const names = await untar(packDirectory(src, { prefix: "app/sub/" }), dest);
    expect(names).toContain("app/sub/a.txt");
    expect(await readFile(join(dest, "app", "sub", "a.txt"), "utf8")).toBe("a");
  });

  it("fails the stream when the directory does not exist", async () => {
    await expect(untar(packDirectory(join(work, "missing")), join(work, "dest"))).rejects.toThrow(/ENOENT/);
  });

  it("refuses a prefix that climbs out", () => {
    expect(() => packDirectory(work, { prefix: "../x" })).toThrow(UnsafePathError);
  });
});

describe("packFiles", () => {
  it("writes in-memory files with modes and long names", async () => {
    const longName = `${"d".repeat(120)}/${"f".repeat(150)}.txt`;
    const dest = join(work, "dest");
    await untar(
      packFiles([
        { path: "tests/test.sh", data: "#!/bin/sh\nexit 0\n", mode: 0o755 },
        { path: longName, data: Buffer.from([0, 1, 2, 255]) },
        { path: "empty.txt", data: new Uint8Array() },
      ]),
      dest,
    );
    expect(await readFile(join(dest, "tests", "test.sh"), "utf8")).toBe("#!/bin/sh\nexit 0\n");
    expect((await lstat(join(dest, "tests", "test.sh"))).mode & 0o777).toBe(0o755);
    expect([...(await readFile(join(dest, longName)))]).toEqual([0, 1, 2, 255]);
    expect((await lstat(join(dest, longName))).mode & 0o777).toBe(0o644);
    expect((await readFile(join(dest, "empty.txt"))).length).toBe(0);
  });

  it("refuses absolute and escaping paths", () => {
    expect(() => packFiles([{ path: "/etc/passwd", data: "x" }])).toThrow(UnsafePathError);
    expect(() => packFiles([{ path: "a/../../b", data: "x" }])).toThrow(UnsafePathError);
  });
});
