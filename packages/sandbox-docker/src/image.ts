import { access, readFile } from "node:fs/promises";
import { join } from "node:path";
import type Dockerode from "dockerode";
import { packDirectory } from "@proctor/archive";
import { ImageError, type ImageBuildUpdate, type ImageRequest } from "@proctor/sandbox";
import type { Logger } from "@proctor/schema";
import type { BuildLock } from "./build-lock";
import { BuildSlots, defaultBuildConcurrency, dockerfilePrefix, PrefixGate, startsStep } from "./build-schedule";
import { contextFilter, type ContextFilter } from "./build-context";
import { hashContext } from "./context-hash";
import { daemonMessage, statusCode } from "./docker-errors";
import type { ImageCache, ImageIndex } from "./image-cache";
import { isRegistryMiss, type ImageRegistry } from "./registry";

/** Repository of images built from task contexts; the tag is the context's content hash. */
export const BUILD_REPOSITORY = "proctor-build";
const LOG_TAIL_LINES = 30;
/** Build log lines reach `onBuild` at most this often (the first one at once). */
const BUILD_PROGRESS_EVERY_MS = 1000;

interface ProgressEvent {
  status?: string;
  id?: string;
  progress?: string;
  progressDetail?: { current?: number };
  stream?: string;
  error?: string;
  errorDetail?: { message?: string };
  aux?: unknown;
}

/** How a build context's image came to be here: found locally, pulled from the registry, or built. */
export type ImageOutcome = "reused" | "pulled" | "built";

/** How task images are shared and kept: a registry, a build lock, the use index and the disk budget. */
export interface ImageSharing {
  /** Looked in before a build, pushed to after one; null: none. */
  registry?: ImageRegistry | null;
  /** One build per image across processes (a file lock) or hosts (Redis); default: in-process only. */
  lock?: BuildLock;
  /** Where each proctor-build image's last use and tasks are recorded. */
  index?: ImageIndex;
  /** Evicts least recently used images after a build or pull puts the cache over its budget. */
  cache?: ImageCache | null;
}

/** How this process schedules its builds. */
export interface BuildScheduling {
  /** Builds running at once (others wait for a slot); default one per CPU, at most one per 2 GB of memory. */
  concurrency?: number;
  /**
   * Builds whose Dockerfiles start with the same steps before any COPY/ADD (see dockerfilePrefix)
   * run those steps once: the first runs them while the others wait, then they find them in
   * Docker's build cache. Default true.
   */
  sharePrefixes?: boolean;
}

/** `proctor-build/<hash>` of what of a context is sent (`include`) and the build args. */
async function tagOf(context: string, buildArgs: Record<string, string> | undefined, include: ContextFilter | null): Promise<string> {
  return `${BUILD_REPOSITORY}/${await hashContext(context, buildArgs, include)}`;
}

/** An image not handed to a sandbox this long after it was resolved no longer counts as pending. */
const PENDING_MS = 10 * 60_000;

/**
 * Resolves an ImageRequest to a local image: present -> use it; missing -> pull; pull impossible
 * and a build context given -> build it, tagged `proctor-build/<sha256 of the context>` so the
 * same context is built once. Concurrent requests for the same pull or build share one promise;
 * with a lock, requests in other processes (or hosts) wait for one build; with a registry, a
 * build is pulled from it when there and pushed to it after it was built.
 */
export class ImageResolver {
  private readonly inflight = new Map<string, Promise<{ image: string; outcome: ImageOutcome }>>();
  /** Build tags resolved by this process and not yet started in a sandbox, with when. */
  private readonly resolvedAt = new Map<string, number>();
  private registryDown = false;
  private readonly slots: BuildSlots;
  private readonly prefixes: PrefixGate | null;

  constructor(private readonly docker: Dockerode, private readonly logger: Logger, private readonly sharing: ImageSharing = {}, scheduling: BuildScheduling = {}) {
    this.slots = new BuildSlots(scheduling.concurrency ?? defaultBuildConcurrency());
    this.prefixes = scheduling.sharePrefixes === false ? null : new PrefixGate();
  }

  /** The registry in use, or null (none configured, or found unreachable during this run). */
  get registry(): ImageRegistry | null {
    return this.registryDown ? null : (this.sharing.registry ?? null);
  }

