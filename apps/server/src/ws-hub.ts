import type { IncomingMessage } from "node:http";
import type { Duplex } from "node:stream";
import { WsHub as Hub, batchFeed } from "@proctor/client";
import type { WsFeed, WsHubOptions } from "@proctor/client";
import type { QueuedBatch, RunQueue } from "@proctor/engine";

export { DEFAULT_WS_OPTIONS } from "@proctor/client";

/** @proctor/client's WsHub over the RunQueue's batches: one feed per batch, so its clients share a subscription. */
export class WsHub {
  private readonly hub: Hub;
  private readonly feeds = new WeakMap<QueuedBatch, WsFeed>();

  constructor(
    private readonly queue: RunQueue,
    options: WsHubOptions,
  ) {
    this.hub = new Hub(options);
  }

  get size(): number {
    return this.hub.size;
  }

  upgrade(request: IncomingMessage, socket: Duplex, head: Buffer, batch: QueuedBatch, since: number | null): void {
    this.hub.upgrade(request, socket, head, this.feedOf(batch), since);
  }

  close(): void {
    this.hub.close();
  }

  private feedOf(batch: QueuedBatch): WsFeed {
    let feed = this.feeds.get(batch);
    if (!feed) {
      feed = batchFeed(batch, this.queue);
      this.feeds.set(batch, feed);
    }
    return feed;
  }
}
