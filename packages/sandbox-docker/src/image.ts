import { access } from "node:fs/promises";
import { join } from "node:path";
import type Dockerode from "dockerode";
import { packDirectory } from "@proctor/archive";
import { ImageError, type ImageBuildUpdate, type ImageRequest } from "@proctor/sandbox";
import type { Logger } from "@proctor/schema";
import { hashContext } from "./context-hash";
import { daemonMessage, statusCode } from "./docker-errors";

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

/**
 * Resolves an ImageRequest to a local image: present -> use it; missing -> pull; pull impossible
 * and a build context given -> build it, tagged `proctor-build/<sha256 of the context>` so the
 * same context is built once. Concurrent requests for the same pull or build share one promise.
 */
export class ImageResolver {
  private readonly inflight = new Map<string, Promise<string>>();

  constructor(private readonly docker: Dockerode, private readonly logger: Logger) {}

  async resolve(request: ImageRequest): Promise<string> {
    const progress = request.onProgress ?? (() => undefined);
    let pullFailure: string | null = null;
    if (request.image) {
      const image = request.image;
      if (await this.present(image)) return image;
      try {
        return await this.once(`pull:${image}`, () => this.pull(image, request.signal, progress));
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

  private once(key: string, start: () => Promise<string>): Promise<string> {
    const running = this.inflight.get(key);
    if (running) return running;
    const promise = start().finally(() => this.inflight.delete(key));
    this.inflight.set(key, promise);
    return promise;
  }

  private async pull(image: string, signal: AbortSignal | undefined, progress: (line: string) => void): Promise<string> {
    this.logger.info("pulling image", { image });
    progress(`pulling ${image}`);
    const stream = (await this.docker.pull(image, { abortSignal: signal })) as NodeJS.ReadableStream;
    let failure: string | null = null;
    await readProgress(stream, (event) => {
      if (event.error) failure = event.errorDetail?.message ?? event.error;
      // Byte counters arrive many times a second; report state changes only.
      else if (event.status && event.progressDetail?.current === undefined) progress(event.id ? `${event.id}: ${event.status}` : event.status);
    });
    if (failure !== null) throw new Error(failure);
    return image;
  }

  private async build(context: string, request: ImageRequest, progress: (line: string) => void): Promise<string> {
    try {
      await access(join(context, "Dockerfile"));
    } catch (error) {
      throw new ImageError(`Build context ${context} has no Dockerfile at its root: add one, or name a pullable image in task.toml.`, request.image, { cause: error });
    }
    const tag = `${BUILD_REPOSITORY}/${await hashContext(context, request.buildArgs)}`;
    return this.once(`build:${tag}`, async () => {
      if (await this.present(tag)) {
        progress(`using cached build ${tag}`);
        return tag;
      }
      return this.runBuild(context, tag, request, progress);
    });
  }

  private async runBuild(context: string, tag: string, request: ImageRequest, progress: (line: string) => void): Promise<string> {
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
      const stream = (await this.docker.buildImage(packDirectory(context) as unknown as NodeJS.ReadableStream, {
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
    return tag;
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
