import { mkdir, mkdtemp, readdir, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { writeJsonAtomic } from "./write";

describe("writeJsonAtomic", () => {
  let dir = "";
  afterEach(async () => {
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it("writes pretty JSON with a final newline, making missing parents, and leaves no temp file", async () => {
    dir = await mkdtemp(join(tmpdir(), "proctor-write-"));
    const path = join(dir, "a", "b", "run.json");
    await writeJsonAtomic(path, { runId: "r1", n: [1, 2] });
    expect(await readFile(path, "utf8")).toBe(`${JSON.stringify({ runId: "r1", n: [1, 2] }, null, 2)}\n`);
    await writeJsonAtomic(path, { runId: "r2" });
    expect(JSON.parse(await readFile(path, "utf8"))).toEqual({ runId: "r2" });
    expect(await readdir(join(dir, "a", "b"))).toEqual(["run.json"]);
  });

  it("a write that cannot land rejects and removes its temp file", async () => {
    dir = await mkdtemp(join(tmpdir(), "proctor-write-"));
    const path = join(dir, "taken");
    await mkdir(join(path, "inside"), { recursive: true }); // a non-empty directory: rename over it fails
    await expect(writeJsonAtomic(path, { x: 1 })).rejects.toThrow();
    expect(await readdir(dir)).toEqual(["taken"]);
  });
});
