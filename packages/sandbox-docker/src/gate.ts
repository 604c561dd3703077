import Dockerode from "dockerode";
import { RuntimeUnavailableError } from "@proctor/sandbox";

/** Whether a Docker daemon answers a ping within `timeoutMs` (default: DOCKER_HOST or the local socket). */
export async function dockerAvailable(docker: Dockerode = new Dockerode(), timeoutMs = 3000): Promise<boolean> {
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(), timeoutMs);
  try {
    // dockerode's ping takes { abortSignal } though its typings omit the options argument.
    const ping = docker.ping.bind(docker) as unknown as (options: { abortSignal: AbortSignal }) => Promise<unknown>;
    await ping({ abortSignal: controller.signal });
    return true;
  } catch {
    return false;
  } finally {
    clearTimeout(timer);
  }
}

/** The daemon's id (`docker info` ID): workers on the same daemon share its images. */
export async function dockerDaemonId(docker: Dockerode = new Dockerode()): Promise<string> {
  const info = (await docker.info()) as { ID?: string; Name?: string };
  return (info.ID || info.Name || "docker").replace(/[^A-Za-z0-9]/g, "");
}

let noticeShown = false;

/**
 * Decides whether a test file's Docker tests run: true when a daemon answers. Without one it
 * throws RuntimeUnavailableError when CI=true (CI must not pass by skipping), and otherwise
 * writes one notice to stderr and returns false. Use it with vitest's top-level await:
 *
 * ```ts
 * describe.skipIf(!(await dockerTestGate()))("docker", () => { ... });
 * ```
 */
export async function dockerTestGate(docker?: Dockerode): Promise<boolean> {
  // A generous ping timeout: on a loaded machine a live daemon can take seconds to answer, and a
  // slow answer must not turn into a skip (or a CI failure). No daemon at all fails at once.
  if (await dockerAvailable(docker, 15_000)) return true;
  const where = process.env.DOCKER_HOST ?? "/var/run/docker.sock";
  if (process.env.CI === "true") {
    throw new RuntimeUnavailableError(`Docker tests need a daemon, and none answers at ${where} (CI=true, so they fail instead of skipping). Start Docker or set DOCKER_HOST.`);
  }
  if (!noticeShown) {
    noticeShown = true;
    process.stderr.write(`\n[proctor] NOTICE: no Docker daemon answers at ${where}; Docker tests are SKIPPED. Start Docker (or set DOCKER_HOST) to run them.\n\n`);
  }
  return false;
}
