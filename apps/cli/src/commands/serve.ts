import { resolve } from "node:path";
import { KeyLoadError, loadKeypair, type Keypair } from "@proctor/auth";
import type { Logger } from "@proctor/schema";
import { startServer, AUTH_MODES, type AuthMode } from "@proctor/server";
import { UsageError } from "../errors";
import { DEFAULT_DOCKER_IMAGE, openRuntime, parseRuntimeChoice } from "../runtime";

export interface ServeOptions {
  host: string;
  port: number;
  dataDir: string;
  auth: string;
  runtime: string;
  defaultImage?: string;
  maxActiveBatches: number;
  maxQueuedBatches: number;
  maxConcurrentTasks: number;
  insecure: boolean;
  hotkeysFile?: string;
  retentionDays?: number;
  allowLocalRepos: boolean;
  unsafeLocalRuntime: boolean;
  /** --isolate-verifier / --no-isolate-verifier; undefined: each task decides. */
  isolateVerifier?: boolean;
  /** --admin-hotkeys (comma-separated); undefined: $PROCTOR_ADMIN_HOTKEYS. */
  adminHotkeys?: string;
  /** --max-uploads / --max-uploads-per-key: uploads in progress at once. */
  maxUploads?: number;
  maxUploadsPerKey?: number;
  /** --allow-undigested-uploads: accept signed uploads without Content-Digest (staged, checked after). */
  allowUndigestedUploads?: boolean;
  /** --receipt-key: a file holding the sr25519 key that signs batch receipts (the secret never goes on the command line). */
  receiptKey?: string;
  logger: Logger;
}

/** `proctor serve`: the batch server until SIGINT/SIGTERM, then a graceful stop (running batches resume on the next start). */
export async function serveCommand(options: ServeOptions): Promise<number> {
  if (!(AUTH_MODES as readonly string[]).includes(options.auth)) {
    throw new UsageError(`--auth must be one of ${AUTH_MODES.join(", ")}, got "${options.auth}"`);
  }
  const runtime = await openRuntime(parseRuntimeChoice(options.runtime), options.logger);
  if (runtime.name === "local" && !options.unsafeLocalRuntime) {
    throw new UsageError(
      "proctor serve would run uploaded agent code on the local runtime: host processes with no isolation. " +
        "Start a Docker engine (tools/docker/ensure-engine.sh) and use --runtime docker, or pass --unsafe-local-runtime if every upload is trusted.",
    );
  }
  let receiptKey: Keypair | undefined;
  if (options.receiptKey !== undefined) {
    try {
      receiptKey = loadKeypair({ file: options.receiptKey, logger: options.logger });
    } catch (error) {
      // KeyLoadError names the file, never the secret.
      if (error instanceof KeyLoadError) throw new UsageError(`--receipt-key ${error.message}`, { cause: error });
      throw error;
    }
  }
  const server = await startServer({
    host: options.host,
    port: options.port,
    dataDir: resolve(options.dataDir),
    auth: options.auth as AuthMode,
    runtime,
    defaultImage: options.defaultImage ?? (runtime.name === "docker" ? DEFAULT_DOCKER_IMAGE : null),
    maxActiveBatches: options.maxActiveBatches,
    maxQueuedBatches: options.maxQueuedBatches,
    maxConcurrentTasks: options.maxConcurrentTasks,
    insecure: options.insecure,
    hotkeysFile: options.hotkeysFile,
    retentionDays: options.retentionDays ?? null,
    allowLocalRepos: options.allowLocalRepos,
    ...(options.isolateVerifier !== undefined ? { isolateVerifier: options.isolateVerifier } : {}),
    ...(options.adminHotkeys !== undefined ? { adminHotkeys: options.adminHotkeys.split(/[\s,]+/).filter((e) => e !== "") } : {}),
    ...(options.maxUploads !== undefined ? { maxConcurrentUploads: options.maxUploads } : {}),
    ...(options.maxUploadsPerKey !== undefined ? { maxConcurrentUploadsPerKey: options.maxUploadsPerKey } : {}),
    allowUndigestedUploads: options.allowUndigestedUploads ?? false,
    ...(receiptKey !== undefined ? { receiptKey } : {}),
    logger: options.logger,
  });
  if (receiptKey !== undefined) process.stderr.write(`proctor serve: signing batch receipts as ${receiptKey.address}\n`);
  process.stderr.write(`proctor serve: listening on ${server.url} (auth ${options.auth}, runtime ${runtime.name}, data ${resolve(options.dataDir)})\n`);
  await new Promise<void>((done) => {
    const stop = (name: string) => () => {
      process.stderr.write(`${name}: stopping; running batches are checkpointed and resume on the next start\n`);
      done();
    };
    process.once("SIGINT", stop("SIGINT"));
    process.once("SIGTERM", stop("SIGTERM"));
  });
  await server.close();
  return 0;
}
