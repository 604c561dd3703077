import type { Clock } from "./retry";
import { systemClock } from "./retry";

export interface AdaptiveLimiterOptions {
  /** Most requests in flight at once (the limit grows back to this). */
  max: number;
  /** Fewest; the limit never shrinks below it. Default 1. */
  min?: number;
  /** A 429 halves the limit at most once per this window, so one burst counts once. Default 1000 ms. */
  decreaseCooldownMs?: number;
  clock?: Clock;
}

export interface LimiterStats {
  /** Current limit (whole requests). */
  limit: number;
  inFlight: number;
  waiting: number;
  /** Times a 429 shrank the limit. */
  decreases: number;
}

/**
 * An in-flight request limit that adapts to the server (AIMD, as TCP does): every 429 halves
 * it (once per cooldown window), every success adds 1/limit, so it grows back by one request
 * per `limit` successes. Requests beyond the limit wait in FIFO order.
 */
export class AdaptiveLimiter {
  private current: number;
  private inFlight = 0;
  private decreases = 0;
  private lastDecreaseAt = Number.NEGATIVE_INFINITY;
  private readonly waiters: { resolve: () => void; reject: (e: unknown) => void; signal?: AbortSignal; onAbort?: () => void }[] = [];
  private readonly max: number;
  private readonly min: number;
  private readonly cooldownMs: number;
  private readonly clock: Clock;

  constructor(options: AdaptiveLimiterOptions) {
    if (!(Number.isInteger(options.max) && options.max >= 1)) throw new RangeError(`max must be a whole number >= 1, got ${options.max}`);
    this.max = options.max;
    this.min = Math.max(1, Math.min(options.min ?? 1, options.max));
    this.current = options.max;
    this.cooldownMs = options.decreaseCooldownMs ?? 1_000;
    this.clock = options.clock ?? systemClock;
  }

  /** Wait for a slot; the returned function gives it back (call it once). */
  async acquire(signal?: AbortSignal): Promise<() => void> {
    signal?.throwIfAborted();
    if (this.inFlight < Math.floor(this.current) && this.waiters.length === 0) {
      this.inFlight++;
      return this.releaser();
    }
    await new Promise<void>((resolve, reject) => {
      const waiter: (typeof this.waiters)[number] = { resolve, reject, ...(signal ? { signal } : {}) };
      if (signal) {
        waiter.onAbort = () => {
          const i = this.waiters.indexOf(waiter);
          if (i >= 0) this.waiters.splice(i, 1);
          reject(signal.reason);
        };
        signal.addEventListener("abort", waiter.onAbort, { once: true });
      }
      this.waiters.push(waiter);
    });
    return this.releaser();
  }

  /** The server said 429: shrink (multiplicative decrease). */
  onRateLimited(): void {
    const now = this.clock.now();
    if (now - this.lastDecreaseAt < this.cooldownMs) return;
    this.lastDecreaseAt = now;
    const next = Math.max(this.min, Math.floor(this.current / 2));
    if (next < Math.floor(this.current)) this.decreases++;
    this.current = next;
  }

  /** A request succeeded: grow back (additive increase). */
  onSuccess(): void {
    this.current = Math.min(this.max, this.current + 1 / Math.max(1, Math.floor(this.current)));
    this.drain();
  }

  stats(): LimiterStats {
    return { limit: Math.floor(this.current), inFlight: this.inFlight, waiting: this.waiters.length, decreases: this.decreases };
  }

  private releaser(): () => void {
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.inFlight--;
      this.drain();
    };
  }

  private drain(): void {
    while (this.waiters.length > 0 && this.inFlight < Math.floor(this.current)) {
      const waiter = this.waiters.shift();
      if (!waiter) break;
      if (waiter.signal && waiter.onAbort) waiter.signal.removeEventListener("abort", waiter.onAbort);
      this.inFlight++;
      waiter.resolve();
    }
  }
}
