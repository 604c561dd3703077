import { describe, expect, it } from "vitest";
import { bootstrapMeanCI, bootstrapMeans, normalQuantile, quantile, seededRandom, wilsonInterval } from "./bootstrap";

/** Replays a fixed list of uniforms, so resamples can be worked out by hand. */
function replay(values: number[]): () => number {
  let i = 0;
  return () => values[i++ % values.length] as number;
}

describe("seededRandom", () => {
  it("is deterministic per seed and uniform in [0, 1)", () => {
    const a = seededRandom(42);
    const b = seededRandom(42);
    const xs = Array.from({ length: 1000 }, () => a());
    expect(Array.from({ length: 1000 }, () => b())).toEqual(xs);
    expect(xs.every((x) => x >= 0 && x < 1)).toBe(true);
    expect(seededRandom(43)()).not.toBe(xs[0]);
    const m = xs.reduce((s, x) => s + x, 0) / xs.length;
    expect(Math.abs(m - 0.5)).toBeLessThan(0.05);
  });
});

describe("bootstrap", () => {
  it("draws index floor(u * n) for each slot, as worked out by hand", () => {
    // n = 2: u < 0.5 -> values[0] = 0, else values[1] = 10; resamples [0,10], [10,0], [10,10]
    const means = bootstrapMeans([0, 10], { resamples: 3, random: replay([0.1, 0.9, 0.6, 0.2, 0.7, 0.8]) });
    expect(means).toEqual([5, 5, 10]);
    // sorted [5, 5, 10]; 50% interval: quantiles 0.25 (position 0.5 -> 5) and 0.75 (position 1.5 -> 7.5)
    const ci = bootstrapMeanCI([0, 10], { resamples: 3, confidence: 0.5, random: replay([0.1, 0.9, 0.6, 0.2, 0.7, 0.8]) });
    expect(ci).toMatchObject({ estimate: 5, low: 5, high: 7.5, n: 2, confidence: 0.5 });
  });

  it("gives the same interval for the same seed, near the normal interval for a large sample", () => {
    const values = Array.from({ length: 200 }, (_, i) => (i % 4 === 0 ? 1 : 0)); // mean 0.25
    const ci = bootstrapMeanCI(values, { seed: 7 });
    expect(bootstrapMeanCI(values, { seed: 7 })).toEqual(ci);
    const se = Math.sqrt((0.25 * 0.75) / 200);
    expect(ci?.low).toBeGreaterThan(0.25 - 1.96 * se - 0.02);
    expect(ci?.low).toBeLessThan(0.25 - 1.96 * se + 0.02);
    expect(ci?.high).toBeGreaterThan(0.25 + 1.96 * se - 0.02);
    expect(ci?.high).toBeLessThan(0.25 + 1.96 * se + 0.02);
    expect(bootstrapMeanCI([])).toBeNull();
  });

  it("quantile interpolates linearly", () => {
    expect(quantile([1, 2, 3, 4], 0.5)).toBe(2.5);
    expect(quantile([1, 2, 3, 4], 0)).toBe(1);
    expect(quantile([1, 2, 3, 4], 1)).toBe(4);
  });
});

describe("wilsonInterval", () => {
  it("matches the textbook 8/10 and the edges", () => {
    expect(normalQuantile(0.975)).toBeCloseTo(1.959964, 6);
    expect(normalQuantile(0.5)).toBeCloseTo(0, 12);
    expect(normalQuantile(0.001)).toBeCloseTo(-3.090232, 5);
    const w = wilsonInterval(8, 10);
    expect(w?.estimate).toBe(0.8);
    expect(w?.low).toBeCloseTo(0.4902, 4);
    expect(w?.high).toBeCloseTo(0.9433, 4);
    // 0 of 10: [0, z^2 / (n + z^2)]
    const z2 = 1.959964 ** 2;
    expect(wilsonInterval(0, 10)?.low).toBe(0);
    expect(wilsonInterval(0, 10)?.high).toBeCloseTo(z2 / (10 + z2), 6);
    expect(wilsonInterval(0, 0)).toBeNull();
  });
});
