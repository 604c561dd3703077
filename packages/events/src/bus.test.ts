import type { EventBody, Logger, ProctorEvent } from "@proctor/schema";
import { describe, expect, it } from "vitest";
import { EventBus, type GapNotice } from "./bus";
import { EventBusClosedError, ReplayGapError } from "./errors";

function recordingLogger() {
  const lines: Array<{ level: string; message: string; fields?: Record<string, unknown> }> = [];
  const at = (level: string) => (message: string, fields?: Record<string, unknown>) => void lines.push({ level, message, fields });
  const logger: Logger = { debug: at("debug"), info: at("info"), warn: at("warn"), error: at("error") };
  return { logger, lines };
}

function phase(n: number): EventBody {
  return { type: "trial_phase", trialId: `t${n}`, taskId: "task", data: { phase: "agent", status: "started" } };
}

function emitMany(bus: EventBus, count: number): ProctorEvent[] {
  return Array.from({ length: count }, (_, i) => bus.emit(phase(i)));
}

const seqs = (events: ProctorEvent[]) => events.map((e) => e.seq);
const ignore = (_event: ProctorEvent) => undefined;

describe("EventBus.emit", () => {
  it("stamps seq from 1, the clock's ISO time and the run id", () => {
    let tick = Date.parse("2025-03-01T12:00:00.000Z");
    const bus = new EventBus({ runId: "run-7", now: () => new Date((tick += 1000)) });
    const first = bus.emit(phase(0));
    const second = bus.emit({ type: "trial_retry", trialId: "t", taskId: "task", data: { retry: 1, delayMs: 10, message: "daemon" } });
    expect(first).toMatchObject({ seq: 1, ts: "2025-03-01T12:00:01.000Z", runId: "run-7", type: "trial_phase", trialId: "t0" });
    expect(second).toMatchObject({ seq: 2, ts: "2025-03-01T12:00:02.000Z", runId: "run-7", type: "trial_retry" });
    expect(bus.lastSeq).toBe(2);
  });

  it("continues after startSeq for a resumed run", () => {
    const bus = new EventBus({ runId: "r", startSeq: 41 });
    expect(bus.emit(phase(0)).seq).toBe(42);
    expect(bus.oldestSeq).toBe(42);
  });
});

describe("EventBus.subscribe", () => {
  it("delivers only live events when no since is given", () => {
    const bus = new EventBus({ runId: "r" });
    emitMany(bus, 3);
    const got: ProctorEvent[] = [];
    bus.subscribe((e) => void got.push(e));
    emitMany(bus, 2);
    expect(seqs(got)).toEqual([4, 5]);
  });

  it("replays events after since, then live ones, without duplicates or gaps", () => {
    const bus = new EventBus({ runId: "r" });
    emitMany(bus, 5);
    const got: ProctorEvent[] = [];
    bus.subscribe((e) => void got.push(e), { since: 2 });
    expect(seqs(got)).toEqual([3, 4, 5]);
    emitMany(bus, 2);
    expect(seqs(got)).toEqual([3, 4, 5, 6, 7]);
  });

  it("replays everything from since 0 and nothing when since is the last seq", () => {
    const bus = new EventBus({ runId: "r" });
    emitMany(bus, 3);
    const all: ProctorEvent[] = [];
    const none: ProctorEvent[] = [];
    bus.subscribe((e) => void all.push(e), { since: 0 });
    bus.subscribe((e) => void none.push(e), { since: 3 });
    expect(seqs(all)).toEqual([1, 2, 3]);
    expect(none).toEqual([]);
  });

  it("stops delivering after unsubscribe, which is safe to call twice", () => {
    const bus = new EventBus({ runId: "r" });
    const got: ProctorEvent[] = [];
    const off = bus.subscribe((e) => void got.push(e));
    bus.emit(phase(0));
    off();
    off();
    bus.emit(phase(1));
    expect(seqs(got)).toEqual([1]);
    expect(bus.listenerCount).toBe(0);
  });

  it("rejects a since that is not a non-negative integer", () => {
    const bus = new EventBus({ runId: "r" });
    expect(() => bus.subscribe(ignore, { since: -1 })).toThrow(RangeError);
    expect(() => bus.subscribe(ignore, { since: 1.5 })).toThrow(RangeError);
  });
});

