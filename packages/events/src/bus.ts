import type { EventBody, Logger, ProctorEvent } from "@proctor/schema";
import { silentLogger } from "@proctor/schema";
import { EventBusClosedError, ReplayGapError } from "./errors";
import { RingBuffer } from "./ring";

export const DEFAULT_REPLAY_BUFFER = 10_000;

export type EventListener = (event: ProctorEvent) => void | Promise<void>;

/**
 * Told to a subscriber whose requested history is gone: `since` is older than the oldest
 * buffered event, newer than anything emitted, or the subscriber fell behind further than the
 * buffer holds. Resync it from a snapshot.
 */
export interface GapNotice {
  gap: true;
  /** The subscriber had everything up to this seq. */
  since: number;
  /** The oldest seq still buffered; null when the buffer is empty. */
  oldestSeq: number | null;
  /** The newest seq emitted so far. */
  lastSeq: number;
}

export interface SubscribeOptions {
  /** Replay buffered events with seq > since first. Omitted: live events only. */
  since?: number;
  /**
   * Called (before any event) when events after `since` are no longer buffered. Return the seq
   * the subscriber is now current to (e.g. `notice.lastSeq` after sending it a fresh snapshot)
   * and delivery continues after it; return nothing and it continues with the oldest buffered
   * event. Without onGap, such a subscribe() throws ReplayGapError.
   */
  onGap?: (notice: GapNotice) => number | void;
  /** Called once when the bus closes. */
  onClose?: () => void;
}

export interface EventBusOptions {
  runId: string;
  /** Events kept for replay (a ring buffer). Default 10,000. */
  bufferSize?: number;
  /** Where throwing listeners are reported. */
  logger?: Logger;
  /** The last seq already used (a resumed run continues its events.jsonl); the first emit gets startSeq + 1. Default 0. */
  startSeq?: number;
  /** Clock for `ts`; injectable for tests. */
  now?: () => Date;
}

interface Subscription {
  listener: EventListener;
  options: SubscribeOptions;
  /** Seq of the last event this subscriber has been given. */
  cursor: number;
  active: boolean;
}

/**
 * In-process event bus for one run. emit() stamps a strictly increasing seq, an ISO `ts` and the
 * runId; subscribers get every event after their cursor exactly once, in seq order, replay first.
 * Delivery is synchronous; an event emitted from inside a listener is queued until the current
 * one has reached everyone, so order holds even then. A listener that throws (or rejects) is
 * reported to the logger and never affects emit() or other listeners.
 */
export class EventBus {
  readonly runId: string;
  private readonly ring: RingBuffer<ProctorEvent>;
  private readonly logger: Logger;
  private readonly now: () => Date;
  private readonly subs = new Set<Subscription>();
  private seq: number;
  private pumping = false;
  private closed = false;
  private finished = false;

  constructor(options: EventBusOptions) {
    this.runId = options.runId;
    this.ring = new RingBuffer(options.bufferSize ?? DEFAULT_REPLAY_BUFFER);
    this.logger = options.logger ?? silentLogger;
    this.now = options.now ?? (() => new Date());
    const startSeq = options.startSeq ?? 0;
    if (!Number.isInteger(startSeq) || startSeq < 0) throw new RangeError(`startSeq must be a non-negative integer, got ${startSeq}`);
    this.seq = startSeq;
  }

  /** The seq of the newest event (startSeq before the first emit). */
  get lastSeq(): number {
    return this.seq;
  }

  /** The seq of the oldest buffered event, or null when nothing is buffered. */
  get oldestSeq(): number | null {
    return this.ring.size === 0 ? null : this.seq - this.ring.size + 1;
  }

  get listenerCount(): number {
    return this.subs.size;
  }

  get isClosed(): boolean {
    return this.closed;
  }

  /** Stamps and delivers one event; returns it as stored. Throws EventBusClosedError after close(). */
  emit(body: EventBody): ProctorEvent {
    if (this.closed) throw new EventBusClosedError(`run ${this.runId}: cannot emit "${body.type}", the event bus is closed`);
    const event = { ...body, seq: this.seq + 1, ts: this.now().toISOString(), runId: this.runId } as ProctorEvent;
    this.seq = event.seq;
    this.ring.push(event);
    this.pump();
    return event;
  }

