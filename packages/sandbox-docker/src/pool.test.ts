import { silentLogger } from "@proctor/schema";
import { describe, expect, it } from "vitest";
import { WarmPool } from "./pool";

/** A fake item: pure bookkeeping, no containers. */
class Item {
  killed = false;
  constructor(readonly n: number) {}
  async kill(): Promise<void> {
    this.killed = true;
  }
}

function setup(max = 2) {
  let now = 0;
  const made: Item[] = [];
  const pending: { resolve: (item: Item) => void; reject: (error: Error) => void }[] = [];
  const pool = new WarmPool<Item>({ max, idleMs: 60_000, pauseAfterFailureMs: 10_000, logger: silentLogger, now: () => now });
  const start = () =>
    new Promise<Item>((resolve, reject) => {
      pending.push({
        resolve: (item) => {
          made.push(item);
          resolve(item);
        },
        reject,
      });
    });
  const finishStarts = async () => {
    for (const p of pending.splice(0)) p.resolve(new Item(made.length));
    await new Promise((resolve) => setImmediate(resolve));
  };
  return { pool, start, pending, made, finishStarts, advance: (ms: number) => (now += ms) };
}

describe("WarmPool", () => {
  it("starts nothing for a key asked for once, then keeps min(max, in use) warm", async () => {
    const { pool, start, pending, finishStarts } = setup(2);
    expect(await pool.acquire("a", start)).toBeNull();
    expect(pending).toHaveLength(0);
    const second = pool.acquire("a", start);
    // Two in use, max 2: two spares start, plus one this caller waits for.
    expect(pending).toHaveLength(3);
    await finishStarts();
    expect(await second).toBeInstanceOf(Item);
    expect(pool.readyCount).toBe(2);
    // More in use does not raise the supply above max.
    expect(await pool.acquire("a", start)).toBeInstanceOf(Item);
    expect(pending).toHaveLength(1);
    expect(pool.readyCount).toBe(1);
  });

  it("warms no more than the caller says it will still ask for: the last acquires start nothing unused", async () => {
    const { pool, start, pending, finishStarts } = setup(4);
    await pool.acquire("a", start, 10);
    const second = pool.acquire("a", start, 2);
    // Two in use, max 4, but only two more to come: two spares, plus the one this caller waits for.
    expect(pending).toHaveLength(3);
    await finishStarts();
    await second;
    expect(await pool.acquire("a", start, 1)).toBeInstanceOf(Item);
    expect(await pool.acquire("a", start, 0)).toBeInstanceOf(Item);
    expect(pending).toHaveLength(0);
    expect(pool.readyCount).toBe(0);
  });

  it("hands out a ready item at once and starts its replacement", async () => {
    const { pool, start, pending, finishStarts } = setup(1);
    await pool.acquire("a", start);
    const waited = pool.acquire("a", start);
    await finishStarts();
    const first = await waited;
    expect(pool.readyCount).toBe(1);
    expect(pending).toHaveLength(0);
    const next = await pool.acquire("a", start);
    expect(next).toBeInstanceOf(Item);
    expect(next).not.toBe(first);
    expect(pending).toHaveLength(1); // its replacement
  });

  it("keys do not mix", async () => {
    const { pool, start, finishStarts } = setup(2);
    await pool.acquire("a", start);
    await Promise.all([pool.acquire("a", start), finishStarts()]);
    expect(await pool.acquire("b", start)).toBeNull();
  });

  it("drain kills ready items and items still starting, and forgets the demand", async () => {
    const { pool, start, pending, made, finishStarts } = setup(2);
    await pool.acquire("a", start);
    const got = pool.acquire("a", start);
    await finishStarts();
    const taken = await got;
    // Two ready, and nothing starting.
    expect(pool.readyCount).toBe(2);
    void pool.acquire("a", start).then((item) => item?.kill());
    // One handed out (and killed), one ready, and its replacement still starting.
    expect(pool.readyCount).toBe(1);
    expect(pending.length).toBeGreaterThan(0);
    const drained = pool.drain();
    await finishStarts();
    await drained;
    expect(pool.readyCount).toBe(0);
    expect(made.filter((item) => item !== taken).every((item) => item.killed)).toBe(true);
    expect(taken?.killed).toBe(false);
    // Demand was forgotten: the next single request warms nothing.
    expect(await pool.acquire("a", start)).toBeNull();
    expect(pending).toHaveLength(0);
  });

  it("a failed start sends the waiting caller to start its own and pauses warming", async () => {
    const { pool, start, pending, advance } = setup(1);
    await pool.acquire("a", start);
    const waiting = pool.acquire("a", start);
    for (const p of pending.splice(0)) p.reject(new Error("daemon said no"));
    expect(await waiting).toBeNull();
    pool.release("a");
    expect(await pool.acquire("a", start)).toBeNull();
    expect(pending).toHaveLength(0);
    advance(10_001);
    pool.release("a");
    const later = pool.acquire("a", start);
    expect(pending).toHaveLength(2);
    const drained = pool.drain();
    for (const p of pending.splice(0)) p.resolve(new Item(9));
    await drained;
    expect(await later).toBeInstanceOf(Item);
  });

  it("max 0 turns it off", async () => {
    const { pool, start, pending } = setup(0);
    expect(pool.enabled).toBe(false);
    for (let i = 0; i < 3; i++) expect(await pool.acquire("a", start)).toBeNull();
    expect(pending).toHaveLength(0);
  });
});
