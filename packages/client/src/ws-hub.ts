import type { IncomingMessage } from "node:http";
import type { Duplex } from "node:stream";
import type { Logger } from "@proctor/schema";
import { WebSocket, WebSocketServer } from "ws";
import { DROPPABLE_EVENTS } from "./wire";
import type { WireEnvelope, WireEventName } from "./wire";

/**
 * One batch's stream as the hub sees it; a server adapts its own batch objects to this. The hub
 * shares one subscription among the clients of the same feed object, so hand it the same
 * object for the same batch.
 */
export interface WsFeed {
  readonly id: string;
  /** True once the batch ended: a client that caught up gets a final snapshot and a close. */
  readonly finished: boolean;
  /** Called once per connection before the first snapshot (e.g. to learn the seq of a restored batch). */
  prepare(): Promise<void>;
  /** The `snapshot` message now, serialized, with the seq of the last event it reflects. */
  snapshot(): { seq: number; json: string };
  /** Recorded envelopes after `since`, in seq order (older ones are skipped). */
  replay(since: number): Promise<readonly WireEnvelope[]>;
  /** Live envelopes, in seq order; returns the unsubscribe function. */
  subscribe(listener: (envelope: WireEnvelope) => void): () => void;
}

/** What the hub counts (prom-client's Gauge and Counter fit). */
export interface WsHubMetrics {
  wsClients: { set(value: number): void };
  wsDropped: { inc(): void };
  wsResyncs: { inc(): void };
}

export interface WsHubOptions {
  /** Ping every client this often; one without a pong by the next ping is terminated. */
  heartbeatMs: number;
  /** Above this many buffered bytes a client stops receiving task_phase / task_retry. */
  softBufferBytes: number;
  /** Above this many buffered bytes a client receives nothing until it drains; then a fresh snapshot. */
  hardBufferBytes: number;
  /** A client that stays above the hard cap this long is terminated. */
  stalledTimeoutMs: number;
  logger: Logger;
  metrics: WsHubMetrics;
}

export const DEFAULT_WS_OPTIONS = {
  heartbeatMs: 30_000,
  softBufferBytes: 1 * 1024 * 1024,
  hardBufferBytes: 8 * 1024 * 1024,
  stalledTimeoutMs: 60_000,
} as const;

/** WebSocket close codes the hub uses. */
export const CLOSE_CODES = { normal: 1000, goingAway: 1001, stalled: 4008 } as const;

type Mode = "replaying" | "live" | "resync";

interface Client {
  ws: WebSocket;
  batch: WsFeed;
  /** Seq of the last event delivered (or covered by a snapshot). */
  lastSeq: number;
  mode: Mode;
  /** Live events that arrived while the replay was being read (bounded by the replay's length). */
  pending: { envelope: WireEnvelope; json: string }[];
  alive: boolean;
  stalledSinceMs: number | null;
  closing: boolean;
  /** True when the last message sent was a snapshot (no need for another before closing). */
  lastWasSnapshot: boolean;
}

const RESYNC_CHECK_MS = 200;

/**
 * What to do with one live event for a client that has `bufferedBytes` not yet written to its
 * socket: send it; drop it (only task_phase / task_retry, above the soft cap); or stop sending
 * and resync the client with a fresh snapshot once it drained (above the hard cap).
 * batch_complete is always sent: it ends the stream.
 */
export function backpressureAction(
  event: WireEventName,
  bufferedBytes: number,
  caps: { softBufferBytes: number; hardBufferBytes: number },
): "send" | "drop" | "resync" {
  if (event === "batch_complete") return "send";
  if (bufferedBytes > caps.hardBufferBytes) return "resync";
  if (bufferedBytes > caps.softBufferBytes && DROPPABLE_EVENTS.has(event)) return "drop";
  return "send";
}
/** A replaying client that collects more live events than this is resynced with a snapshot instead. */
const MAX_PENDING = 10_000;

/**
 * Fans a batch's wire events out to its WebSocket clients: snapshot on connect, replay from
 * `since`, live events, heartbeat, per-client backpressure (drop task_phase, then skip and
 * resync with a fresh snapshot), final snapshot and close after batch_complete. Each event is
 * serialized once for all clients; one slow client never delays the others or the engine.
 */
export class WsHub {
  private readonly wss = new WebSocketServer({ noServer: true, maxPayload: 64 * 1024 });
  private readonly clients = new Set<Client>();
  private readonly batchListeners = new Map<WsFeed, { unsubscribe: () => void; clients: Set<Client> }>();
  private readonly heartbeat: NodeJS.Timeout;
  private readonly resyncTimer: NodeJS.Timeout;

  constructor(private readonly options: WsHubOptions) {
    this.wss.on("error", (error) => options.logger.error("websocket server error", { error: String(error) }));
    this.heartbeat = setInterval(() => this.beat(), options.heartbeatMs);
    this.resyncTimer = setInterval(() => this.checkSlowClients(), RESYNC_CHECK_MS);
    this.heartbeat.unref();
    this.resyncTimer.unref();
  }

  get size(): number {
    return this.clients.size;
  }

  /** Complete an upgrade that the caller already authenticated, for a batch that exists. */
  upgrade(request: IncomingMessage, socket: Duplex, head: Buffer, batch: WsFeed, since: number | null): void {
    this.wss.handleUpgrade(request, socket, head, (ws) => {
      this.connect(ws, batch, since).catch((error: unknown) => {
        this.options.logger.error("websocket replay failed", { batchId: batch.id, error: String(error) });
        ws.close(1011, "replay failed");
      });
    });
  }

