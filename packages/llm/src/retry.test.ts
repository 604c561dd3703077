import { expect, test } from "vitest";
import { AdaptiveLimiter } from "./limiter";
import { backoffDelay, DEFAULT_RETRY_POLICY, parseRetryAfter } from "./retry";

test("parseRetryAfter reads seconds, fractions, HTTP dates and retry-after-ms; ignores garbage", () => {
  const now = Date.parse("2025-06-01T12:00:00Z");
  expect(parseRetryAfter({ "retry-after": "7" }, now)).toBe(7000);
  expect(parseRetryAfter({ "retry-after": "0.5" }, now)).toBe(500);
  expect(parseRetryAfter({ "retry-after": "Sun, 01 Jun 2025 12:00:20 GMT" }, now)).toBe(20_000);
  expect(parseRetryAfter({ "retry-after": "Sun, 01 Jun 2025 11:00:00 GMT" }, now)).toBe(0);
  expect(parseRetryAfter({ "retry-after-ms": "250", "retry-after": "9" }, now)).toBe(250);
  expect(parseRetryAfter({ "retry-after": "soon" }, now)).toBeNull();
  expect(parseRetryAfter({}, now)).toBeNull();
});

test("backoff doubles from the base to the cap, jittered within [delay/2, delay]", () => {
  expect(backoffDelay(DEFAULT_RETRY_POLICY, 1, () => 0)).toBe(500);
  expect(backoffDelay(DEFAULT_RETRY_POLICY, 1, () => 1)).toBe(1000);
  expect(backoffDelay(DEFAULT_RETRY_POLICY, 3, () => 1)).toBe(4000);
  expect(backoffDelay(DEFAULT_RETRY_POLICY, 20, () => 1)).toBe(60_000);
});

test("AdaptiveLimiter: halves on 429 once per cooldown, grows back by one per limit successes, queues FIFO", async () => {
  let now = 0;
  const limiter = new AdaptiveLimiter({ max: 8, clock: { now: () => now, sleep: async () => undefined } });
  limiter.onRateLimited();
  limiter.onRateLimited(); // same window: counted once
  expect(limiter.stats().limit).toBe(4);
  now += 1000;
  limiter.onRateLimited();
  expect(limiter.stats()).toMatchObject({ limit: 2, decreases: 2 });
  const order: number[] = [];
  const releases = await Promise.all([limiter.acquire(), limiter.acquire()]);
  const third = limiter.acquire().then((r) => (order.push(3), r));
  const fourth = limiter.acquire().then((r) => (order.push(4), r));
  expect(limiter.stats()).toMatchObject({ inFlight: 2, waiting: 2 });
  releases[0]?.();
  releases[0]?.(); // twice is harmless
  (await third)();
  releases[1]?.();
  (await fourth)();
  expect(order).toEqual([3, 4]);
  for (let i = 0; i < 2; i++) limiter.onSuccess();
  expect(limiter.stats().limit).toBe(3);
  for (let i = 0; i < 40; i++) limiter.onSuccess();
  expect(limiter.stats().limit).toBe(8);
});
