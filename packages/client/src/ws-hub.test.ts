import { once } from "node:events";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { silentLogger } from "@proctor/schema";
import { describe, expect, test } from "vitest";
import { WebSocket } from "ws";
import type { WireEnvelope } from "./wire";
import { CLOSE_CODES, DEFAULT_WS_OPTIONS, WsHub, backpressureAction } from "./ws-hub";
import type { WsFeed } from "./ws-hub";

describe("backpressure policy", () => {
  const caps = { softBufferBytes: 100, hardBufferBytes: 1000 };
  test("a reading client gets everything", () => {
    expect(backpressureAction("task_phase", 0, caps)).toBe("send");
    expect(backpressureAction("task_complete", 100, caps)).toBe("send");
  });
  test("above the soft cap task_phase is dropped but completions still go out", () => {
    expect(backpressureAction("task_phase", 101, caps)).toBe("drop");
    expect(backpressureAction("task_retry", 500, caps)).toBe("drop");
    expect(backpressureAction("task_complete", 500, caps)).toBe("send");
  });
  test("above the hard cap the client is resynced later, except for the final event", () => {
    expect(backpressureAction("task_complete", 1001, caps)).toBe("resync");
    expect(backpressureAction("batch_complete", 10_000, caps)).toBe("send");
  });
});

/** An in-memory batch stream: `emit` is a live event, `recorded` what replay reads. */
function memoryFeed(id: string) {
  const recorded: WireEnvelope[] = [];
  const listeners = new Set<(e: WireEnvelope) => void>();
  let subscriptions = 0;
  const envelope = (seq: number, event: WireEnvelope["event"]): WireEnvelope => ({ seq, event, batch_id: id, ts: new Date(0).toISOString(), data: {} });
  const feed: WsFeed & { finished: boolean } = {
    id,
    finished: false,
    prepare: async () => undefined,
    snapshot: () => {
      const seq = recorded.at(-1)?.seq ?? 0;
      return { seq, json: JSON.stringify({ ...envelope(seq, "snapshot"), data: { finished: feed.finished } }) };
    },
    replay: async (since) => recorded.filter((e) => e.seq > since),
    subscribe: (listener) => {
      subscriptions += 1;
      listeners.add(listener);
      return () => listeners.delete(listener);
    },
  };
  const emit = (event: WireEnvelope["event"]) => {
    const e = envelope((recorded.at(-1)?.seq ?? 0) + 1, event);
    recorded.push(e);
    if (event === "batch_complete") feed.finished = true;
    for (const l of listeners) l(e);
  };
  return { feed, emit, listeners, subscriptions: () => subscriptions };
}

function gauge() {
  const values: number[] = [];
  return { values, metrics: { wsClients: { set: (v: number) => values.push(v) }, wsDropped: { inc: () => undefined }, wsResyncs: { inc: () => undefined } } };
}

/** A real HTTP server whose upgrades go to `hub` for `feed`, `?since=` taken from the URL. */
async function serve(hub: WsHub, feed: WsFeed): Promise<{ url: string; close: () => Promise<void> }> {
  const server = createServer();
  server.on("upgrade", (request, socket, head) => {
    const since = new URL(request.url ?? "/", "http://x").searchParams.get("since");
    hub.upgrade(request, socket, head, feed, since === null ? null : Number(since));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return { url: `ws://127.0.0.1:${port}/ws`, close: () => new Promise((resolve) => server.close(() => resolve())) };
}

/** Connect and collect every message until the server closes the socket. */
function follow(url: string) {
  const messages: { seq: number; event: string; data: Record<string, unknown> }[] = [];
  const ws = new WebSocket(url);
  ws.on("message", (raw: Buffer) => messages.push(JSON.parse(raw.toString())));
  const opened = once(ws, "open");
  const closed = new Promise<number>((resolve) => ws.on("close", (code) => resolve(code)));
  return { messages, opened, closed };
}

async function until(condition: () => boolean): Promise<void> {
  const deadline = Date.now() + 30_000;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error("condition not met within 30 s");
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

describe("WsHub over real sockets", () => {
  test("snapshot, replay after since, live events, then batch_complete, a final snapshot and a normal close", async () => {
    const { feed, emit } = memoryFeed("b1");
    emit("batch_started");
    emit("task_started");
    emit("task_complete");
    const { values, metrics } = gauge();
    const hub = new WsHub({ ...DEFAULT_WS_OPTIONS, logger: silentLogger, metrics });
    const server = await serve(hub, feed);
    try {
      const client = follow(`${server.url}?since=1`);
      await client.opened;
      await until(() => client.messages.length === 3);
      expect(client.messages.map((m) => [m.event, m.seq])).toEqual([["snapshot", 3], ["task_started", 2], ["task_complete", 3]]);
      emit("task_started");
      emit("batch_complete");
      expect(await client.closed).toBe(CLOSE_CODES.normal);
      expect(client.messages.slice(3).map((m) => [m.event, m.seq])).toEqual([["task_started", 4], ["batch_complete", 5], ["snapshot", 5]]);
      expect(client.messages.at(-1)?.data).toEqual({ finished: true });
      await until(() => values.at(-1) === 0);
      expect(Math.max(...values)).toBe(1);
    } finally {
      hub.close();
      await server.close();
    }
  });

  test("clients of one feed share one subscription, released when the last one leaves; close() says going away", async () => {
    const { feed, emit, listeners, subscriptions } = memoryFeed("b2");
    emit("batch_started");
    const hub = new WsHub({ ...DEFAULT_WS_OPTIONS, logger: silentLogger, metrics: gauge().metrics });
    const server = await serve(hub, feed);
    try {
      const clients = [follow(server.url), follow(server.url), follow(server.url)];
      await Promise.all(clients.map((c) => c.opened));
      await until(() => clients.every((c) => c.messages.length === 1));
      emit("task_started");
      await until(() => clients.every((c) => c.messages.length === 2));
      expect(clients.map((c) => c.messages.map((m) => m.event))).toEqual(clients.map(() => ["snapshot", "task_started"]));
      expect(subscriptions()).toBe(1);
      expect(hub.size).toBe(3);
      hub.close();
      expect(await Promise.all(clients.map((c) => c.closed))).toEqual([CLOSE_CODES.goingAway, CLOSE_CODES.goingAway, CLOSE_CODES.goingAway]);
      expect(listeners.size).toBe(0);
    } finally {
      hub.close();
      await server.close();
    }
  });
});
