import type { Logger } from "@proctor/schema";

/** What the pool keeps: something started ahead of demand that can be thrown away. */
export interface Disposable {
  kill(): Promise<void>;
}

export interface WarmPoolOptions {
  /** Most items kept ready (or starting) per key; 0 turns the pool off. */
  max: number;
  /** An item nobody took within this long is killed. */
  idleMs: number;
  /** After a failed start, no warming for this key for this long (the caller's own start reports the error). */
  pauseAfterFailureMs: number;
  logger: Logger;
  /** Default Date.now; tests inject their own. */
  now?: () => number;
}

interface Ready<T> {
  item: T;
  timer: NodeJS.Timeout;
}

interface Entry<T> {
  ready: Ready<T>[];
  starting: number;
  /** acquire() calls waiting for an item that is starting. */
  waiters: ((item: T | null) => void)[];
  /** acquire() calls since the last drain: warming starts at the second. */
  demand: number;
  /** The last caller's count of items it will still ask for after this one (no more are warmed). */
  upcoming: number;
  /** Items handed out and not yet released. */
  inUse: number;
  pausedUntil: number;
}

/**
 * Items started ahead of demand, per key (for sandboxes: image, limits, network, env, workdir and
 * run labels). A key is only warmed once it was asked for twice, so one-off keys (a run where
 * every task has its own image) never pay for an unused start; then the pool keeps
 * min(max, items in use) ready or starting besides the ones callers wait for. `drain()` kills every idle item and every item still
 * starting; nothing else outlives it.
 */
export class WarmPool<T extends Disposable> {
  private readonly entries = new Map<string, Entry<T>>();
  private readonly starts = new Set<Promise<void>>();
  private readonly kills = new Set<Promise<void>>();
  private generation = 0;
  private readonly now: () => number;

  constructor(private readonly options: WarmPoolOptions) {
    this.now = options.now ?? Date.now;
  }

  get enabled(): boolean {
    return this.options.max > 0;
  }

  /**
   * An item for `key`: a ready one, or one already starting (awaited); null when there is none and
   * the caller must start its own. Counts the caller as a user of the key until `release(key)`,
   * and tops the key's supply up with `start`, to no more than `upcoming` spares when the caller
   * knows how many more it will ask for (the last ones of a run then start nothing unused).
   */
  acquire(key: string, start: () => Promise<T>, upcoming = Number.POSITIVE_INFINITY): Promise<T | null> {
    const entry = this.entry(key);
    entry.demand++;
    entry.upcoming = upcoming;
    entry.inUse++;
    const ready = entry.ready.shift();
    if (ready) {
      clearTimeout(ready.timer);
      this.topUp(key, entry, start, 0);
      return Promise.resolve(ready.item);
    }
    // One more than the target: this caller takes the first that is up.
    this.topUp(key, entry, start, 1);
    if (entry.starting > entry.waiters.length) return new Promise((resolve) => entry.waiters.push(resolve));
    return Promise.resolve(null);
  }

  /** One user of `key` is done (its item was killed, or its own start failed). */
  release(key: string): void {
    const entry = this.entries.get(key);
    if (entry && entry.inUse > 0) entry.inUse--;
  }

  /** How many items are ready right now (all keys). */
  get readyCount(): number {
    let n = 0;
    for (const entry of this.entries.values()) n += entry.ready.length;
    return n;
  }

  /**
   * Kills every ready item and every item still starting once it is up (unless a caller is waiting
   * for it), and forgets the demand seen so far. Resolves when those kills are done; rejects with
   * the first kill's error.
   */
  async drain(): Promise<void> {
    this.generation++;
    for (const entry of this.entries.values()) {
      entry.demand = 0;
      for (const ready of entry.ready.splice(0)) {
        clearTimeout(ready.timer);
        this.discard(ready.item);
      }
    }
    while (this.starts.size > 0) await Promise.all(this.starts);
    const errors: unknown[] = [];
    while (this.kills.size > 0) {
      await Promise.all([...this.kills].map((kill) => kill.catch((error: unknown) => void errors.push(error))));
    }
    if (errors.length > 0) throw errors[0];
  }

  private entry(key: string): Entry<T> {
    let entry = this.entries.get(key);
    if (!entry) {
      entry = { ready: [], starting: 0, waiters: [], demand: 0, upcoming: Number.POSITIVE_INFINITY, inUse: 0, pausedUntil: 0 };
      this.entries.set(key, entry);
    }
    return entry;
  }

  /** Starts items until the unclaimed ones (ready or starting) reach min(max, in use, upcoming) + `extra`. */
  private topUp(key: string, entry: Entry<T>, start: () => Promise<T>, extra: number): void {
    if (!this.enabled || entry.demand < 2 || this.now() < entry.pausedUntil) return;
    const target = Math.min(this.options.max, entry.inUse, entry.upcoming) + extra;
    while (entry.ready.length + entry.starting - entry.waiters.length < target) {
      entry.starting++;
      const generation = this.generation;
      const started: Promise<void> = start()
        .then(
          (item) => this.arrived(key, entry, item, generation),
          (error: unknown) => {
            entry.starting--;
            entry.pausedUntil = this.now() + this.options.pauseAfterFailureMs;
            this.options.logger.warn("starting a sandbox ahead of demand failed; the next ones start on demand for a while", {
              error: error instanceof Error ? error.message : String(error),
            });
            entry.waiters.shift()?.(null);
          },
        )
        .finally(() => this.starts.delete(started));
      this.starts.add(started);
    }
  }

  private arrived(key: string, entry: Entry<T>, item: T, generation: number): void {
    entry.starting--;
    const waiter = entry.waiters.shift();
    if (waiter) {
      waiter(item);
      return;
    }
    if (generation !== this.generation) {
      this.discard(item);
      return;
    }
    const ready: Ready<T> = {
      item,
      timer: setTimeout(() => {
        const at = entry.ready.indexOf(ready);
        if (at >= 0) entry.ready.splice(at, 1);
        this.options.logger.debug("a sandbox started ahead of demand went unused; removing it", { key });
        this.discard(item);
      }, this.options.idleMs),
    };
    // An idle item must not keep the process alive; drain() or the reaper removes it.
    ready.timer.unref();
    entry.ready.push(ready);
  }

  private discard(item: T): void {
    const kill: Promise<void> = item
      .kill()
      .catch((error: unknown) => {
        this.options.logger.warn("removing an unused sandbox failed", { error: error instanceof Error ? error.message : String(error) });
        throw error;
      })
      .finally(() => this.kills.delete(kill));
    kill.catch(() => undefined); // reported by drain()
    this.kills.add(kill);
  }
}