  /** Close every client (1001 going away) and stop the timers. */
  close(): void {
    clearInterval(this.heartbeat);
    clearInterval(this.resyncTimer);
    for (const client of [...this.clients]) {
      client.ws.close(CLOSE_CODES.goingAway, "server shutting down");
      this.drop(client);
    }
    this.wss.close();
  }

  private async connect(ws: WebSocket, batch: WsFeed, since: number | null): Promise<void> {
    const client: Client = { ws, batch, lastSeq: 0, mode: "replaying", pending: [], alive: true, stalledSinceMs: null, closing: false, lastWasSnapshot: false };
    ws.on("error", (error) => this.options.logger.debug("websocket client error", { batchId: batch.id, error: String(error) }));
    ws.on("pong", () => {
      client.alive = true;
    });
    ws.on("close", () => this.drop(client));
    this.clients.add(client);
    this.options.metrics.wsClients.set(this.clients.size);
    this.attach(client);

    await batch.prepare();
    const snapshot = batch.snapshot();
    this.send(client, snapshot.json, true);
    client.lastSeq = since ?? snapshot.seq;
    if (since !== null && since < snapshot.seq) {
      for (const envelope of await batch.replay(since)) {
        if (client.closing) return;
        if (envelope.seq <= client.lastSeq) continue;
        this.send(client, JSON.stringify(envelope));
        client.lastSeq = envelope.seq;
      }
    }
    if (client.closing) return;
    const pending = client.pending;
    client.pending = [];
    client.mode = "live";
    for (const { envelope, json } of pending) this.deliver(client, envelope, json);
    if (client.mode === "live" && batch.finished && !client.closing) this.finish(client);
  }

  /** One listener per batch, shared by all its clients: each update is mapped and serialized once. */
  private attach(client: Client): void {
    let entry = this.batchListeners.get(client.batch);
    if (!entry) {
      const clients = new Set<Client>();
      const batch = client.batch;
      const unsubscribe = batch.subscribe((envelope) => {
        if (clients.size === 0) return;
        const json = JSON.stringify(envelope);
        for (const c of clients) this.deliver(c, envelope, json);
      });
      entry = { unsubscribe, clients };
      this.batchListeners.set(client.batch, entry);
    }
    entry.clients.add(client);
  }

  private deliver(client: Client, envelope: WireEnvelope, json: string): void {
    if (client.closing || envelope.seq <= client.lastSeq) return;
    const final = envelope.event === "batch_complete";
    if (client.mode === "replaying") {
      if (client.pending.length >= MAX_PENDING) client.mode = "resync";
      else client.pending.push({ envelope, json });
      return;
    }
    if (client.mode === "resync") {
      this.options.metrics.wsDropped.inc();
      if (final) this.finish(client);
      return;
    }
    const action = backpressureAction(envelope.event, client.ws.bufferedAmount, this.options);
    if (action === "resync") {
      client.mode = "resync";
      client.stalledSinceMs = Date.now();
    }
    if (action !== "send") {
      this.options.metrics.wsDropped.inc();
      return;
    }
    this.send(client, json);
    client.lastSeq = envelope.seq;
    if (final) this.finish(client);
  }

  /** After batch_complete: a final snapshot, then a normal close once the socket drained. */
  private finish(client: Client): void {
    if (client.closing) return;
    client.closing = true;
    if (!client.lastWasSnapshot) this.send(client, client.batch.snapshot().json, true);
    client.ws.close(CLOSE_CODES.normal, "batch complete");
  }

  private checkSlowClients(): void {
    const now = Date.now();
    for (const client of this.clients) {
      if (client.mode !== "resync" || client.closing) continue;
      if (client.ws.bufferedAmount <= this.options.softBufferBytes) {
        const snapshot = client.batch.snapshot();
        this.send(client, snapshot.json, true);
        client.lastSeq = snapshot.seq;
        client.mode = "live";
        client.stalledSinceMs = null;
        this.options.metrics.wsResyncs.inc();
        if (client.batch.finished) this.finish(client);
      } else if (client.stalledSinceMs !== null && now - client.stalledSinceMs > this.options.stalledTimeoutMs) {
        this.options.logger.warn("terminating a websocket client that stopped reading", { batchId: client.batch.id });
        client.ws.terminate();
        this.drop(client);
      } else {
        client.stalledSinceMs ??= now;
      }
    }
  }

  private beat(): void {
    for (const client of this.clients) {
      if (!client.alive) {
        client.ws.terminate();
        this.drop(client);
        continue;
      }
      client.alive = false;
      try {
        client.ws.ping();
      } catch (error) {
        this.options.logger.debug("websocket ping failed", { error: String(error) });
      }
    }
  }

  private send(client: Client, json: string, snapshot = false): void {
    if (client.ws.readyState !== WebSocket.OPEN) return;
    client.lastWasSnapshot = snapshot;
    client.ws.send(json, (error) => {
      if (error) this.options.logger.debug("websocket send failed", { batchId: client.batch.id, error: String(error) });
    });
  }

  private drop(client: Client): void {
    if (!this.clients.delete(client)) return;
    client.closing = true;
    client.pending = [];
    const entry = this.batchListeners.get(client.batch);
    if (entry) {
      entry.clients.delete(client);
      if (entry.clients.size === 0) {
        entry.unsubscribe();
        this.batchListeners.delete(client.batch);
      }
    }
    this.options.metrics.wsClients.set(this.clients.size);
  }
}
