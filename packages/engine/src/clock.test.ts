import { describe, expect, it } from "vitest";
import { backoffDelayMs, ManualClock, retry, systemClock, withTimeout } from "./clock";
import { OperationTimeoutError } from "@proctor/sandbox";

describe("retry", () => {
  it("retries with doubling, capped delays and returns the first success", async () => {
    const clock = new ManualClock();
    const delays: number[] = [];
    let calls = 0;
    const result = retry(
      async (attempt) => {
        calls++;
        if (attempt < 4) throw new Error(`fail ${attempt}`);
        return "ok";
      },
      { retries: 5, baseDelayMs: 100, maxDelayMs: 300, jitter: false, clock, onRetry: (_e, _a, d) => delays.push(d) },
    );
    for (let i = 0; i < 3; i++) await clock.advance(300);
    await expect(result).resolves.toBe("ok");
    expect(calls).toBe(4);
    expect(delays).toEqual([100, 200, 300]);
  });

  it("throws the last error when retries run out", async () => {
    const clock = new ManualClock();
    let calls = 0;
    const result = retry(
      async () => {
        calls++;
        throw new Error(`fail ${calls}`);
      },
      { retries: 2, baseDelayMs: 10, jitter: false, clock },
    );
    const settled = result.catch((e: Error) => e);
    await clock.advance(10);
    await clock.advance(20);
    expect(((await settled) as Error).message).toBe("fail 3");
    expect(calls).toBe(3);
  });

  it("stops at once on an error shouldRetry rejects", async () => {
    let calls = 0;
    await expect(
      retry(
        async () => {
          calls++;
          throw new TypeError("permanent");
        },
        { retries: 5, shouldRetry: (e) => !(e instanceof TypeError), clock: new ManualClock() },
      ),
    ).rejects.toThrow("permanent");
    expect(calls).toBe(1);
  });

  it("rejects with the abort reason while waiting, without another call", async () => {
    const clock = new ManualClock();
    const controller = new AbortController();
    let calls = 0;
    const result = retry(
      async () => {
        calls++;
        throw new Error("flaky");
      },
      { retries: 5, baseDelayMs: 1000, clock, signal: controller.signal },
    );
    const settled = result.catch((e: unknown) => e);
    await clock.advance(0);
    expect(clock.pendingSleeps).toBe(1);
    controller.abort(new Error("cancelled by user"));
    expect(((await settled) as Error).message).toBe("cancelled by user");
    expect(calls).toBe(1);
    expect(clock.pendingSleeps).toBe(0);
  });

  it("spreads jittered delays within [delay/2, delay]", async () => {
    const clock = new ManualClock();
    const delays: number[] = [];
    const randoms = [0, 1];
    const result = retry(
      async (attempt) => {
        if (attempt < 3) throw new Error("x");
        return attempt;
      },
      { retries: 2, baseDelayMs: 100, clock, random: () => randoms.shift() ?? 0, onRetry: (_e, _a, d) => delays.push(d) },
    );
    await clock.advance(50);
    await clock.advance(200);
    await expect(result).resolves.toBe(3);
    expect(delays).toEqual([50, 200]);
  });

  it("computes backoff", () => {
    expect([1, 2, 3, 4, 5].map((a) => backoffDelayMs(a, 100, 1000))).toEqual([100, 200, 400, 800, 1000]);
  });
});

describe("withTimeout", () => {
  it("rejects with OperationTimeoutError and aborts the operation's signal", async () => {
    const clock = new ManualClock();
    let seen: AbortSignal | undefined;
    const result = withTimeout(
      (signal) => {
        seen = signal;
        return new Promise<string>(() => undefined);
      },
      { timeoutMs: 5000, clock, what: "image build" },
    );
    const settled = result.catch((e: unknown) => e);
    await clock.advance(4999);
    expect(seen?.aborted).toBe(false);
    await clock.advance(1);
    const error = (await settled) as OperationTimeoutError;
    expect(error).toBeInstanceOf(OperationTimeoutError);
    expect(error.message).toBe("image build did not finish within 5000 ms");
    expect(seen?.aborted).toBe(true);
  });

  it("returns the value and stops its timer when the operation finishes first", async () => {
    const clock = new ManualClock();
    await expect(withTimeout(async () => 42, { timeoutMs: 100, clock })).resolves.toBe(42);
    expect(clock.pendingSleeps).toBe(0);
  });

  it("passes an outer abort through", async () => {
    const controller = new AbortController();
    const result = withTimeout((signal) => new Promise((_, reject) => signal.addEventListener("abort", () => reject(signal.reason))), {
      timeoutMs: 60_000,
      signal: controller.signal,
    });
    controller.abort(new Error("stop"));
    await expect(result).rejects.toThrow("stop");
  });
});

describe("systemClock", () => {
  it("sleeps and can be aborted", async () => {
    const before = systemClock.now();
    await systemClock.sleep(5);
    expect(systemClock.now()).toBeGreaterThanOrEqual(before);
    const controller = new AbortController();
    const pending = systemClock.sleep(60_000, controller.signal);
    controller.abort(new Error("woken"));
    await expect(pending).rejects.toThrow("woken");
  });
});
