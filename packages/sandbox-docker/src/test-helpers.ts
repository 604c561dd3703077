import Dockerode from "dockerode";
import { CHANNEL_DIR } from "./channel";

/** Label carried by every container a test creates, so afterAll can remove them even after failures. */
export const TEST_LABEL = "proctor.test";

export interface TestContainers {
  labels: Record<string, string>;
  /** Force-removes every container carrying this suite's label; returns how many there were. */
  cleanup(): Promise<number>;
}

export function testContainers(docker: Dockerode, suite: string): TestContainers {
  const value = `sandbox-docker-${suite}-${process.pid}-${Date.now()}`;
  return {
    labels: { [TEST_LABEL]: value },
    async cleanup() {
      const leftovers = await docker.listContainers({ all: true, filters: { label: [`${TEST_LABEL}=${value}`] } });
      await Promise.all(leftovers.map((c) => docker.getContainer(c.Id).remove({ force: true, v: true }).catch((error: { statusCode?: number }) => {
        // 404: gone; 409: a removal is already in progress.
        if (error.statusCode !== 404 && error.statusCode !== 409) throw error;
      })));
      return leftovers.length;
    },
  };
}

export const BUSYBOX = "proctor/busybox:latest";

/**
 * Polls `check` until it holds or `timeoutMs` passes (checked once more at the end); returns
 * whether it held. Tests wait for a state this way, never with a fixed sleep.
 */
export async function until(check: () => Promise<boolean>, timeoutMs: number, intervalMs = 50): Promise<boolean> {
  const end = Date.now() + timeoutMs;
  while (Date.now() < end) {
    if (await check()) return true;
    await new Promise((resolve) => setTimeout(resolve, intervalMs));
  }
  return check();
}

/** Host path of a container's exec-channel directory (its bind mount at CHANNEL_DIR); throws when it has none. */
export async function channelDirOf(docker: Dockerode, id: string): Promise<string> {
  const mount = (await docker.getContainer(id).inspect()).Mounts.find((m) => m.Destination === CHANNEL_DIR);
  if (!mount) throw new Error(`container ${id} has no exec channel mount at ${CHANNEL_DIR}`);
  return mount.Source;
}
