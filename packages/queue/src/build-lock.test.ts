import { silentLogger } from "@proctor/schema";
import { afterAll, beforeAll, expect, test } from "vitest";
import { openBuildLock, type RedisBuildLock } from "./build-lock";
import { startRedisServer, type RedisServerHandle } from "./redis-server";

let redis: RedisServerHandle;
const locks: RedisBuildLock[] = [];
beforeAll(async () => {
  redis = await startRedisServer();
});
afterAll(async () => {
  for (const lock of locks) lock.close();
  await redis?.stop();
});

function lock(options: { ttlMs?: number } = {}): RedisBuildLock {
  const opened = openBuildLock(redis.url, silentLogger, { pollMs: 20, ...options });
  locks.push(opened);
  return opened;
}

test("one holder per image across workers: the second waits for the first's release; a dead holder's key expires", async () => {
  const [a, b] = [lock(), lock()];
  const order: string[] = [];
  const releaseA = await a.acquire("abc");
  expect(await b.held()).toEqual(["abc"]);
  const waiting = b.acquire("abc").then((release) => {
    order.push("b holds it");
    return release;
  });
  await new Promise((resolve) => setTimeout(resolve, 200));
  order.push("a releases");
  await releaseA();
  await (await waiting)();
  expect(order).toEqual(["a releases", "b holds it"]);
  expect(await a.held()).toEqual([]);

  // A worker killed mid-build: its connection is gone, so nothing renews the key and it expires.
  const dying = lock({ ttlMs: 500 });
  await dying.acquire("def");
  dying.close();
  const started = Date.now();
  await (await b.acquire("def"))();
  expect(Date.now() - started).toBeLessThan(5000);
});
