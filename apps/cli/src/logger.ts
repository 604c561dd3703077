import type { Logger } from "@proctor/schema";

/**
 * The CLI's logger: warnings and errors to stderr; info too when `info` is set (a server's per-batch
 * lines) or PROCTOR_DEBUG is; debug only with PROCTOR_DEBUG.
 */
export function stderrLogger(debug = Boolean(process.env.PROCTOR_DEBUG), info = false): Logger {
  const line = (level: string, message: string, fields?: Record<string, unknown>) => {
    const extra = fields && Object.keys(fields).length > 0 ? ` ${JSON.stringify(fields)}` : "";
    process.stderr.write(`${level}: ${message}${extra}\n`);
  };
  return {
    debug: (m, f) => debug && line("debug", m, f),
    info: (m, f) => (debug || info) && line("info", m, f),
    warn: (m, f) => line("warning", m, f),
    error: (m, f) => line("error", m, f),
  };
}
