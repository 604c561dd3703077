import { describe, expect, it } from "vitest";
import { mean, passAtKEstimate, standardError } from "./stats";

/** The textbook formula with exact binomials, to check the product form against. */
function binomial(n: number, k: number): number {
  if (k < 0 || k > n) return 0;
  let value = 1;
  for (let i = 1; i <= k; i++) value = (value * (n - k + i)) / i;
  return value;
}

describe("passAtKEstimate", () => {
  it("matches hand-computed values", () => {
    expect(passAtKEstimate(5, 2, 1)).toBeCloseTo(0.4, 12); // 1 - 3/5
    expect(passAtKEstimate(5, 2, 2)).toBeCloseTo(0.7, 12); // 1 - C(3,2)/C(5,2) = 1 - 3/10
    expect(passAtKEstimate(5, 2, 3)).toBeCloseTo(0.9, 12); // 1 - C(3,3)/C(5,3) = 1 - 1/10
    expect(passAtKEstimate(5, 2, 4)).toBe(1); // only 3 failures: any 4 include a pass
    expect(passAtKEstimate(5, 0, 5)).toBe(0);
    expect(passAtKEstimate(3, 3, 1)).toBe(1);
    expect(passAtKEstimate(4, 1, 2)).toBeCloseTo(0.5, 12); // 1 - C(3,2)/C(4,2) = 1 - 3/6
  });

  it("agrees with 1 - C(n-c,k)/C(n,k) for every small case", () => {
    for (let n = 1; n <= 12; n++) {
      for (let c = 0; c <= n; c++) {
        for (let k = 1; k <= n; k++) {
          expect(passAtKEstimate(n, c, k)).toBeCloseTo(1 - binomial(n - c, k) / binomial(n, k), 10);
        }
      }
    }
  });

  it("stays finite where the binomials overflow a double", () => {
    const value = passAtKEstimate(2000, 3, 1000);
    expect(Number.isFinite(binomial(2000, 1000))).toBe(false);
    // 1 - prod_{i=1998..2000}(1 - 1000/i)
    expect(value).toBeCloseTo(1 - (998 / 1998) * (999 / 1999) * (1000 / 2000), 12);
  });

  it("rejects impossible inputs", () => {
    expect(() => passAtKEstimate(2, 1, 3)).toThrow(RangeError);
    expect(() => passAtKEstimate(2, 3, 1)).toThrow(RangeError);
    expect(() => passAtKEstimate(2, 1, 0)).toThrow(RangeError);
    expect(() => passAtKEstimate(2.5, 1, 1)).toThrow(RangeError);
  });
});

describe("standardError", () => {
  it("is the sample standard deviation over sqrt(n)", () => {
    // mean 0.5, squared deviations 0.25 + 0.25 + 0.25 + 0.25 = 1, sd = sqrt(1/3), se = sd / 2
    expect(standardError([0, 1, 0, 1])).toBeCloseTo(Math.sqrt(1 / 3) / 2, 12);
    // mean 2, squares 1 + 0 + 1 = 2, sd = 1, se = 1/sqrt(3)
    expect(standardError([1, 2, 3])).toBeCloseTo(1 / Math.sqrt(3), 12);
    expect(standardError([0.7, 0.7])).toBe(0);
  });

  it("is null below two values", () => {
    expect(standardError([])).toBeNull();
    expect(standardError([1])).toBeNull();
  });

  it("mean of nothing is null", () => {
    expect(mean([])).toBeNull();
    expect(mean([1, 2])).toBe(1.5);
  });
});
