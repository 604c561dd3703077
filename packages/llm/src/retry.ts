/** Time as the client sees it; tests pass a fake so nothing really sleeps. */
export interface Clock {
  now(): number;
  /** Resolves after `ms`; rejects with the signal's reason when it aborts first. */
  sleep(ms: number, signal?: AbortSignal): Promise<void>;
}

export const systemClock: Clock = {
  now: () => Date.now(),
  sleep: (ms, signal) =>
    new Promise<void>((resolve, reject) => {
      if (signal?.aborted) return reject(signal.reason);
      const onAbort = () => {
        clearTimeout(timer);
        reject(signal?.reason);
      };
      const timer = setTimeout(() => {
        signal?.removeEventListener("abort", onAbort);
        resolve();
      }, Math.max(0, ms));
      signal?.addEventListener("abort", onAbort, { once: true });
    }),
};

/** How long the client keeps retrying 429s, 5xx and connection errors. */
export interface RetryPolicy {
  /** Attempts in all, the first included. */
  maxAttempts: number;
  /** No retry starts once this much time has passed since the first attempt. */
  maxElapsedMs: number;
  /** First backoff; doubles each attempt up to maxDelayMs; the wait is drawn uniformly from [delay/2, delay]. */
  baseDelayMs: number;
  maxDelayMs: number;
  /** A Retry-After longer than this is cut to it. */
  maxRetryAfterMs: number;
}

/**
 * Defaults sized to outlast a typical provider rate-limit window (one minute): up to 12
 * attempts within 5 minutes, backoff 1 s doubling to 60 s, Retry-After honoured up to 2 minutes.
 */
export const DEFAULT_RETRY_POLICY: RetryPolicy = {
  maxAttempts: 12,
  maxElapsedMs: 5 * 60_000,
  baseDelayMs: 1_000,
  maxDelayMs: 60_000,
  maxRetryAfterMs: 120_000,
};

/**
 * The wait a response asks for: `retry-after-ms` (OpenAI), else `Retry-After` as seconds or as
 * an HTTP date. Null when absent or unreadable.
 */
export function parseRetryAfter(headers: Record<string, string | string[] | undefined>, now: number): number | null {
  const first = (v: string | string[] | undefined) => (Array.isArray(v) ? v[0] : v)?.trim();
  const ms = first(headers["retry-after-ms"]);
  if (ms && /^\d+(\.\d+)?$/.test(ms)) return Math.ceil(Number(ms));
  const value = first(headers["retry-after"]);
  if (!value) return null;
  if (/^\d+(\.\d+)?$/.test(value)) return Math.ceil(Number(value) * 1000);
  const date = Date.parse(value);
  if (Number.isNaN(date)) return null;
  return Math.max(0, date - now);
}

/** Backoff before retry number `retry` (1-based), with jitter in [delay/2, delay]. */
export function backoffDelay(policy: RetryPolicy, retry: number, random: () => number = Math.random): number {
  const delay = Math.min(policy.maxDelayMs, policy.baseDelayMs * 2 ** Math.max(0, retry - 1));
  return Math.round(delay / 2 + random() * (delay / 2));
}
