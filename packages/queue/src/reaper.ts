import type { Logger } from "@proctor/schema";
import type { Redis } from "ioredis";
import { isAlive } from "./registry";

/**
 * Labels on every container a queue worker starts: the worker's id, its reap scope (the Docker
 * daemon's ID, else the host name) and its queue's id (see queueId).
 */
export const WORKER_LABELS = { worker: "proctor.worker", host: "proctor.worker.host", queue: "proctor.worker.queue" } as const;

/** The part of a Docker client (dockerode) the reaper uses. */
export interface ContainerApi {
  listContainers(options: { all: boolean; filters: { label: string[] } }): Promise<{ Id: string; Labels: Record<string, string> }[]>;
  getContainer(id: string): { remove(options: { force: boolean; v: boolean }): Promise<unknown> };
  /** The daemon's `docker info`: workers on one daemon (in containers or not) reap each other's containers by its ID. */
  info?(): Promise<{ ID?: string }>;
}

/**
 * Removes containers on this Docker host started by workers of this queue (`queue`, see queueId)
 * and reap scope (`host`) whose heartbeat is gone (killed with -9, machine lost its network, ...).
 * Another queue's containers are never touched: their heartbeats live in another Redis or prefix.
 * Returns how many were removed.
 */
export async function reapDeadWorkers(api: ContainerApi, redis: Redis, options: { prefix: string; host: string; queue: string; logger: Logger }): Promise<number> {
  const containers = await api.listContainers({
    all: true,
    filters: { label: [WORKER_LABELS.worker, `${WORKER_LABELS.host}=${options.host}`, `${WORKER_LABELS.queue}=${options.queue}`] },
  });
  const verdict = new Map<string, boolean>();
  let removed = 0;
  for (const info of containers) {
    const id = info.Labels[WORKER_LABELS.worker];
    if (!id) continue;
    if (!verdict.has(id)) verdict.set(id, await isAlive(redis, options.prefix, id));
    if (verdict.get(id)) continue;
    try {
      await api.getContainer(info.Id).remove({ force: true, v: true });
      removed++;
      options.logger.info("reaped a container of a dead worker", { container: info.Id, worker: id });
    } catch (error) {
      if ((error as { statusCode?: number }).statusCode !== 404) options.logger.warn("reaping a dead worker's container failed", { container: info.Id, worker: id, error: (error as Error).message });
    }
  }
  return removed;
}
