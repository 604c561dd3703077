/** Libraries log through this; only apps decide where lines go. */
export interface Logger {
  debug(message: string, fields?: Record<string, unknown>): void;
  info(message: string, fields?: Record<string, unknown>): void;
  warn(message: string, fields?: Record<string, unknown>): void;
  error(message: string, fields?: Record<string, unknown>): void;
}

/** The default for libraries when the caller passes no logger. */
const ignore = (): void => undefined;
export const silentLogger: Logger = { debug: ignore, info: ignore, warn: ignore, error: ignore };
