import { randomUUID } from "node:crypto";
import type { ChainableCommander, Redis } from "ioredis";
import { keys } from "./protocol";

/** A live worker as `GET /v1/workers` and the metrics show it. */
export interface WorkerInfo {
  id: string;
  name: string;
  host: string;
  pid: number;
  runtime: string;
  /** Trials it runs at once. */
  capacity: number;
  /** Trial ids it runs now. */
  running: string[];
  /** Trials it finished since it started. */
  finished: number;
  startedAt: string;
  heartbeatAt: string;
  draining: boolean;
}

/** Writes a worker's heartbeat: the key expires after `ttlMs`, so a dead worker drops out on its own. */
export async function beat(redis: Redis, prefix: string, info: WorkerInfo, ttlMs: number): Promise<void> {
  await queueBeat(redis.multi(), prefix, info, ttlMs).exec();
}

/** Adds a heartbeat's commands to a pipeline (a trial's result and the count that includes it go out together). */
export function queueBeat(pipeline: ChainableCommander, prefix: string, info: WorkerInfo, ttlMs: number): ChainableCommander {
  return pipeline.set(keys.worker(prefix, info.id), JSON.stringify(info), "PX", ttlMs).zadd(keys.workers(prefix), Date.parse(info.heartbeatAt), info.id);
}

export async function forget(redis: Redis, prefix: string, id: string): Promise<void> {
  await redis.multi().del(keys.worker(prefix, id)).zrem(keys.workers(prefix), id).exec();
}

/** Workers whose heartbeat has not expired, by name; ids whose heartbeat expired are pruned. */
export async function listWorkers(redis: Redis, prefix: string): Promise<WorkerInfo[]> {
  const ids = await redis.zrange(keys.workers(prefix), 0, -1);
  if (ids.length === 0) return [];
  const values = await redis.mget(ids.map((id) => keys.worker(prefix, id)));
  const live: WorkerInfo[] = [];
  const dead: string[] = [];
  values.forEach((value, i) => {
    if (value === null) dead.push(ids[i] as string);
    else live.push(JSON.parse(value) as WorkerInfo);
  });
  if (dead.length > 0) await redis.zrem(keys.workers(prefix), ...dead);
  return live.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
}

/** Whether a worker's heartbeat is still alive. */
export async function isAlive(redis: Redis, prefix: string, id: string): Promise<boolean> {
  return (await redis.exists(keys.worker(prefix, id))) === 1;
}

/**
 * The queue's id (Redis server + prefix), made once by whichever worker asks first. Queues that
 * share a Docker daemon (two deployments, or a test's private Redis) tell their containers apart
 * by it: a heartbeat is looked up only in the queue that started the container.
 */
export async function queueId(redis: Redis, prefix: string): Promise<string> {
  await redis.set(keys.queueId(prefix), randomUUID(), "NX");
  const id = await redis.get(keys.queueId(prefix));
  if (!id) throw new Error(`the queue's id (${keys.queueId(prefix)}) vanished from Redis as it was made`);
  return id;
}
