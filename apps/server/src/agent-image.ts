import { readImageAgent } from "@proctor/agents";
import type { ImageRequest, SandboxRuntime } from "@proctor/sandbox";
import { DockerRuntime, ImageBuildLimitError, buildImageWithLimits, type ImageBuildLimits } from "@proctor/sandbox-docker";
import type { Logger } from "@proctor/schema";

/** The directory of an upload that holds an agent image (Dockerfile + agent.toml, the CLI's `image:<dir>` format). */
export const AGENT_IMAGE_DIR = "agent_image";

/** What the server allows an uploaded agent image (`proctor serve --agent-image-*`, in that order). */
export type AgentImageLimits = ImageBuildLimits;

export const DEFAULT_AGENT_IMAGE_LIMITS: AgentImageLimits = Object.freeze({
  buildTimeoutMs: 600_000,
  maxBytes: 4096 * 1024 * 1024,
  buildNetwork: false,
});

const MB = 1024 * 1024;

/** A batch's agent image broke a server limit or did not build; its message is the batch's `error`. */
class AgentImageError extends Error {
  override name = "AgentImageError";
}

/**
 * Build the uploaded agent image with the same builder the CLI's `--agent image:<dir>` uses
 * (MLE-bench build args from agent.toml only) under the server's limits (@proctor/sandbox-docker
 * buildImageWithLimits). Returns the image tag; throws AgentImageError naming the broken limit,
 * its value and the flag that raises it. Messages name `agent_image/`, never server paths.
 */
export async function buildAgentImage(
  runtime: DockerRuntime,
  dir: string,
  limits: AgentImageLimits,
  options: { signal?: AbortSignal; logger: Logger },
): Promise<string> {
  const config = readImageAgent(dir);
  const shown = (text: string) => text.split(`${dir}/`).join(`${AGENT_IMAGE_DIR}/`).split(dir).join(`${AGENT_IMAGE_DIR}/`);
  try {
    const tag = await buildImageWithLimits(runtime, { buildContext: config.image.buildContext, buildArgs: config.image.buildArgs }, limits, options);
    options.logger.info("agent image ready", { image: tag });
    return tag;
  } catch (error) {
    if (error instanceof ImageBuildLimitError && error.limit === "buildTimeoutMs") {
      const seconds = Math.round(error.value / 1000);
      throw new AgentImageError(
        `${AGENT_IMAGE_DIR}/: the image build ran longer than ${seconds} s, this server's limit (--agent-image-build-timeout ${seconds}) and was cancelled; make the build faster or ask the operator to raise the limit`,
        { cause: error },
      );
    }
    if (error instanceof ImageBuildLimitError && error.limit === "maxBytes") {
      throw new AgentImageError(
        `${AGENT_IMAGE_DIR}/: the built image is ${((error.actual ?? 0) / MB).toFixed(1)} MB, over this server's limit of ${error.value / MB} MB (--agent-image-max-mb ${error.value / MB}); it was removed. Make the image smaller or ask the operator to raise the limit`,
        { cause: error },
      );
    }
    throw new AgentImageError(`${AGENT_IMAGE_DIR}/: ${shown(error instanceof Error ? error.message : String(error))}`, { cause: error });
  }
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
