import { join, resolve } from "node:path";
import type { TrialDispatch } from "@proctor/engine";
import { DirBundleStore, QueueDispatcher, QueueUnreachableError, QueueUrlError, checkQueueReachable, parseQueueUrl, remoteRuntime } from "@proctor/queue";
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
 * `proctor run --queue URL`: trials go to workers through Redis; bundles go to `--bundles-dir`
 * (default `<out>/.bundles`), which every worker must see at the same path.
 */
export function openQueuedRun(options: { url: string; bundlesDir?: string; out: string; runtime: RuntimeChoice; logger: Logger; err: NodeJS.WritableStream }): QueuedRun {
  try {
    parseQueueUrl(options.url);
  } catch (error) {
    if (error instanceof QueueUrlError) throw new UsageError(error.message, { cause: error });
    throw error;
  }
  const runtime = queuedRuntime(options.runtime, options.logger);
  const store = new DirBundleStore(resolve(options.bundlesDir ?? join(options.out, ".bundles")));
  const dispatcher = new QueueDispatcher({
    url: options.url,
    bundles: { store, source: { kind: "dir", dir: store.dir } },
    logger: options.logger,
    onWaiting: (notice) =>
      options.err.write(
        `waiting for workers: ${notice.queued} trial(s) queued on ${notice.queue}, no worker alive for ${Math.round(notice.waitingMs / 1000)} s (start one: proctor worker --queue ${notice.queue} --runtime ${runtime.name})\n`,
      ),
  });
  options.err.write(`queue: trials go to workers on ${dispatcher.target.display} (runtime ${runtime.name}, bundles in ${store.dir})\n`);
  return { runtime, dispatch: dispatcher.dispatch, close: () => dispatcher.close() };
}
