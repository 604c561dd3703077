import { mean } from "./stats";

/** A source of uniform numbers in [0, 1). */
export type Random = () => number;

/**
 * mulberry32: a small, fast 32-bit generator. Seeded, so a bootstrap with the same seed gives the
 * same interval on every machine (tests compare exact values; reports are reproducible).
 */
export function seededRandom(seed: number): Random {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Default seed of every bootstrap, so two reports of the same run print the same interval. */
export const DEFAULT_SEED = 17;
export const DEFAULT_RESAMPLES = 2000;

export interface BootstrapOptions {
  /** Resamples drawn (default 2000). */
  resamples?: number;
  /** Two-sided coverage, e.g. 0.95 (default). */
  confidence?: number;
  /** RNG seed (default 17); ignored when `random` is given. */
  seed?: number;
  random?: Random;
}

export interface Interval {
  /** The statistic on the data itself (not on the resamples). */
  estimate: number;
  low: number;
  high: number;
  confidence: number;
  /** How many values were resampled (the denominator), and what they are. */
  n: number;
  method: string;
}

/** Quantile with linear interpolation between order statistics (R's type 7); `sorted` ascending. */
export function quantile(sorted: readonly number[], q: number): number {
  if (sorted.length === 0) throw new RangeError("quantile of no values");
  const position = (sorted.length - 1) * q;
  const lower = Math.floor(position);
  const upper = Math.ceil(position);
  const a = sorted[lower] as number;
  const b = sorted[upper] as number;
  return a + (b - a) * (position - lower);
}

/**
 * Means of `resamples` bootstrap resamples (drawn with replacement, same size as `values`).
 * Index i of a resample is floor(random() * n): the exact sequence tests replay by hand.
 */
export function bootstrapMeans(values: readonly number[], options: BootstrapOptions = {}): number[] {
  const n = values.length;
  if (n === 0) return [];
  const random = options.random ?? seededRandom(options.seed ?? DEFAULT_SEED);
  const resamples = options.resamples ?? DEFAULT_RESAMPLES;
  const out = new Array<number>(resamples);
  for (let r = 0; r < resamples; r++) {
    let sum = 0;
    for (let i = 0; i < n; i++) sum += values[Math.floor(random() * n)] as number;
    out[r] = sum / n;
  }
  return out;
}

/** Percentile bootstrap confidence interval of the mean; null for no values. */
export function bootstrapMeanCI(values: readonly number[], options: BootstrapOptions = {}): Interval | null {
  if (values.length === 0) return null;
  const confidence = options.confidence ?? 0.95;
  const means = bootstrapMeans(values, options).sort((a, b) => a - b);
  const alpha = (1 - confidence) / 2;
  return {
    estimate: mean(values) as number,
    low: quantile(means, alpha),
    high: quantile(means, 1 - alpha),
    confidence,
    n: values.length,
    method: `percentile bootstrap, ${means.length} resamples`,
  };
}

/**
 * Wilson score interval for a proportion (passed of total): cheap, exact to test, and sane at 0
 * and at total (unlike the normal approximation). null when total is 0.
 */
export function wilsonInterval(passed: number, total: number, confidence = 0.95): Interval | null {
  if (total === 0) return null;
  const z = normalQuantile(1 - (1 - confidence) / 2);
  const p = passed / total;
  const z2 = z * z;
  const center = (p + z2 / (2 * total)) / (1 + z2 / total);
  const half = (z / (1 + z2 / total)) * Math.sqrt((p * (1 - p)) / total + z2 / (4 * total * total));
  return { estimate: p, low: Math.max(0, center - half), high: Math.min(1, center + half), confidence, n: total, method: "Wilson score" };
}

/** Inverse of the standard normal CDF (Acklam's rational approximation, relative error < 1.2e-9). */
export function normalQuantile(p: number): number {
  if (!(p > 0 && p < 1)) throw new RangeError(`normalQuantile needs 0 < p < 1, got ${p}`);
  const a = [-3.969683028665376e1, 2.209460984245205e2, -2.759285104469687e2, 1.38357751867269e2, -3.066479806614716e1, 2.506628277459239];
  const b = [-5.447609879822406e1, 1.615858368580409e2, -1.556989798598866e2, 6.680131188771972e1, -1.328068155288572e1];
  const c = [-7.784894002430293e-3, -3.223964580411365e-1, -2.400758277161838, -2.549732539343734, 4.374664141464968, 2.938163982698783];
  const d = [7.784695709041462e-3, 3.224671290700398e-1, 2.445134137142996, 3.754408661907416];
  const low = 0.02425;
  const poly = (coef: number[], x: number) => coef.reduce((acc, k) => acc * x + k, 0);
  if (p < low) {
    const q = Math.sqrt(-2 * Math.log(p));
    return poly(c, q) / (poly(d, q) * q + 1);
  }
  if (p > 1 - low) {
    const q = Math.sqrt(-2 * Math.log(1 - p));
    return -poly(c, q) / (poly(d, q) * q + 1);
  }
  const q = p - 0.5;
  const r = q * q;
  return (poly(a, r) * q) / (poly(b, r) * r + 1);
}
