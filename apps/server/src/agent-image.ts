import { lstat, readdir } from "node:fs/promises";
import { join } from "node:path";
import { readImageAgent } from "@proctor/agents";
import type { ImageRequest, SandboxRuntime } from "@proctor/sandbox";
import { DockerRuntime } from "@proctor/sandbox-docker";
import type { Logger } from "@proctor/schema";

/** The directory of an upload that holds an agent image (Dockerfile + agent.toml, the CLI's `image:<dir>` format). */
export const AGENT_IMAGE_DIR = "agent_image";

/** What the server allows an uploaded agent image (`proctor serve --agent-image-*`). */
export interface AgentImageLimits {
  /** A build running longer is cancelled and the batch fails (--agent-image-build-timeout, seconds). */
  buildTimeoutMs: number;
  /** Largest built image (as `docker images` shows its size) and largest build context (--agent-image-max-mb). */
  maxBytes: number;
  /** RUN steps reach the network only when true (--agent-image-build-network); default false. */
  buildNetwork: boolean;
}

export const DEFAULT_AGENT_IMAGE_LIMITS: AgentImageLimits = Object.freeze({
  buildTimeoutMs: 600_000,
  maxBytes: 4096 * 1024 * 1024,
  buildNetwork: false,
});

const MB = 1024 * 1024;
/** How long a refused build's leftovers may take to disappear before their images are removed anyway. */
const CONTAINER_GONE_MS = 60_000;

/** A batch's agent image broke a server limit or did not build; its message is the batch's `error`. */
class AgentImageError extends Error {
  override name = "AgentImageError";
}

/** Total bytes of the regular files under `dir` (symlinks counted as links, never followed). */
export async function treeBytes(dir: string): Promise<number> {
  let total = 0;
  for (const entry of await readdir(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) total += await treeBytes(path);
    else total += (await lstat(path)).size;
  }
  return total;
}

/**
 * Build the uploaded agent image with the same builder the CLI's `--agent image:<dir>` uses (the
 * runtime's resolveImage: content-hash tag, MLE-bench build args from agent.toml only), under the
 * server's limits: no network for RUN steps unless allowed, cancelled after buildTimeoutMs, and an
 * image over maxBytes is removed. Returns the image tag; throws AgentImageError naming the limit,
 * its value and the flag that raises it. Error messages name `agent_image/`, never server paths.
 */
export async function buildAgentImage(
  runtime: DockerRuntime,
  dir: string,
  limits: AgentImageLimits,
  options: { signal?: AbortSignal; logger: Logger },
): Promise<string> {
  const config = readImageAgent(dir);
  const shown = (text: string) => text.split(`${dir}/`).join(`${AGENT_IMAGE_DIR}/`).split(dir).join(`${AGENT_IMAGE_DIR}/`);
  const seconds = Math.round(limits.buildTimeoutMs / 1000);
  const limitTimer = new AbortController();
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    limitTimer.abort();
  }, limits.buildTimeoutMs);
  const signal = options.signal ? AbortSignal.any([options.signal, limitTimer.signal]) : limitTimer.signal;
  // Set once this call (not a concurrent batch with the same context) started the build.
  let builtTag: string | null = null;
  // Images the build committed step by step and the containers its RUN steps ran in (the classic
  // builder logs " ---> Running in <container>" and " ---> <image>" for each step).
  const steps: string[] = [];
  const containers: string[] = [];
  const remove = async (image: string) => {
    await runtime.docker
      .getImage(image)
      .remove()
      .catch((error: unknown) => {
        // 404: already gone (a cancelled build leaves no tag); 409: another image or container still uses it.
        const status = (error as { statusCode?: number }).statusCode;
        if (status !== 404 && status !== 409) options.logger.warn("could not remove a refused agent image", { image, error: String(error) });
      });
  };
  const removeBuilt = async () => {
    if (builtTag === null) return;
    // A cancelled build's RUN container may still be going away (the daemon removes it too); while
    // it exists it holds its parent image, so wait until it is gone.
    for (const id of containers) {
      const container = runtime.docker.getContainer(id);
      await container.remove({ force: true }).catch(() => undefined);
      const deadline = Date.now() + CONTAINER_GONE_MS;
      while (Date.now() < deadline && (await container.inspect().then(() => true, () => false))) await new Promise((r) => setTimeout(r, 200));
    }
    await remove(builtTag);
    // A failed or cancelled build leaves its finished steps as untagged images: remove those
    // (newest first), never a tagged one such as the FROM image.
    for (const id of steps.reverse()) {
      const tags = await runtime.docker
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
      buildContext: config.image.buildContext,
      buildArgs: config.image.buildArgs,
      buildNetwork: limits.buildNetwork,
      // Our timer cancels first, so the error below can name the server's flag.
      buildTimeoutMs: limits.buildTimeoutMs + 60_000,
      signal,
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
    if (timedOut) {
      throw new AgentImageError(
        `${AGENT_IMAGE_DIR}/: the image build ran longer than ${seconds} s, this server's limit (--agent-image-build-timeout ${seconds}) and was cancelled; make the build faster or ask the operator to raise the limit`,
        { cause: error },
      );
    }
    throw new AgentImageError(`${AGENT_IMAGE_DIR}/: ${shown(error instanceof Error ? error.message : String(error))}`, { cause: error });
  } finally {
    clearTimeout(timer);
  }
  const { Size: bytes } = await runtime.docker.getImage(tag).inspect();
  if (bytes > limits.maxBytes) {
    await removeBuilt();
    throw new AgentImageError(
      `${AGENT_IMAGE_DIR}/: the built image is ${(bytes / MB).toFixed(1)} MB, over this server's limit of ${limits.maxBytes / MB} MB (--agent-image-max-mb ${limits.maxBytes / MB}); it was removed. Make the image smaller or ask the operator to raise the limit`,
    );
  }
  options.logger.info("agent image ready", { image: tag, bytes });
  return tag;
}

/**
 * The runtime a batch with a server-built agent image runs on: the agent image's context
 * resolves to the image built under the limits (never built again here, with no limits), and
 * every other build context is refused (the server builds nothing else an upload brings).
 */
export function agentImageRuntime(runtime: DockerRuntime, contextDir: string, tag: string): SandboxRuntime {
  const resolveImage = async (request: ImageRequest): Promise<string> => {
    if (request.buildContext === contextDir) {
      const present = await runtime.docker
        .getImage(tag)
        .inspect()
        .then(() => true, () => false);
      if (!present) throw new AgentImageError(`${AGENT_IMAGE_DIR}/: the image built for this batch (${tag}) is gone from the Docker daemon; submit the batch again`);
      return tag;
    }
    if (request.buildContext !== null) throw new AgentImageError(`this server builds no image an upload brings but ${AGENT_IMAGE_DIR}/; a task needs one`);
    return runtime.resolveImage(request);
  };
  return {
    name: runtime.name,
    capabilities: runtime.capabilities,
    resolveImage,
    create: (options) => runtime.create(options),
    reap: () => runtime.reap(),
    checkContainerSettings: (settings) => runtime.checkContainerSettings(settings),
    available: () => runtime.available(),
    drain: () => runtime.drain(),
  };
}

/** The Docker runtime a server builds agent images on, or null (the local runtime, workers). */
export function dockerRuntimeOf(runtime: SandboxRuntime): DockerRuntime | null {
  return runtime instanceof DockerRuntime ? runtime : null;
}
