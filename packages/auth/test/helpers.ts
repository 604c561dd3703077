/** Run `fn`, return what it threw; fail the test when it throws nothing. */
export function catchError(fn: () => unknown): unknown {
  try {
    fn();
  } catch (error) {
    return error;
  }
  throw new Error("expected an error, got none");
}

/** A Logger that records lines, for asserting warnings. */
export function recordingLogger() {
  const lines: { level: string; message: string; fields?: Record<string, unknown> }[] = [];
  const log = (level: string) => (message: string, fields?: Record<string, unknown>) => lines.push({ level, message, fields });
  return { lines, logger: { debug: log("debug"), info: log("info"), warn: log("warn"), error: log("error") } };
}
