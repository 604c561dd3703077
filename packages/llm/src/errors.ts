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
