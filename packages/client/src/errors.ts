/** Thrown by the client when the server answers with an error status, an answer that breaks the wire protocol, or the WebSocket cannot be kept. */
export class ClientError extends Error {
  override name = "ClientError";
  /** The answer's Retry-After in seconds, when it had one. */
  retryAfterSec: number | null = null;
  constructor(
    /** The HTTP status (0 when there was no HTTP answer, e.g. a lost WebSocket). */
    readonly statusCode: number,
    /** The server's `error` code, or `bad_response` / `websocket` / `upload_dropped` from the client itself. */
    readonly code: string,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}
