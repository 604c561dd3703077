import { ReplayCacheFullError } from "./errors";

/** Where accepted request ids are remembered until they can no longer be replayed. */
export interface ReplayStore {
  /**
   * Remember `key` until `expiresAtMs` (inclusive). Returns false when `key` is already held
   * and not yet expired at `nowMs` (a replay). May throw `ReplayCacheFullError`.
   */
  checkAndRecord(key: string, expiresAtMs: number, nowMs: number): boolean;
}

export interface ReplayCacheOptions {
  /** Most entries held at once (default 200,000, a few tens of MB). */
  maxEntries?: number;
  /** Least time between two sweeps of expired entries (default 1,000 ms). */
  sweepIntervalMs?: number;
}

/**
 * In-memory replay cache for one server process. Entries expire when their request's timestamp
 * leaves the accepted window; expired entries are swept at most once per `sweepIntervalMs` and
 * whenever the cache is full. A cache full of live entries refuses new ones (503) instead of
 * forgetting old ones, which would let them be replayed. Only requests whose signature verified
 * and whose hotkey is allowlisted reach the cache, so outsiders cannot fill it.
 */
export class ReplayCache implements ReplayStore {
  readonly maxEntries: number;
  readonly #sweepIntervalMs: number;
  readonly #entries = new Map<string, number>();
  #nextSweepAtMs = Number.NEGATIVE_INFINITY;

  constructor(options: ReplayCacheOptions = {}) {
    this.maxEntries = options.maxEntries ?? 200_000;
    this.#sweepIntervalMs = options.sweepIntervalMs ?? 1_000;
    if (!Number.isInteger(this.maxEntries) || this.maxEntries < 1) throw new RangeError("ReplayCache maxEntries must be a positive integer");
  }

  get size(): number {
    return this.#entries.size;
  }

  checkAndRecord(key: string, expiresAtMs: number, nowMs: number): boolean {
    if (nowMs >= this.#nextSweepAtMs) this.#sweep(nowMs);
    const held = this.#entries.get(key);
    if (held !== undefined && held >= nowMs) return false;
    if (held === undefined && this.#entries.size >= this.maxEntries) {
      this.#sweep(nowMs);
      if (this.#entries.size >= this.maxEntries) {
        let soonest = Number.POSITIVE_INFINITY;
        for (const expiry of this.#entries.values()) soonest = Math.min(soonest, expiry);
        throw new ReplayCacheFullError(this.maxEntries, Math.max(1, soonest - nowMs + 1));
      }
    }
    this.#entries.set(key, expiresAtMs);
    return true;
  }

  /**
   * Hold `key` until `expiresAtMs` without the capacity check (reloading a persisted cache: an
   * entry that was accepted must stay refused even if `maxEntries` shrank since).
   */
  restore(key: string, expiresAtMs: number): void {
    const held = this.#entries.get(key);
    if (held === undefined || held < expiresAtMs) this.#entries.set(key, expiresAtMs);
  }

  /** The entries not yet expired at `nowMs` (expired ones are swept first). */
  liveEntries(nowMs: number): [key: string, expiresAtMs: number][] {
    this.#sweep(nowMs);
    return [...this.#entries];
  }

  #sweep(nowMs: number): void {
    for (const [key, expiry] of this.#entries) if (expiry < nowMs) this.#entries.delete(key);
    this.#nextSweepAtMs = nowMs + this.#sweepIntervalMs;
  }
}
