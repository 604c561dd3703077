import type { Logger } from "@proctor/schema";
import type { SandboxRuntime } from "@proctor/sandbox";
import { LocalRuntime } from "@proctor/sandbox";
import { DockerRuntime, dockerAvailable } from "@proctor/sandbox-docker";
import { RuntimeMissingError, UsageError } from "./errors";

export type RuntimeChoice = "auto" | "docker" | "local";

export const DEFAULT_DOCKER_IMAGE = "proctor/base:bookworm";

export function parseRuntimeChoice(value: string): RuntimeChoice {
  if (value === "auto" || value === "docker" || value === "local") return value;
  throw new UsageError(`--runtime must be auto, docker or local, got "${value}"`);
}

/** auto: Docker when a daemon answers, else the local runtime (said on stderr, never silently). */
export async function openRuntime(choice: RuntimeChoice, logger: Logger): Promise<SandboxRuntime> {
  if (choice === "local") return new LocalRuntime({ logger });
  const up = await dockerAvailable();
  if (up) return new DockerRuntime({ logger });
  if (choice === "docker") {
    throw new RuntimeMissingError(
      "--runtime docker: no Docker engine answers on DOCKER_HOST or /var/run/docker.sock. Start one (tools/docker/ensure-engine.sh) or use --runtime local.",
    );
  }
  process.stderr.write("runtime: no Docker engine answers; using the local runtime (host processes)\n");
  return new LocalRuntime({ logger });
}
