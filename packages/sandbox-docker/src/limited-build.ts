import { lstat, readdir } from "node:fs/promises";
import { join } from "node:path";
import type { Logger } from "@proctor/schema";
import { ImageBuildLimitError } from "./image";
import type { DockerRuntime } from "./runtime";

/** Limits of a build whose Dockerfile is not trusted (e.g. an uploaded agent image). */
export interface ImageBuildLimits {
  /** A build running longer is cancelled (ImageBuildLimitError, limit "buildTimeoutMs"). */
  buildTimeoutMs: number;
  /** A built image larger than this (as `docker images` shows its size) is removed (limit "maxBytes"). */
  maxBytes: number;
  /** RUN steps reach the network only when true. */
  buildNetwork: boolean;
}

/** Bytes a build context sends: its files' sizes (symlinks counted as links, never followed), to check against maxBytes before building. */
export async function buildContextBytes(dir: string): Promise<number> {
  let total = 0;
  for (const entry of await readdir(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) total += await buildContextBytes(path);
    else total += (await lstat(path)).size;
  }
  return total;
}

const MB = 1024 * 1024;
/** How long a refused build's leftovers may take to disappear before their images are removed anyway. */
const CONTAINER_GONE_MS = 60_000;

/**
 * Build `buildContext` with the runtime's builder (resolveImage: content-hash tag, cached) under
 * `limits`: no network for RUN steps unless allowed, cancelled after buildTimeoutMs (the
 * builder's own timer, the only one), and an image over maxBytes is removed. A build this call
 * started that fails, times out or is too big leaves nothing behind: its RUN containers, its tag
 * and its untagged step images are removed (never a tagged image such as the FROM one).
 * Returns the image tag; throws ImageBuildLimitError for a broken limit, else the builder's
 * ImageError.
 */
export async function buildImageWithLimits(
  runtime: DockerRuntime,
  request: { buildContext: string; buildArgs?: Record<string, string> },
  limits: ImageBuildLimits,
  options: { signal?: AbortSignal; logger: Logger },
): Promise<string> {
  const { docker } = runtime;
  // Set once this call (not a concurrent one with the same context) started the build.
  let builtTag: string | null = null;
  // Images the build committed step by step and the containers its RUN steps ran in (the classic
  // builder logs " ---> Running in <container>" and " ---> <image>" for each step).
  const steps: string[] = [];
  const containers: string[] = [];
  const remove = async (image: string) => {
    await docker
      .getImage(image)
      .remove()
      .catch((error: unknown) => {
        // 404: already gone (a cancelled build leaves no tag); 409: another image or container still uses it.
        const status = (error as { statusCode?: number }).statusCode;
        if (status !== 404 && status !== 409) options.logger.warn("could not remove a refused image", { image, error: String(error) });
      });
  };
  const removeBuilt = async () => {
    if (builtTag === null) return;
    // A cancelled build's RUN container may still be going away (the daemon removes it too); while
    // it exists it holds its parent image, so wait until it is gone.
    for (const id of containers) {
      const container = docker.getContainer(id);
      await container.remove({ force: true }).catch(() => undefined);
      const deadline = Date.now() + CONTAINER_GONE_MS;
      while (Date.now() < deadline && (await container.inspect().then(() => true, () => false))) await new Promise((r) => setTimeout(r, 200));
    }
    await remove(builtTag);
    for (const id of steps.reverse()) {
      const tags = await docker
        .getImage(id)
        .inspect()
        .then((info) => info.RepoTags ?? [], () => null);
      if (tags !== null && tags.length === 0) await remove(id);
    }
  };
  let tag: string;
  try {
    tag = await runtime.resolveImage({
      image: null,
      buildContext: request.buildContext,
      ...(request.buildArgs ? { buildArgs: request.buildArgs } : {}),
      buildNetwork: limits.buildNetwork,
      buildTimeoutMs: limits.buildTimeoutMs,
      ...(options.signal ? { signal: options.signal } : {}),
      onProgress: (line) => {
        const step = /^ ---> ([0-9a-f]{12,64})$/.exec(line);
        if (step?.[1]) steps.push(step[1]);
        const running = /^ ---> Running in ([0-9a-f]{12,64})$/.exec(line);
        if (running?.[1]) containers.push(running[1]);
      },
      onBuild: (update) => {
        if (update.status === "started") builtTag = update.image;
      },
    });
  } catch (error) {
    await removeBuilt();
    throw error;
  }
  const { Size: bytes } = await docker.getImage(tag).inspect();
  if (bytes > limits.maxBytes) {
    await removeBuilt();
    throw new ImageBuildLimitError(`the built image ${tag} is ${(bytes / MB).toFixed(1)} MB, over the limit of ${limits.maxBytes / MB} MB; it was removed`, tag, {
      limit: "maxBytes",
      value: limits.maxBytes,
      actual: bytes,
    });
  }
  options.logger.info("image built under limits", { image: tag, bytes });
  return tag;
}
