import { describe, expect, it } from "vitest";
import { catchError } from "../test/helpers";
import { ReplayCacheFullError } from "./errors";
import { ReplayCache } from "./replay-cache";

describe("ReplayCache", () => {
  it("refuses a key until its expiry (inclusive), then accepts it again", () => {
    const cache = new ReplayCache();
    expect(cache.checkAndRecord("k", 1_000, 0)).toBe(true);
    expect(cache.checkAndRecord("k", 1_000, 500)).toBe(false);
    expect(cache.checkAndRecord("k", 1_000, 1_000)).toBe(false);
    expect(cache.checkAndRecord("k", 3_000, 1_001)).toBe(true);
    expect(cache.checkAndRecord("other", 3_000, 1_001)).toBe(true);
  });

  it("sweeps expired entries so memory stays bounded by the window", () => {
    const cache = new ReplayCache({ sweepIntervalMs: 100 });
    for (let i = 0; i < 1_000; i++) cache.checkAndRecord(`a${i}`, 1_000, 0);
    expect(cache.size).toBe(1_000);
    cache.checkAndRecord("b", 5_000, 2_000);
    expect(cache.size).toBe(1);
  });

  it("when full of live entries, refuses new ones with a 503 instead of forgetting old ones", () => {
    const cache = new ReplayCache({ maxEntries: 3 });
    for (const k of ["a", "b", "c"]) expect(cache.checkAndRecord(k, 10_000, 0)).toBe(true);
    const error = catchError(() => cache.checkAndRecord("d", 10_000, 1)) as ReplayCacheFullError;
    expect(error).toBeInstanceOf(ReplayCacheFullError);
    expect(error.statusCode).toBe(503);
    expect(error.retryAfterMs).toBe(10_000);
    expect(cache.checkAndRecord("a", 10_000, 2)).toBe(false);
    expect(cache.checkAndRecord("d", 20_000, 10_001)).toBe(true);
  });
});
