import { randomBytes } from "node:crypto";
import type { Redis } from "ioredis";
import type { Logger } from "@proctor/schema";
import { connect, KEY_PREFIX, parseQueueUrl } from "./connection";

const LOCK_PREFIX = `${KEY_PREFIX}:image-build:`;
const RELEASE = `if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`;
const REFRESH = `if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("pexpire", KEYS[1], ARGV[2]) else return 0 end`;

/**
 * One image build per cluster: workers sharing a queue (and an image registry) take a Redis key
 * per image before building it; the others wait, then pull what the holder pushed. The key
 * expires `ttlMs` after its holder stops renewing it (a worker killed mid-build), so a dead
 * holder never blocks a build for long. Same shape as @proctor/sandbox-docker's BuildLock.
 */
export class RedisBuildLock {
  private readonly prefix: string;

  /**
   * `scope`: lock per image and scope, e.g. the Docker daemon's id when there is no registry (then
   * only workers on the same daemon can use each other's builds, and workers elsewhere need not wait).
   */
  constructor(private readonly redis: Redis, private readonly options: { ttlMs?: number; pollMs?: number; scope?: string } = {}) {
    this.prefix = `${LOCK_PREFIX}${options.scope ? `${options.scope}:` : ""}`;
  }

  async acquire(key: string, signal?: AbortSignal): Promise<() => Promise<void>> {
    const name = `${this.prefix}${key}`;
    const token = randomBytes(12).toString("hex");
    const ttlMs = this.options.ttlMs ?? 30_000;
    for (;;) {
      signal?.throwIfAborted();
      if ((await this.redis.set(name, token, "PX", ttlMs, "NX")) === "OK") break;
      await new Promise((resolve) => setTimeout(resolve, this.options.pollMs ?? 500));
    }
    const renew = setInterval(() => void this.redis.eval(REFRESH, 1, name, token, String(ttlMs)).catch(() => undefined), Math.max(1000, Math.floor(ttlMs / 3)));
    renew.unref();
    let released = false;
    return async () => {
      if (released) return;
      released = true;
      clearInterval(renew);
      await this.redis.eval(RELEASE, 1, name, token).catch(() => undefined);
    };
  }

  /** Images some worker is building now. */
  async held(): Promise<string[]> {
    const keys: string[] = [];
    let cursor = "0";
    do {
      const [next, batch] = await this.redis.scan(cursor, "MATCH", `${this.prefix}*`, "COUNT", 200);
      cursor = next;
      // Unscoped: every scope's builds, by their image keys.
      keys.push(...batch.map((k) => k.slice(LOCK_PREFIX.length).replace(/^.*:/, "")));
    } while (cursor !== "0");
    return keys;
  }

  close(): void {
    this.redis.disconnect();
  }
}

/** A RedisBuildLock on the queue's Redis (`redis://HOST:PORT/DB`). */
export function openBuildLock(url: string, logger: Logger, options: { ttlMs?: number; pollMs?: number; scope?: string } = {}): RedisBuildLock {
  return new RedisBuildLock(connect(parseQueueUrl(url), logger, "the image build lock"), options);
}
