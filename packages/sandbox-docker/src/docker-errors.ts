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