  /** Tags of builds running or resolved and not yet in a sandbox (the disk budget keeps them). */
  *pending(): Iterable<string> {
    for (const key of this.inflight.keys()) if (key.startsWith("build:")) yield key.slice("build:".length);
    const now = Date.now();
    for (const [tag, at] of this.resolvedAt) if (now - at < PENDING_MS) yield tag;
  }

  /** A sandbox of `image` exists now (its container keeps it from eviction). */
  started(image: string): void {
    this.resolvedAt.delete(image);
  }

  async resolve(request: ImageRequest): Promise<string> {
    return (await this.resolveWithOutcome(request)).image;
  }

  async resolveWithOutcome(request: ImageRequest): Promise<{ image: string; outcome: ImageOutcome }> {
    const progress = request.onProgress ?? (() => undefined);
    let pullFailure: string | null = null;
    if (request.image) {
      const image = request.image;
      if (await this.present(image)) return { image, outcome: "reused" };
      try {
        return await this.once(`pull:${image}`, async () => ({ image: await this.pull(image, request.signal, progress), outcome: "pulled" as const }));
      } catch (error) {
        if (request.signal?.aborted) throw new ImageError(`Pulling image "${image}" was cancelled.`, image, { cause: error });
        pullFailure = daemonMessage(error);
        if (!request.buildContext) {
          throw new ImageError(
            `Image "${image}" is not present locally and could not be pulled (${pullFailure}). Build or load it on this machine (docker build -t ${image} ...), or give the task an environment/ directory with a Dockerfile.`,
            image,
            { cause: error },
          );
        }
        progress(`pull of ${image} failed (${pullFailure}); building from ${request.buildContext}`);
      }
    }
    if (!request.buildContext) {
      throw new ImageError(
        "The task names no image and has no build context: set [environment].docker_image in task.toml or add an environment/ directory with a Dockerfile.",
        null,
      );
    }
    return this.build(request.buildContext, request, progress);
  }

  /** Whether the image exists locally. */
  async present(image: string): Promise<boolean> {
    try {
      await this.docker.getImage(image).inspect();
      return true;
    } catch (error) {
      if (statusCode(error) === 404) return false;
      throw new ImageError(`Inspecting image "${image}" failed: ${daemonMessage(error)}`, image, { cause: error });
    }
  }

  private once(key: string, start: () => Promise<{ image: string; outcome: ImageOutcome }>): Promise<{ image: string; outcome: ImageOutcome }> {
    const running = this.inflight.get(key);
    if (running) return running;
    const promise = start().finally(() => this.inflight.delete(key));
    this.inflight.set(key, promise);
    return promise;
  }

  private async pull(image: string, signal: AbortSignal | undefined, progress: (line: string) => void, authconfig?: Dockerode.AuthConfig): Promise<string> {
    this.logger.info("pulling image", { image });
    progress(`pulling ${image}`);
    const stream = (await this.docker.pull(image, { abortSignal: signal, ...(authconfig ? { authconfig } : {}) })) as NodeJS.ReadableStream;
    let failure: string | null = null;
    await readProgress(stream, (event) => {
      if (event.error) failure = event.errorDetail?.message ?? event.error;
      // Byte counters arrive many times a second; report state changes only.
      else if (event.status && event.progressDetail?.current === undefined) progress(event.id ? `${event.id}: ${event.status}` : event.status);
    });
    if (failure !== null) throw new Error(failure);
    return image;
  }

  /**
   * The tag a build context's image gets: `proctor-build/<sha256 of what of the context is sent
   * (its .dockerignore applied, less `exclude`) and build args>`.
   */
  static async buildTag(context: string, buildArgs?: Record<string, string>, exclude?: readonly string[]): Promise<string> {
    return tagOf(context, buildArgs, await contextFilter(context, exclude));
  }

