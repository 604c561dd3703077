import { mkdtempSync, readFileSync, rmSync, appendFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { catchError } from "../test/helpers";
import { ReplayCacheUnavailableError } from "./errors";
import { FileReplayCache } from "./replay-file";

const dirs: string[] = [];
function tempFile(): string {
  const dir = mkdtempSync(join(tmpdir(), "proctor-replay-"));
  dirs.push(dir);
  return join(dir, "auth", "replay-cache.log");
}
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

describe("FileReplayCache", () => {
  it("remembers accepted keys across a reopen until they expire", () => {
    const path = tempFile();
    const first = FileReplayCache.open({ path, now: () => 0 });
    expect(first.checkAndRecord("pk/u1", 1_000, 0)).toBe(true);
    expect(first.checkAndRecord("pk/u2", 5_000, 0)).toBe(true);
    expect(first.checkAndRecord("pk/u1", 1_000, 10)).toBe(false);
    // No close(): like a kill -9, only what write(2) put in the file survives.
    const second = FileReplayCache.open({ path, now: () => 500 });
    expect(second.loaded).toEqual({ live: 2, expired: 0, skipped: 0 });
    expect(second.checkAndRecord("pk/u1", 1_000, 600)).toBe(false);
    expect(second.checkAndRecord("pk/u2", 5_000, 600)).toBe(false);
    expect(second.checkAndRecord("pk/u3", 5_000, 600)).toBe(true);
    second.close();
    const third = FileReplayCache.open({ path, now: () => 2_000 });
    expect(third.loaded).toEqual({ live: 2, expired: 1, skipped: 0 });
    expect(third.checkAndRecord("pk/u1", 3_000, 2_000)).toBe(true);
    expect(third.checkAndRecord("pk/u3", 5_000, 2_000)).toBe(false);
    third.close();
    first.close();
  });

  it("skips a torn last line and rewrites the file so later appends are clean", () => {
    const path = tempFile();
    FileReplayCache.open({ path, now: () => 0 }).close();
    writeFileSync(path, "9000 pk/a\n9000 pk/b\n90");
    const cache = FileReplayCache.open({ path, now: () => 0 });
    expect(cache.loaded).toEqual({ live: 2, expired: 0, skipped: 1 });
    expect(readFileSync(path, "utf8")).toBe("9000 pk/a\n9000 pk/b\n");
    cache.checkAndRecord("pk/c", 9000, 1);
    cache.close();
    expect(readFileSync(path, "utf8").split("\n").filter(Boolean)).toEqual(["9000 pk/a", "9000 pk/b", "9000 pk/c"]);
  });

  it("compacts: the file stays within about twice the live entries", () => {
    const path = tempFile();
    const cache = FileReplayCache.open({ path, compactMinLines: 100, sweepIntervalMs: 0, fsync: "never", now: () => 0 });
    for (let i = 0; i < 5_000; i++) cache.checkAndRecord(`k/${i}`, i + 50, i);
    expect(cache.size).toBeLessThanOrEqual(51);
    expect(cache.fileLines).toBeLessThanOrEqual(101);
    const lines = readFileSync(path, "utf8").split("\n").filter(Boolean);
    expect(lines.length).toBe(cache.fileLines);
    cache.close();
    const reopened = FileReplayCache.open({ path, now: () => 4_999 });
    expect(reopened.checkAndRecord("k/4990", 5_040, 4_999)).toBe(false);
    reopened.close();
  });

  it("fsync always and close are fine; a closed cache refuses with 503", () => {
    const path = tempFile();
    const cache = FileReplayCache.open({ path, fsync: "always" });
    expect(cache.checkAndRecord("a/b", Date.now() + 1000, Date.now())).toBe(true);
    cache.close();
    const error = catchError(() => cache.checkAndRecord("a/c", Date.now() + 1000, Date.now()));
    expect(error).toBeInstanceOf(ReplayCacheUnavailableError);
    expect((error as ReplayCacheUnavailableError).statusCode).toBe(503);
    appendFileSync(path, "");
  });
});
