/** Base class of every error the chat client throws. Messages never carry the API key. */
export class LlmError extends Error {
  override name = "LlmError";
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
  }
}

/** The server answered with an HTTP error that retrying cannot fix (a 400 for a bad request, say). */
export class LlmHttpError extends LlmError {
  override name = "LlmHttpError";
  constructor(
    message: string,
    readonly statusCode: number,
    /** The start of the response body, with the API key removed. */
    readonly body: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

/** 401 or 403: the key is missing, wrong, or not allowed this model. No later request can succeed. */
export class LlmAuthError extends LlmHttpError {
  override name = "LlmAuthError";
}

/** The server does not know the model (404, or a 400 saying so), or the base URL has no chat-completions route. */
export class LlmModelNotFoundError extends LlmHttpError {
  override name = "LlmModelNotFoundError";
}

/** The conversation is longer than the model's context window. */
export class LlmContextLengthError extends LlmHttpError {
  override name = "LlmContextLengthError";
}

/**
 * 429s, 5xx or connection errors went on past the retry budget (attempts or elapsed time).
 * `statusCode` is the last status, or null when the last attempt never got a response.
 */
export class LlmRetriesExhaustedError extends LlmError {
  override name = "LlmRetriesExhaustedError";
  constructor(
    message: string,
    readonly statusCode: number | null,
    readonly attempts: number,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

/** A 200 whose body is not a chat completion (not JSON, or no `choices[0].message`). */
export class LlmResponseError extends LlmError {
  override name = "LlmResponseError";
}

/**
 * The endpoint has never answered and connections to it fail (nothing listens, no such host, no
 * route): a wrong --base-url or a model server that is not running. No later request can succeed.
 */
export class LlmUnreachableError extends LlmError {
  override name = "LlmUnreachableError";
  constructor(
    message: string,
    /** The socket error code, e.g. ECONNREFUSED. */
    readonly code: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

/** Socket errors meaning no connection could be made at all. */
const UNREACHABLE_CODES = new Set(["ECONNREFUSED", "ENOTFOUND", "EAI_AGAIN", "EHOSTUNREACH", "ENETUNREACH", "UND_ERR_CONNECT_TIMEOUT"]);

/** Attempts at an endpoint that has never answered before it counts as unreachable. */
export const UNREACHABLE_ATTEMPTS = 3;

/** The socket code when `error` means no connection could be made (undici nests it in `cause`), else null. */
export function unreachableCode(error: unknown): string | null {
  for (let e: unknown = error, depth = 0; e && typeof e === "object" && depth < 4; e = (e as { cause?: unknown }).cause, depth++) {
    const code = (e as { code?: unknown }).code;
    if (typeof code === "string" && UNREACHABLE_CODES.has(code)) return code;
  }
  return null;
}