  private async build(context: string, request: ImageRequest, progress: (line: string) => void): Promise<{ image: string; outcome: ImageOutcome }> {
    try {
      await access(join(context, "Dockerfile"));
    } catch (error) {
      throw new ImageError(`Build context ${context} has no Dockerfile at its root: add one, or name a pullable image in task.toml.`, request.image, { cause: error });
    }
    const include = await contextFilter(context, request.contextExclude).catch((error: unknown) => {
      throw new ImageError(`Reading ${join(context, ".dockerignore")} failed: ${(error as Error).message}`, request.image, { cause: error });
    });
    const tag = await tagOf(context, request.buildArgs, include);
    const resolved = await this.once(`build:${tag}`, async () => {
      if (await this.present(tag)) {
        progress(`using cached build ${tag}`);
        return { image: tag, outcome: "reused" as const };
      }
      // Another process (or host) building the same image: wait for it, then use (or pull) what it made.
      const release = await this.sharing.lock?.acquire(tag.slice(BUILD_REPOSITORY.length + 1), request.signal);
      try {
        if (await this.present(tag)) {
          progress(`using ${tag}, built meanwhile by another process`);
          return { image: tag, outcome: "reused" as const };
        }
        if (await this.pullShared(tag, request, progress)) return { image: tag, outcome: "pulled" as const };
        await this.scheduledBuild(context, include, tag, request, progress);
        await this.pushShared(tag, progress);
        return { image: tag, outcome: "built" as const };
      } finally {
        await release?.();
      }
    });
    this.resolvedAt.set(tag, Date.now());
    await this.sharing.index?.touch(tag, request.taskId).catch((error: unknown) => this.logger.debug("could not record an image's use", { image: tag, error: String(error) }));
    // New bytes on disk: evict over the budget in the background (the trial does not wait for it).
    if (resolved.outcome !== "reused" && this.sharing.cache) {
      void this.sharing.cache.prune().catch((error: unknown) => this.logger.warn("keeping task images under the disk budget failed", { error: daemonMessage(error) }));
    }
    return resolved;
  }

  /** Pulls `tag` from the registry and tags it locally; false on a miss or any failure (then it is built). */
  private async pullShared(tag: string, request: ImageRequest, progress: (line: string) => void): Promise<boolean> {
    const registry = this.registry;
    if (!registry) return false;
    const remote = registry.remoteRef(tag);
    const auth = await registry.auth();
    try {
      await this.pull(remote, request.signal, progress, auth ?? undefined);
    } catch (error) {
      if (request.signal?.aborted) throw new ImageError(`Pulling image "${remote}" was cancelled.`, remote, { cause: error });
      const message = daemonMessage(error);
      if (isRegistryMiss(message)) {
        progress(`${remote} is not in the registry yet; building it`);
      } else if (!(await this.reachable(registry, message))) {
        // said once by reachable()
      } else {
        // A corrupt or missing blob fails the pull (Docker checks every layer's digest): build it instead.
        this.logger.warn(`pulling ${remote} from the image registry failed (${message.split("\n")[0]}); building it here`);
      }
      return false;
    }
    await this.docker.getImage(remote).tag({ repo: tag, tag: "latest" });
    await this.untag(remote);
    this.logger.info("pulled image from the registry", { image: tag, from: remote });
    progress(`pulled ${tag} from ${registry.host}`);
    return true;
  }

  /** Pushes a local build to the registry (`proctor images build` for one it already had); false when it could not. */
  share(tag: string, progress: (line: string) => void = () => undefined): Promise<boolean> {
    return this.pushShared(tag, progress);
  }

  /** Pushes a fresh build to the registry; a failure is a warning (the image is here, the run goes on). */
  private async pushShared(tag: string, progress: (line: string) => void): Promise<boolean> {
    const registry = this.registry;
    if (!registry) return false;
    const remote = registry.remoteRef(tag);
    const colon = remote.lastIndexOf(":");
    const [repo, remoteTag] = [remote.slice(0, colon), remote.slice(colon + 1)];
    const auth = await registry.auth();
    progress(`pushing ${tag} to ${registry.host}`);
    try {
      await this.docker.getImage(tag).tag({ repo, tag: remoteTag });
      const stream = (await this.docker.getImage(repo).push({ tag: remoteTag, ...(auth ? { authconfig: auth } : {}) })) as NodeJS.ReadableStream;
      let failure: string | null = null;
      await readProgress(stream, (event) => {
        if (event.error) failure = event.errorDetail?.message ?? event.error;
      });
      if (failure !== null) throw new Error(failure);
      this.logger.info("pushed image to the registry", { image: tag, to: remote });
      return true;
    } catch (error) {
      const message = daemonMessage(error);
      if (await this.reachable(registry, message)) this.logger.warn(`pushing ${tag} to the image registry failed (${message.split("\n")[0]}); it stays on this host only`);
      return false;
    } finally {
      await this.untag(remote);
    }
  }

