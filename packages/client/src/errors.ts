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

/** Socket errors meaning no connection could be made at all (nothing listens, no such host, no route). */
const UNREACHABLE = new Set(["ECONNREFUSED", "ENOTFOUND", "EAI_AGAIN", "EHOSTUNREACH", "ENETUNREACH", "ETIMEDOUT", "UND_ERR_CONNECT_TIMEOUT"]);

/** The socket error code of a failed request (undici puts the system error in `cause`), or null. */
function socketErrorCode(error: unknown): string | null {
  for (let e: unknown = error, depth = 0; e && typeof e === "object" && depth < 4; e = (e as { cause?: unknown }).cause, depth++) {
    const code = (e as { code?: unknown }).code;
    if (typeof code === "string" && (UNREACHABLE.has(code) || code.startsWith("E"))) return code;
  }
  return null;
}

/**
 * A ClientError (status 0, code `unreachable`) when `error` says no connection to `server` could
 * be made, else null: one line naming the server and what to check.
 */
export function unreachableError(server: string, error: unknown): ClientError | null {
  const code = socketErrorCode(error);
  if (code === null || !UNREACHABLE.has(code)) return null;
  return new ClientError(0, "unreachable", `cannot reach the server at ${server} (${code}): is proctor serve running there? Check the URL and port`, { cause: error });
}
