/**
 * Unbiased pass@k estimate for one task (Chen et al. 2021): the chance that at least one of k
 * attempts drawn without replacement from n finished attempts, c of them passing, passes.
 * 1 - C(n-c, k) / C(n, k), computed as 1 - prod_{i=n-c+1..n} (1 - k/i) so it never forms a
 * large binomial coefficient.
 */
export function passAtKEstimate(n: number, c: number, k: number): number {
  if (!Number.isInteger(n) || !Number.isInteger(c) || !Number.isInteger(k)) {
    throw new RangeError(`pass@k needs integers, got n=${n}, c=${c}, k=${k}`);
  }
  if (k < 1 || n < k || c < 0 || c > n) {
    throw new RangeError(`pass@k needs 1 <= k <= n and 0 <= c <= n, got n=${n}, c=${c}, k=${k}`);
  }
  if (n - c < k) return 1;
  let allFail = 1;
  for (let i = n - c + 1; i <= n; i++) allFail *= 1 - k / i;
  return 1 - allFail;
}

/** Mean of the values, null for none. */
export function mean(values: readonly number[]): number | null {
  if (values.length === 0) return null;
  let sum = 0;
  for (const v of values) sum += v;
  return sum / values.length;
}

/** Standard error of the mean: sample standard deviation (n - 1) / sqrt(n); null when n < 2. */
export function standardError(values: readonly number[]): number | null {
  const n = values.length;
  if (n < 2) return null;
  const m = mean(values) as number;
  let squares = 0;
  for (const v of values) squares += (v - m) ** 2;
  return Math.sqrt(squares / (n - 1)) / Math.sqrt(n);
}
