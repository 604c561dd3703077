import type { Logger } from "@proctor/schema";

/**
 * A log line's fields as words: `id=abc exitCode=126 path="/a b"`. A string is written bare
 * unless it is empty or holds a space, a quote, `=` or a control character (then it is quoted as
 * JSON); numbers, booleans and null as they are; arrays and objects as JSON. Undefined fields are
 * left out.
 */
export function formatFields(fields: Record<string, unknown> | undefined): string {
  if (!fields) return "";
  const words = Object.entries(fields)
    .filter(([, value]) => value !== undefined)
    .map(([key, value]) => `${key}=${formatValue(value)}`);
  return words.length > 0 ? ` ${words.join(" ")}` : "";
}

function formatValue(value: unknown): string {
  if (typeof value === "string") return value !== "" && !/[\s"'=\\\p{Cc}]/u.test(value) ? value : JSON.stringify(value);
  if (value instanceof Error) return JSON.stringify(value.message);
  if (typeof value === "object" && value !== null) return JSON.stringify(value) ?? String(value);
  return String(value);
}

/**
 * The CLI's logger: warnings and errors to stderr; info too when `info` is set (a server's per-batch
 * lines) or PROCTOR_DEBUG is; debug only with PROCTOR_DEBUG. Fields follow the message as
 * `key=value` words (formatFields).
 */
export function stderrLogger(debug = Boolean(process.env.PROCTOR_DEBUG), info = false): Logger {
  const line = (level: string, message: string, fields?: Record<string, unknown>) => {
    process.stderr.write(`${level}: ${message}${formatFields(fields)}\n`);
  };
  return {
    debug: (m, f) => debug && line("debug", m, f),
    info: (m, f) => (debug || info) && line("info", m, f),
    warn: (m, f) => line("warning", m, f),
    error: (m, f) => line("error", m, f),
  };
}