describe("bounded replay buffer and gaps", () => {
  it("keeps only the newest bufferSize events", () => {
    const bus = new EventBus({ runId: "r", bufferSize: 4 });
    emitMany(bus, 10);
    expect(bus.oldestSeq).toBe(7);
    expect(seqs(bus.history())).toEqual([7, 8, 9, 10]);
    expect(seqs(bus.history(8))).toEqual([9, 10]);
    expect(seqs(bus.history(2))).toEqual([7, 8, 9, 10]);
  });

  it("keeps 10,000 events by default", () => {
    const bus = new EventBus({ runId: "r" });
    emitMany(bus, 10_005);
    expect(bus.history()).toHaveLength(10_000);
    expect(bus.oldestSeq).toBe(6);
  });

  it("tells a subscriber whose since is older than the buffer, then replays what is left", () => {
    const bus = new EventBus({ runId: "r", bufferSize: 3 });
    emitMany(bus, 6);
    const notices: GapNotice[] = [];
    const got: ProctorEvent[] = [];
    bus.subscribe((e) => void got.push(e), { since: 1, onGap: (n) => void notices.push(n) });
    expect(notices).toEqual([{ gap: true, since: 1, oldestSeq: 4, lastSeq: 6 }]);
    expect(seqs(got)).toEqual([4, 5, 6]);
  });

  it("lets onGap resync from a snapshot and continue with live events only", () => {
    const bus = new EventBus({ runId: "r", bufferSize: 3 });
    emitMany(bus, 6);
    const wire: Array<string | number> = [];
    bus.subscribe((e) => void wire.push(e.seq), {
      since: 0,
      onGap: (notice) => {
        wire.push(`snapshot@${notice.lastSeq}`);
        return notice.lastSeq;
      },
    });
    emitMany(bus, 1);
    expect(wire).toEqual(["snapshot@6", 7]);
  });

  it("does not report a gap when since is just before the oldest buffered event", () => {
    const bus = new EventBus({ runId: "r", bufferSize: 3 });
    emitMany(bus, 6);
    const got: ProctorEvent[] = [];
    bus.subscribe((e) => void got.push(e), { since: 3, onGap: () => expect.fail("no gap expected") });
    expect(seqs(got)).toEqual([4, 5, 6]);
  });

  it("treats a since beyond the last seq (another process's stream) as a gap", () => {
    const bus = new EventBus({ runId: "r" });
    emitMany(bus, 2);
    const notices: GapNotice[] = [];
    const got: ProctorEvent[] = [];
    bus.subscribe((e) => void got.push(e), { since: 50, onGap: (n) => void notices.push(n) });
    expect(notices).toEqual([{ gap: true, since: 50, oldestSeq: 1, lastSeq: 2 }]);
    expect(seqs(got)).toEqual([1, 2]);
  });

  it("treats history from before a resume as a gap", () => {
    const bus = new EventBus({ runId: "r", startSeq: 100 });
    const notices: GapNotice[] = [];
    bus.subscribe(ignore, { since: 10, onGap: (n) => void notices.push(n) });
    expect(notices).toEqual([{ gap: true, since: 10, oldestSeq: null, lastSeq: 100 }]);
  });

  it("throws ReplayGapError rather than skipping events silently when there is no onGap", () => {
    const bus = new EventBus({ runId: "r", bufferSize: 2 });
    emitMany(bus, 5);
    expect(() => bus.subscribe(ignore, { since: 0 })).toThrow(ReplayGapError);
    expect(() => bus.subscribe(ignore, { since: 0 })).toThrow(/seq 4\.\.5/);
    expect(bus.listenerCount).toBe(0);
  });

  it("tells a subscriber that fell behind the buffer during a burst of nested emits", () => {
    const bus = new EventBus({ runId: "r", bufferSize: 3 });
    const notices: GapNotice[] = [];
    const slow: ProctorEvent[] = [];
    bus.subscribe((e) => {
      if (e.seq === 1) emitMany(bus, 9);
    });
    bus.subscribe((e) => void slow.push(e), { onGap: (n) => void notices.push(n) });
    bus.emit(phase(0));
    expect(notices).toEqual([{ gap: true, since: 0, oldestSeq: 8, lastSeq: 10 }]);
    expect(seqs(slow)).toEqual([8, 9, 10]);
  });
});

