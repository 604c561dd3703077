import { stat } from "node:fs/promises";
import { startViewer } from "@proctor/viewer";
import type { Logger } from "@proctor/schema";
import { UsageError } from "../errors";

export interface ViewOptions {
  /** Run dirs or dirs of run dirs (default: runs). */
  paths: string[];
  host: string;
  port: number;
  logger: Logger;
  /** Resolves when the viewer should stop (default: SIGINT/SIGTERM). */
  until?: Promise<void>;
}

/** `proctor view [RUNS_DIR | RUN_DIR...]`: serve the web viewer until interrupted. */
export async function viewCommand(options: ViewOptions): Promise<number> {
  if (!Number.isInteger(options.port) || options.port < 0 || options.port > 65535) throw new UsageError(`--port must be a port number, got "${options.port}"`);
  const paths = options.paths.length > 0 ? options.paths : ["runs"];
  for (const path of paths) {
    const info = await stat(path).catch(() => null);
    if (info?.isDirectory()) continue;
    const what = info === null ? "no such directory" : "not a directory";
    throw new UsageError(
      options.paths.length > 0
        ? `${path}: ${what}; give a runs root (proctor run writes runs/<run-id>/) or run directories`
        : `runs: ${what} here; run proctor view where your runs/ directory is, or name it: proctor view <runs-root | run-dir>`,
    );
  }
  const viewer = await startViewer({ paths, host: options.host, port: options.port, logger: options.logger }).catch((error: unknown) => {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === "EADDRINUSE" || code === "EACCES" || code === "EADDRNOTAVAIL") throw new UsageError(`cannot listen on ${options.host}:${options.port} (${code}); pick another --port or --host`, { cause: error });
    throw error;
  });
  process.stderr.write(`proctor: viewer at ${viewer.url} (Ctrl-C to stop)\n`);
  await (options.until ??
    new Promise<void>((done) => {
      process.once("SIGINT", () => done());
      process.once("SIGTERM", () => done());
    }));
  await viewer.close();
  return 0;
}
