import { OperationTimeoutError } from "@proctor/sandbox";

/** Time as the retry and timeout helpers see it; inject a ManualClock in tests so they never sleep. */
export interface Clock {
  /** Milliseconds on a monotonic-enough scale (only differences matter). */
  now(): number;
  /** Resolves after `ms`; rejects with `signal.reason` as soon as the signal aborts. */
  sleep(ms: number, signal?: AbortSignal): Promise<void>;
}

function abortReason(signal: AbortSignal): unknown {
  return signal.reason ?? new DOMException("This operation was aborted", "AbortError");
}

/** The real clock: Date.now and setTimeout. */
export const systemClock: Clock = {
  now: () => Date.now(),
  sleep(ms, signal) {
    return new Promise<void>((resolve, reject) => {
      if (signal?.aborted) return reject(abortReason(signal));
      const onAbort = () => {
        clearTimeout(timer);
        reject(abortReason(signal as AbortSignal));
      };
      const timer = setTimeout(() => {
        signal?.removeEventListener("abort", onAbort);
        resolve();
      }, Math.max(0, ms));
      signal?.addEventListener("abort", onAbort, { once: true });
    });
  },
};

interface PendingSleep {
  at: number;
  resolve: () => void;
}

/**
 * A clock that only moves when told to (`advance`). Sleeps resolve in time order as the clock
 * passes their deadline. For tests of retry/timeout logic.
 */
export class ManualClock implements Clock {
  private current: number;
  private readonly pending = new Set<PendingSleep>();

  constructor(startMs = 0) {
    this.current = startMs;
  }

  now(): number {
    return this.current;
  }

  /** How many sleeps are waiting. */
  get pendingSleeps(): number {
    return this.pending.size;
  }

  sleep(ms: number, signal?: AbortSignal): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      if (signal?.aborted) return reject(abortReason(signal));
      const entry: PendingSleep = {
        at: this.current + Math.max(0, ms),
        resolve: () => {
          signal?.removeEventListener("abort", onAbort);
          resolve();
        },
      };
      const onAbort = () => {
        this.pending.delete(entry);
        reject(abortReason(signal as AbortSignal));
      };
      signal?.addEventListener("abort", onAbort, { once: true });
      this.pending.add(entry);
    });
  }

  /** Move time forward, resolving every sleep whose deadline is reached, and let them run. */
  async advance(ms: number): Promise<void> {
    const target = this.current + ms;
    await settlePending();
    for (;;) {
      const due = [...this.pending].filter((p) => p.at <= target).sort((a, b) => a.at - b.at)[0];
      if (!due) break;
      this.pending.delete(due);
      this.current = Math.max(this.current, due.at);
      due.resolve();
      await settlePending();
    }
    this.current = target;
    await settlePending();
  }
}

/** Let every queued promise callback run (one macrotask turn drains the microtask queue). */
function settlePending(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}

export interface RetryOptions {
  /** Retries after the first attempt (so at most retries + 1 calls). */
  retries: number;
  /** Delay before the first retry; doubles each time. Default 500. */
  baseDelayMs?: number;
  /** Upper bound of one delay. Default 30 000. */
  maxDelayMs?: number;
  /** Whether this error is worth another attempt; default: every error. */
  shouldRetry?: (error: unknown, attempt: number) => boolean;
  /** Called before each wait, e.g. to log. */
  onRetry?: (error: unknown, attempt: number, delayMs: number) => void;
  /** Randomise each delay within [delay/2, delay] so parallel callers spread out. Default true. */
  jitter?: boolean;
  /** Source of randomness for jitter; default Math.random. */
  random?: () => number;
  signal?: AbortSignal;
  clock?: Clock;
}

/** The wait before retry number `attempt` (1-based): base * 2^(attempt-1), capped. */
export function backoffDelayMs(attempt: number, baseDelayMs: number, maxDelayMs: number): number {
  return Math.min(maxDelayMs, baseDelayMs * 2 ** Math.max(0, attempt - 1));
}

/**
 * Call `fn` until it resolves, retrying errors that `shouldRetry` accepts with exponential
 * backoff. Throws the last error when attempts run out or the error is not retryable, and
 * `signal.reason` when aborted (also while waiting). `fn` gets the attempt number, from 1.
 */
export async function retry<T>(fn: (attempt: number) => Promise<T>, options: RetryOptions): Promise<T> {
  const clock = options.clock ?? systemClock;
  const base = options.baseDelayMs ?? 500;
  const max = options.maxDelayMs ?? 30_000;
  const random = options.random ?? Math.random;
  if (!Number.isInteger(options.retries) || options.retries < 0) {
    throw new RangeError(`retry: retries must be a non-negative integer, got ${options.retries}`);
  }
  for (let attempt = 1; ; attempt++) {
    if (options.signal?.aborted) throw abortReason(options.signal);
    try {
      return await fn(attempt);
    } catch (error) {
      if (options.signal?.aborted) throw abortReason(options.signal);
      if (attempt > options.retries) throw error;
      if (options.shouldRetry && !options.shouldRetry(error, attempt)) throw error;
      let delay = backoffDelayMs(attempt, base, max);
      if (options.jitter ?? true) delay = Math.round(delay / 2 + (random() * delay) / 2);
      options.onRetry?.(error, attempt, delay);
      await clock.sleep(delay, options.signal);
    }
  }
}

export interface TimeoutOptions {
  timeoutMs: number;
  /** An outer signal; aborting it aborts the operation too. */
  signal?: AbortSignal;
  clock?: Clock;
  /** Names the operation in the error message. */
  what?: string;
}

/**
 * Run `fn` with a signal that aborts after `timeoutMs` (or when the outer signal aborts). Rejects
 * with OperationTimeoutError on timeout without waiting for `fn` to notice; `fn` should pass the
 * signal on so the work itself stops.
 */
export async function withTimeout<T>(fn: (signal: AbortSignal) => Promise<T>, options: TimeoutOptions): Promise<T> {
  const clock = options.clock ?? systemClock;
  const outer = options.signal;
  if (outer?.aborted) throw abortReason(outer);
  const controller = new AbortController();
  const stop = new AbortController();
  const what = options.what ?? "operation";
  return new Promise<T>((resolve, reject) => {
    clock.sleep(options.timeoutMs, stop.signal).then(
      () => {
        const error = new OperationTimeoutError(`${what} did not finish within ${options.timeoutMs} ms`, options.timeoutMs);
        controller.abort(error);
        reject(error);
      },
      () => undefined, // the timer was stopped because the operation settled first
    );
    outer?.addEventListener(
      "abort",
      () => {
        const reason = abortReason(outer);
        controller.abort(reason);
        reject(reason);
      },
      { once: true, signal: stop.signal },
    );
    fn(controller.signal).then(resolve, reject);
  }).finally(() => stop.abort());
}