  /** Whether the registry still answers; the first time it does not, says so once and stops using it. */
  private async reachable(registry: ImageRegistry, failure: string): Promise<boolean> {
    const answer = await registry.check(this.docker).then(
      () => null,
      (error: unknown) => (error instanceof Error ? error.message : String(error)),
    );
    if (answer === null) return true;
    if (!this.registryDown) {
      this.registryDown = true;
      this.logger.warn(`image registry ${registry.host} is unreachable (${failure.split("\n")[0]}); building images on this host for the rest of this run`);
    }
    return false;
  }

  private async untag(ref: string): Promise<void> {
    await this.docker
      .getImage(ref)
      .remove({ noprune: true })
      .catch((error: unknown) => this.logger.debug("could not remove a registry tag", { image: ref, error: daemonMessage(error) }));
  }

  /**
   * runBuild in a build slot; a build sharing its Dockerfile's prefix with a running one waits
   * (holding no slot) until that one has committed the prefix, then finds it in the build cache.
   */
  private async scheduledBuild(context: string, include: ContextFilter | null, tag: string, request: ImageRequest, progress: (line: string) => void): Promise<void> {
    const prefix = this.prefixes === null ? null : dockerfilePrefix(await readFile(join(context, "Dockerfile"), "utf8"), { ...(request.buildArgs ? { buildArgs: request.buildArgs } : {}), network: request.buildNetwork !== false });
    const gate = this.prefixes !== null && prefix !== null ? await this.enter(this.prefixes, prefix.key, request.signal, tag) : null;
    if (gate && prefix && !gate.leader) progress(`the first ${prefix.steps} step(s) were built by another build; using them from the build cache`);
    try {
      const release = await this.slots.acquire(request.signal).catch((error: unknown) => {
        throw new ImageError(`Building ${context} was cancelled while waiting for a build slot.`, request.image, { cause: error });
      });
      try {
        const onLine = gate && prefix ? (line: string) => (startsStep(line, prefix.steps + 1) ? gate.done(true) : undefined) : undefined;
        await this.runBuild(context, include, tag, request, progress, onLine);
      } finally {
        release();
      }
      gate?.done(true);
    } finally {
      // Failed or cancelled before the prefix was committed: a waiter takes over.
      gate?.done(false);
    }
  }

  private async enter(gate: PrefixGate, key: string, signal: AbortSignal | undefined, tag: string): Promise<{ leader: boolean; done: (committed: boolean) => void }> {
    try {
      return await gate.enter(key, signal);
    } catch (error) {
      throw new ImageError(`Building ${tag} was cancelled while waiting for a build of the same Dockerfile steps.`, null, { cause: error });
    }
  }

