import { hostname } from "node:os";
import Dockerode from "dockerode";
import { Redis } from "ioredis";
import { silentLogger } from "@proctor/schema";
import { afterAll, beforeAll, expect, test } from "vitest";
import { reapDeadWorkers, WORKER_LABELS } from "./reaper";
import { startRedisServer, type RedisServerHandle } from "./redis-server";
import { beat, queueId } from "./registry";

const docker = new Dockerode();
let redis: RedisServerHandle;
let client: Redis;
const made: string[] = [];

beforeAll(async () => {
  redis = await startRedisServer();
  client = new Redis(redis.url);
});
afterAll(async () => {
  for (const id of made) await docker.getContainer(id).remove({ force: true }).catch(() => undefined);
  client.disconnect();
  await redis.stop();
});

async function container(worker: string, host: string, queue: string): Promise<string> {
  const created = await docker.createContainer({
    Image: "proctor/busybox:latest",
    Cmd: ["sleep", "600"],
    Labels: { [WORKER_LABELS.worker]: worker, [WORKER_LABELS.host]: host, [WORKER_LABELS.queue]: queue, "proctor.test": "queue-reaper" },
  });
  made.push(created.id);
  await created.start();
  return created.id;
}

const exists = (id: string) => docker.getContainer(id).inspect().then(() => true, () => false);

test("a worker reaps the containers of its queue's workers on its host whose heartbeat is gone, and nothing else", async () => {
  const host = hostname();
  const now = new Date().toISOString();
  const queue = await queueId(client, "proctor");
  expect(await queueId(client, "proctor")).toBe(queue); // made once, then read
  const otherQueue = await queueId(client, "another-deployment");
  expect(otherQueue).not.toBe(queue);
  await beat(client, "proctor", { id: "alive-1", name: "alive", host, pid: 1, runtime: "docker", capacity: 1, running: [], finished: 0, startedAt: now, heartbeatAt: now, draining: false }, 60_000);
  const dead = await container("dead-1", host, queue);
  const alive = await container("alive-1", host, queue);
  const elsewhere = await container("dead-2", "some-other-host", queue);
  // A worker of another queue on this daemon: its heartbeat is in that queue, not in this one.
  const otherQueues = await container("other-1", host, otherQueue);
  expect(await reapDeadWorkers(docker, client, { prefix: "proctor", host, queue, logger: silentLogger })).toBe(1);
  expect(await exists(dead)).toBe(false);
  expect(await exists(alive)).toBe(true);
  expect(await exists(elsewhere)).toBe(true); // another host's containers are its own workers' business
  expect(await exists(otherQueues)).toBe(true);
});
