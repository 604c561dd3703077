/** The HTTP status of a dockerode error, if it has one. */
export function statusCode(error: unknown): number | undefined {
  const code = (error as { statusCode?: unknown } | null)?.statusCode;
  return typeof code === "number" ? code : undefined;
}

/** The daemon's message for a dockerode error, else the error's own message. */
export function daemonMessage(error: unknown): string {
  const json = (error as { json?: { message?: unknown } } | null)?.json;
  if (json && typeof json.message === "string") return json.message;
  return error instanceof Error ? error.message : String(error);
}

const CONNECTION_CODES = new Set(["ECONNREFUSED", "ECONNRESET", "EPIPE", "ENOENT", "ECONNABORTED", "ETIMEDOUT"]);

/** The daemon could not be reached, or dropped the connection (it stopped or restarted). */
export function isConnectionError(error: unknown): boolean {
  const { code, syscall, message } = (error ?? {}) as NodeJS.ErrnoException;
  if (typeof code === "string" && CONNECTION_CODES.has(code) && (code !== "ENOENT" || syscall === "connect")) return true;
  return typeof message === "string" && /socket hang up|connect ECONNREFUSED/.test(message);
}