  private async runBuild(context: string, include: ContextFilter | null, tag: string, request: ImageRequest, progress: (line: string) => void, onLine?: (line: string) => void): Promise<void> {
    this.logger.info("building image", { context, tag });
    progress(`building ${tag} from ${context}`);
    const onBuild = (update: ImageBuildUpdate) => {
      try {
        request.onBuild?.(update);
      } catch (error) {
        this.logger.warn("an image build listener threw", { tag, error: error instanceof Error ? error.message : String(error) });
      }
    };
    const startedAt = Date.now();
    let lastReport = -Infinity;
    onBuild({ status: "started", image: tag, context });
    const controller = new AbortController();
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      controller.abort();
    }, request.buildTimeoutMs);
    const onAbort = () => controller.abort();
    request.signal?.addEventListener("abort", onAbort, { once: true });
    if (request.signal?.aborted) controller.abort();
    const tail: string[] = [];
    const remember = (line: string) => {
      onLine?.(line);
      tail.push(line);
      if (tail.length > LOG_TAIL_LINES) tail.shift();
      progress(line);
      const now = Date.now();
      if (now - lastReport >= BUILD_PROGRESS_EVERY_MS) {
        lastReport = now;
        onBuild({ status: "progress", image: tag, line, elapsedMs: now - startedAt });
      }
    };
    const fail: (error: ImageError) => never = (error) => {
      onBuild({ status: "finished", image: tag, ok: false, durationMs: Date.now() - startedAt, error: error.message.split("\n")[0] ?? "" });
      throw error;
    };
    let failure: string | null = null;
    try {
      const stream = (await this.docker.buildImage(packDirectory(context, include ? { include } : {}) as unknown as NodeJS.ReadableStream, {
        t: tag,
        forcerm: true,
        labels: { "proctor.build-context": context },
        ...(request.buildArgs ? { buildargs: request.buildArgs } : {}),
        ...(request.buildNetwork === false ? { networkmode: "none" } : {}),
        abortSignal: controller.signal,
      } as Dockerode.ImageBuildOptions)) as NodeJS.ReadableStream;
      await readProgress(stream, (event) => {
        if (event.error) failure = event.errorDetail?.message ?? event.error;
        if (event.stream) for (const line of event.stream.split("\n")) if (line.trim() !== "") remember(line.trimEnd());
        if (event.status && event.progressDetail?.current === undefined) remember(event.id ? `${event.id}: ${event.status}` : event.status);
      });
    } catch (error) {
      const lastLines = tail.length > 0 ? `\nLast lines of the build log:\n${tail.join("\n")}` : "";
      if (timedOut) {
        fail(
          new ImageBuildLimitError(`Building ${context} took longer than ${request.buildTimeoutMs} ms and was cancelled; raise [environment].build_timeout_sec if the build is just slow.${lastLines}`, request.image, {
            limit: "buildTimeoutMs",
            value: request.buildTimeoutMs,
            actual: null,
            cause: error,
          }),
        );
      }
      if (request.signal?.aborted) fail(new ImageError(`Building ${context} was cancelled.`, request.image, { cause: error }));
      fail(new ImageError(`Building ${context} failed: ${daemonMessage(error)}${lastLines}`, request.image, { cause: error }));
    } finally {
      clearTimeout(timer);
      request.signal?.removeEventListener("abort", onAbort);
    }
    if (failure !== null) {
      fail(new ImageError(`Building ${context} failed: ${failure}\nLast lines of the build log:\n${tail.join("\n")}`, request.image));
    }
    const built = await this.present(tag).catch((error: unknown) => fail(error instanceof ImageError ? error : new ImageError(String(error), request.image)));
    if (!built) {
      fail(new ImageError(`Building ${context} reported success but image ${tag} is missing.\nLast lines of the build log:\n${tail.join("\n")}`, request.image));
    }
    this.logger.info("built image", { context, tag });
    onBuild({ status: "finished", image: tag, ok: true, durationMs: Date.now() - startedAt });
  }
}

/**
 * A build broke a limit: it ran longer than `buildTimeoutMs` (and was cancelled), or the image
 * it made is over `maxBytes` (buildImageWithLimits). `value` is the limit, `actual` what was
 * measured (null for a timeout). Still an ImageError, so the engine classifies it as before.
 */
export class ImageBuildLimitError extends ImageError {
  override name = "ImageBuildLimitError";
  readonly limit: "buildTimeoutMs" | "maxBytes";
  readonly value: number;
  readonly actual: number | null;
  constructor(message: string, image: string | null, options: { limit: "buildTimeoutMs" | "maxBytes"; value: number; actual: number | null; cause?: unknown }) {
    super(message, image, options.cause === undefined ? undefined : { cause: options.cause });
    this.limit = options.limit;
    this.value = options.value;
    this.actual = options.actual;
  }
}

/** Reads Docker's JSON-lines progress stream until it ends. */
function readProgress(stream: NodeJS.ReadableStream, onEvent: (event: ProgressEvent) => void): Promise<void> {
  return new Promise((resolve, reject) => {
    let buffer = "";
    let settled = false;
    const settle = (error?: unknown) => {
      if (settled) return;
      settled = true;
      if (error === undefined) resolve();
      else reject(error instanceof Error ? error : new Error(String(error)));
    };
    const handle = (line: string) => {
      if (line.trim() === "") return;
      try {
        onEvent(JSON.parse(line) as ProgressEvent);
      } catch (error) {
        settle(new Error(`unreadable progress line from the daemon: ${line.slice(0, 200)}`, { cause: error }));
      }
    };
    stream.on("data", (chunk: Buffer | string) => {
      buffer += chunk.toString();
      let newline: number;
      while ((newline = buffer.indexOf("\n")) >= 0) {
        handle(buffer.slice(0, newline));
        buffer = buffer.slice(newline + 1);
      }
    });
    stream.on("end", () => {
      handle(buffer);
      settle();
    });
    stream.on("error", (error: unknown) => settle(error));
    stream.on("close", () => settle(settled ? undefined : new Error("the daemon closed the progress stream early")));
  });
}