describe("ordering under re-entrancy", () => {
  it("delivers an event emitted from a listener after the current one, to everyone, in order", () => {
    const bus = new EventBus({ runId: "r" });
    const a: number[] = [];
    const b: number[] = [];
    bus.subscribe((e) => {
      a.push(e.seq);
      if (e.seq === 1) bus.emit(phase(99));
    });
    bus.subscribe((e) => void b.push(e.seq));
    bus.emit(phase(0));
    expect(a).toEqual([1, 2]);
    expect(b).toEqual([1, 2]);
  });

  it("gives a subscriber added inside a listener every later event exactly once", () => {
    const bus = new EventBus({ runId: "r" });
    const late: number[] = [];
    bus.subscribe((e) => {
      if (e.seq === 2) {
        bus.emit(phase(100));
        bus.subscribe((x) => void late.push(x.seq), { since: 1 });
      }
    });
    emitMany(bus, 4);
    expect(late).toEqual([2, 3, 4, 5]);
  });
});

describe("listener isolation", () => {
  it("reports a throwing listener to the logger and keeps emitting to the others", () => {
    const { logger, lines } = recordingLogger();
    const bus = new EventBus({ runId: "r", logger });
    const got: number[] = [];
    bus.subscribe(() => {
      throw new Error("listener bug");
    });
    bus.subscribe((e) => void got.push(e.seq));
    expect(() => emitMany(bus, 3)).not.toThrow();
    expect(got).toEqual([1, 2, 3]);
    expect(lines.filter((l) => l.level === "error")).toHaveLength(3);
    expect(lines[0]).toMatchObject({ level: "error", fields: { runId: "r", seq: 1, type: "trial_phase", error: "listener bug" } });
  });

  it("reports an async listener's rejection", async () => {
    const { logger, lines } = recordingLogger();
    const bus = new EventBus({ runId: "r", logger });
    bus.subscribe(async () => {
      throw new Error("async bug");
    });
    bus.emit(phase(0));
    await new Promise((resolve) => setImmediate(resolve));
    expect(lines).toMatchObject([{ level: "error", fields: { seq: 1, error: "async bug" } }]);
  });
});

describe("EventBus.close", () => {
  it("ends subscriptions, refuses new emits and subscribers, keeps history", () => {
    const bus = new EventBus({ runId: "r" });
    let closed = 0;
    bus.subscribe(ignore, { onClose: () => void closed++ });
    emitMany(bus, 2);
    bus.close();
    bus.close();
    expect(closed).toBe(1);
    expect(bus.listenerCount).toBe(0);
    expect(() => bus.emit(phase(3))).toThrow(EventBusClosedError);
    expect(() => bus.subscribe(ignore)).toThrow(EventBusClosedError);
    expect(seqs(bus.history())).toEqual([1, 2]);
  });

  it("still delivers events emitted before close() was called from a listener", () => {
    const bus = new EventBus({ runId: "r" });
    const b: number[] = [];
    let closedAfter = -1;
    bus.subscribe((e) => {
      if (e.seq === 1) {
        bus.emit(phase(1));
        bus.close();
      }
    });
    bus.subscribe((e) => void b.push(e.seq), { onClose: () => void (closedAfter = b.length) });
    bus.emit(phase(0));
    expect(b).toEqual([1, 2]);
    expect(closedAfter).toBe(2);
  });
});
