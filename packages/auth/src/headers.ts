import { DuplicateHeaderError, MalformedHeaderError, MissingHeaderError } from "./errors";

/** One header value as node's `IncomingHttpHeaders` holds it. */
export type HeaderValue = string | readonly string[] | undefined;

/** Request headers: a plain object (node's `req.headers`/`req.headersDistinct`, any key case) or a fetch `Headers`. */
export type HeadersInput = Headers | Readonly<Record<string, HeaderValue>>;

interface HeadersLike {
  get(name: string): string | null;
}

function isHeadersLike(headers: unknown): headers is HeadersLike {
  return typeof (headers as HeadersLike | null)?.get === "function";
}

/**
 * Case-insensitive access to single-valued headers. A header sent twice (two array entries, two
 * keys differing in case, or comma-joined by the HTTP stack) is a `DuplicateHeaderError`: none of
 * the credentials read here may legitimately contain a comma.
 */
export class HeaderReader {
  readonly #headers: HeadersLike | Map<string, unknown[]>;

  constructor(headers: HeadersInput) {
    if (isHeadersLike(headers)) {
      this.#headers = headers;
      return;
    }
    if (headers === null || typeof headers !== "object") {
      throw new TypeError("headers must be a Headers instance or a plain object of header values");
    }
    const index = new Map<string, unknown[]>();
    for (const [key, value] of Object.entries(headers)) {
      if (value === undefined) continue;
      const lower = key.toLowerCase();
      const values = index.get(lower) ?? [];
      if (Array.isArray(value)) values.push(...(value as unknown[]));
      else values.push(value);
      index.set(lower, values);
    }
    this.#headers = index;
  }

  /** The header's single value, or undefined when absent. Throws Duplicate/MalformedHeaderError. */
  get(name: string): string | undefined {
    let value: unknown;
    if (this.#headers instanceof Map) {
      const values = this.#headers.get(name.toLowerCase());
      if (values === undefined || values.length === 0) return undefined;
      if (values.length > 1) throw new DuplicateHeaderError(name);
      value = values[0];
    } else {
      value = this.#headers.get(name);
      if (value === null) return undefined;
    }
    if (typeof value !== "string") throw new MalformedHeaderError(name, "a text value");
    if (value.includes(",")) throw new DuplicateHeaderError(name);
    return value;
  }

  /** Like `get`, but a missing header is a `MissingHeaderError`. */
  require(name: string, hint?: string): string {
    const value = this.get(name);
    if (value === undefined) throw new MissingHeaderError(name, hint);
    return value;
  }
}
