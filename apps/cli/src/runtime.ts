import type { Logger } from "@proctor/schema";
import type { SandboxRuntime } from "@proctor/sandbox";
import { LocalRuntime } from "@proctor/sandbox";
import { DockerRuntime, ImageSettingsError, dockerAvailable, imageSettings } from "@proctor/sandbox-docker";
import { RuntimeMissingError, UsageError } from "./errors";

export type RuntimeChoice = "auto" | "docker" | "local";

export const DEFAULT_DOCKER_IMAGE = "proctor/base:bookworm";

export function parseRuntimeChoice(value: string): RuntimeChoice {
  if (value === "auto" || value === "docker" || value === "local") return value;
  throw new UsageError(`--runtime must be auto, docker or local, got "${value}"`);
}

/** --image-registry and --image-cache-gb (else PROCTOR_IMAGE_REGISTRY, PROCTOR_IMAGE_CACHE_GB). */
export interface ImageFlags {
  imageRegistry?: string | undefined;
  imageCacheGb?: string | number | undefined;
}

/**
 * A Docker runtime's image settings from flags or the environment: the registry checked once
 * (unreachable: exit 3; a bad name or refused credentials: exit 2), the disk budget parsed (exit 2).
 */
export async function dockerImageOptions(flags: ImageFlags = {}, env: NodeJS.ProcessEnv = process.env): Promise<Awaited<ReturnType<typeof imageSettings>>> {
  try {
    return await imageSettings({ registry: flags.imageRegistry, cacheGb: flags.imageCacheGb }, env);
  } catch (error) {
    if (error instanceof ImageSettingsError) throw error.kind === "unreachable" ? new RuntimeMissingError(error.message, { cause: error }) : new UsageError(error.message, { cause: error });
    throw error;
  }
}

/** auto: Docker when a daemon answers, else the local runtime (said on stderr, never silently). */
export async function openRuntime(choice: RuntimeChoice, logger: Logger, images: ImageFlags = {}): Promise<SandboxRuntime> {
  if (choice === "local") return new LocalRuntime({ logger });
  const up = await dockerAvailable();
  if (up) return new DockerRuntime({ logger, ...(await dockerImageOptions(images)) });
  if (choice === "docker") {
    throw new RuntimeMissingError(
      "--runtime docker: no Docker engine answers on DOCKER_HOST or /var/run/docker.sock. Start one (tools/docker/ensure-engine.sh) or use --runtime local.",
    );
  }
  process.stderr.write("runtime: no Docker engine answers; using the local runtime (host processes)\n");
  return new LocalRuntime({ logger });
}
