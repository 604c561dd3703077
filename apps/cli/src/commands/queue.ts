import { join, resolve } from "node:path";
import type { TrialDispatch } from "@proctor/engine";
import { DirBundleStore, QueueDispatcher, QueueUnreachableError, QueueUrlError, checkQueueReachable, parseQueueUrl, remoteRuntime, startBundleServer, type BundleServer } from "@proctor/queue";
import { LOCAL_CAPABILITIES, type SandboxRuntime } from "@proctor/sandbox";
import { DockerRuntime } from "@proctor/sandbox-docker";
import type { Logger } from "@proctor/schema";
import { RuntimeMissingError, UsageError } from "../errors";
import type { RuntimeChoice } from "../runtime";

export interface QueuedRun {
  /** Names the runtime workers must use; creates nothing here. */
  runtime: SandboxRuntime;
  dispatch: TrialDispatch;
  close(): Promise<void>;
}

/** The runtime workers must use: auto means Docker on the workers; the local runtime must be asked for by name. */
export function queuedRuntime(choice: RuntimeChoice, logger: Logger): SandboxRuntime {
  return choice === "local" ? remoteRuntime("local", LOCAL_CAPABILITIES) : remoteRuntime("docker", new DockerRuntime({ logger, watchdog: false }).capabilities);
}

/** --queue's URL checked and Redis asked once before anything is queued: a bad URL exits 2, no answer exits 3. */
export async function ensureQueue(url: string): Promise<void> {
  try {
    await checkQueueReachable(url);
  } catch (error) {
    if (error instanceof QueueUrlError) throw new UsageError(error.message, { cause: error });
    if (error instanceof QueueUnreachableError) throw new RuntimeMissingError(error.message, { cause: error });
    throw error;
  }
}

/**
 * `proctor run --queue URL`: trials go to workers through Redis. Bundles are served to them over
 * HTTP from `<out>/.bundles` (on `bundlesHost`, default every interface, as this host's address),
 * or, with `--bundles-dir`, written to a directory every worker sees at the same path.
 */
export async function openQueuedRun(options: { url: string; bundlesDir?: string; bundlesHost?: string; out: string; runtime: RuntimeChoice; logger: Logger; err: NodeJS.WritableStream }): Promise<QueuedRun> {
  try {
    parseQueueUrl(options.url);
  } catch (error) {
    if (error instanceof QueueUrlError) throw new UsageError(error.message, { cause: error });
    throw error;
  }
  if (options.bundlesDir !== undefined && options.bundlesHost !== undefined) throw new UsageError("--bundles-dir and --bundles-host: give one (a shared directory, or bundles served over HTTP)");
  const runtime = queuedRuntime(options.runtime, options.logger);
  const store = new DirBundleStore(resolve(options.bundlesDir ?? join(options.out, ".bundles")));
  const served = options.bundlesDir === undefined ? await serveBundles(store, options.bundlesHost) : null;
  const dispatcher = new QueueDispatcher({
    url: options.url,
    bundles: { store, source: served?.source ?? { kind: "dir", dir: store.dir } },
    logger: options.logger,
    onWaiting: (notice) =>
      options.err.write(
        `waiting for workers: ${notice.queued} trial(s) queued on ${notice.queue}, no worker alive for ${Math.round(notice.waitingMs / 1000)} s (start one: proctor worker --queue ${notice.queue} --runtime ${runtime.name})\n`,
      ),
  });
  options.err.write(`queue: trials go to workers on ${dispatcher.target.display} (runtime ${runtime.name}, bundles ${served ? `served at ${served.source.baseUrl}` : `in ${store.dir}`})\n`);
  return {
    runtime,
    dispatch: dispatcher.dispatch,
    close: async () => {
      await dispatcher.close();
      await served?.close();
    },
  };
}

async function serveBundles(store: DirBundleStore, host: string | undefined): Promise<BundleServer> {
  try {
    return await startBundleServer(store, host === undefined ? {} : { host });
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    throw new UsageError(`--bundles-host ${host ?? "0.0.0.0"}: cannot serve the task bundles there (${code ?? String(error)}); name an address of this host the workers reach, or share a directory with --bundles-dir`, { cause: error });
  }
}