  /**
   * Delivers buffered events with seq > since, then live ones, to `listener`. Returns an
   * idempotent unsubscribe function. Throws ReplayGapError when the history after `since` is
   * gone and no onGap was given, RangeError for a `since` that is not a non-negative integer.
   */
  subscribe(listener: EventListener, options: SubscribeOptions = {}): () => void {
    if (this.closed) throw new EventBusClosedError(`run ${this.runId}: cannot subscribe, the event bus is closed`);
    const sub: Subscription = { listener, options, cursor: this.seq, active: true };
    const { since } = options;
    if (since !== undefined) {
      if (!Number.isInteger(since) || since < 0) throw new RangeError(`since must be a non-negative integer, got ${since}`);
      sub.cursor = since;
      if (this.isGap(since)) {
        if (!options.onGap) throw new ReplayGapError(since, this.oldestSeq, this.seq);
        this.resolveGap(sub);
      }
    }
    this.subs.add(sub);
    this.pump();
    return () => {
      sub.active = false;
      this.subs.delete(sub);
    };
  }

  /** Buffered events with seq > since (default: all buffered), oldest first. */
  history(since = 0): ProctorEvent[] {
    const oldest = this.oldestSeq;
    if (oldest === null) return [];
    const out: ProctorEvent[] = [];
    for (let seq = Math.max(since + 1, oldest); seq <= this.seq; seq++) out.push(this.ring.at(seq - oldest) as ProctorEvent);
    return out;
  }

  /**
   * Ends every subscription (each gets onClose) after events already emitted have been
   * delivered; later emit()/subscribe() throw. history() keeps working. Safe to call twice.
   */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    if (!this.pumping) this.finish();
  }

  private isGap(since: number): boolean {
    if (since > this.seq) return true;
    if (since === this.seq) return false;
    const oldest = this.oldestSeq;
    return oldest === null || since + 1 < oldest;
  }

  private resolveGap(sub: Subscription): void {
    const notice: GapNotice = { gap: true, since: sub.cursor, oldestSeq: this.oldestSeq, lastSeq: this.seq };
    const floor = (notice.oldestSeq ?? this.seq + 1) - 1;
    sub.cursor = floor;
    if (!sub.options.onGap) {
      this.logger.error("event subscriber fell behind the replay buffer; it skips the lost events", { runId: this.runId, ...notice });
      return;
    }
    let resumeAfter: number | void;
    try {
      resumeAfter = sub.options.onGap(notice);
    } catch (error) {
      this.report("onGap handler threw", error, {});
      return;
    }
    if (typeof resumeAfter === "number" && Number.isFinite(resumeAfter)) {
      sub.cursor = Math.min(Math.max(Math.floor(resumeAfter), floor), this.seq);
    }
  }

  /** Delivers until every active subscriber is current. Re-entrant calls return at once; the outer loop picks up their events. */
  private pump(): void {
    if (this.pumping) return;
    this.pumping = true;
    try {
      let progressed = true;
      while (progressed) {
        progressed = false;
        for (const sub of this.subs) {
          if (!sub.active || sub.cursor >= this.seq) continue;
          progressed = true;
          this.deliverNext(sub);
        }
      }
    } finally {
      this.pumping = false;
      if (this.closed) this.finish();
    }
  }

  private deliverNext(sub: Subscription): void {
    const oldest = this.oldestSeq;
    const next = sub.cursor + 1;
    if (oldest === null || next < oldest) {
      this.resolveGap(sub);
      return;
    }
    const event = this.ring.at(next - oldest) as ProctorEvent;
    sub.cursor = next;
    try {
      const result = sub.listener(event);
      if (result && typeof (result as Promise<void>).then === "function") {
        (result as Promise<void>).then(undefined, (error: unknown) => this.report("event listener rejected", error, event));
      }
    } catch (error) {
      this.report("event listener threw", error, event);
    }
  }

  private report(message: string, error: unknown, event: Partial<ProctorEvent>): void {
    this.logger.error(`${message}; the event bus carries on`, {
      runId: this.runId,
      seq: event.seq,
      type: event.type,
      error: error instanceof Error ? error.message : String(error),
      stack: error instanceof Error ? error.stack : undefined,
    });
  }

  private finish(): void {
    if (this.finished) return;
    this.finished = true;
    const subs = [...this.subs];
    this.subs.clear();
    for (const sub of subs) {
      sub.active = false;
      try {
        sub.options.onClose?.();
      } catch (error) {
        this.report("onClose handler threw", error, {});
      }
    }
  }
}
