import { describe, expect, it } from "vitest";
import { BuildSlots, dockerfilePrefix, PrefixGate } from "./build-schedule";

describe("dockerfilePrefix", () => {
  const a = "FROM base\nRUN apt-get install -y x\nCOPY own.txt /app/\nRUN echo a\n";
  const b = "FROM base\nRUN apt-get install -y x\nCOPY other.txt /app/\nRUN echo b\n";

  it("is the same for Dockerfiles that differ only from their first COPY on, and spans the steps before it", () => {
    expect(dockerfilePrefix(a)).toEqual({ key: expect.stringMatching(/^[0-9a-f]{64}$/), steps: 2 });
    expect(dockerfilePrefix(b)?.key).toBe(dockerfilePrefix(a)?.key);
  });

  it("differs with the steps, the build args or the network", () => {
    const key = dockerfilePrefix(a)?.key;
    expect(dockerfilePrefix(a.replace("install -y x", "install -y y"))?.key).not.toBe(key);
    expect(dockerfilePrefix(a, { buildArgs: { V: "1" } })?.key).not.toBe(key);
    expect(dockerfilePrefix(a, { network: false })?.key).not.toBe(key);
    expect(dockerfilePrefix(`ARG V=1\n${a}`)?.steps).toBe(3);
  });

  it("stops at ADD and at a second FROM; none without a RUN before them", () => {
    expect(dockerfilePrefix("FROM base\nENV A=1\nRUN x\nADD f /f\nRUN y\n")?.steps).toBe(3);
    expect(dockerfilePrefix("FROM base AS one\nRUN x\nFROM base\nRUN y\n")?.steps).toBe(2);
    expect(dockerfilePrefix("FROM base\nCOPY . /app\nRUN make\n")).toBeNull();
    expect(dockerfilePrefix("FROM base\nWORKDIR /app\n")).toBeNull();
    expect(dockerfilePrefix("RUN x\n")).toBeNull();
  });
});

describe("BuildSlots", () => {
  it("lets `size` holders in at once, the rest in order as slots come back", async () => {
    const slots = new BuildSlots(2);
    const order: number[] = [];
    const first = await slots.acquire();
    const second = await slots.acquire();
    const third = slots.acquire().then((release) => (order.push(3), release));
    const fourth = slots.acquire().then((release) => (order.push(4), release));
    await Promise.resolve();
    expect(order).toEqual([]);
    first();
    first(); // twice is once
    (await third)();
    second();
    (await fourth)();
    expect(order).toEqual([3, 4]);
    // All free again: two at once without waiting.
    const [x, y] = await Promise.all([slots.acquire(), slots.acquire()]);
    x();
    y();
  });

  it("a waiter whose signal aborts leaves the queue and takes no slot", async () => {
    const slots = new BuildSlots(1);
    const held = await slots.acquire();
    const controller = new AbortController();
    const gone = slots.acquire(controller.signal);
    const next = slots.acquire();
    controller.abort();
    await expect(gone).rejects.toThrow();
    held();
    (await next)();
  });
});

describe("PrefixGate", () => {
  it("lets one lead; the others go on together once it has committed the prefix", async () => {
    const gate = new PrefixGate();
    const leader = await gate.enter("k");
    expect(leader.leader).toBe(true);
    const waiters = [gate.enter("k"), gate.enter("k")];
    expect((await gate.enter("other")).leader).toBe(true);
    leader.done(true);
    expect((await Promise.all(waiters)).map((w) => w.leader)).toEqual([false, false]);
    // The key is free again: the next build leads (and finds the prefix cached).
    expect((await gate.enter("k")).leader).toBe(true);
  });

  it("a leader that fails hands the lead to one waiter; a cancelled waiter stops waiting", async () => {
    const gate = new PrefixGate();
    const leader = await gate.enter("k");
    const a = gate.enter("k");
    const b = gate.enter("k");
    const controller = new AbortController();
    const c = gate.enter("k", controller.signal);
    controller.abort();
    await expect(c).rejects.toThrow();
    leader.done(false);
    leader.done(true); // settled already: ignored
    const next = await a;
    expect(next.leader).toBe(true);
    next.done(true);
    expect((await b).leader).toBe(false);
  });
});
