/** Base class of every error @proctor/events throws. */
export class EventsError extends Error {
  override name = "EventsError";
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
  }
}

/** emit() or subscribe() on an EventBus after close(). */
export class EventBusClosedError extends EventsError {
  override name = "EventBusClosedError";
}

/**
 * subscribe({ since }) asked for events the replay buffer no longer holds (or a seq the bus
 * never reached) and gave no `onGap` handler to resync the subscriber. Thrown by subscribe.
 */
export class ReplayGapError extends EventsError {
  override name = "ReplayGapError";
  constructor(readonly since: number, readonly oldestSeq: number | null, readonly lastSeq: number, options?: { cause?: unknown }) {
    super(
      `cannot replay events after seq ${since}: the buffer holds ${oldestSeq === null ? "nothing" : `seq ${oldestSeq}..${lastSeq}`}; ` +
        "pass onGap to resync the subscriber from a snapshot",
      options,
    );
  }
}

/** Opening, writing, syncing or closing a JSONL file failed. Surfaced by JsonlSink.open/flush/close. */
export class JsonlWriteError extends EventsError {
  override name = "JsonlWriteError";
  constructor(message: string, readonly path: string, options?: { cause?: unknown }) {
    super(message, options);
  }
}

/** JsonlSink.write() after close(). */
export class JsonlClosedError extends EventsError {
  override name = "JsonlClosedError";
  constructor(readonly path: string) {
    super(`${path}: the JSONL sink is closed; no more lines can be written`);
  }
}

/** A JSONL file could not be read at all (missing, unreadable). Thrown by readJsonl. */
export class JsonlReadError extends EventsError {
  override name = "JsonlReadError";
  constructor(message: string, readonly path: string, options?: { cause?: unknown }) {
    super(message, options);
  }
}

/**
 * A complete (newline-terminated) line of a JSONL file is not valid JSON, or is rejected by the
 * caller's parse function. Thrown by readJsonl; only an unterminated last line is tolerated.
 */
export class JsonlParseError extends EventsError {
  override name = "JsonlParseError";
  constructor(readonly path: string, readonly line: number, readonly content: string, reason: string, options?: { cause?: unknown }) {
    super(`${path}:${line}: ${reason}: ${JSON.stringify(content)}; fix or remove that line`, options);
  }
}
