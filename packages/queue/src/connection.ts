import type { ConnectionOptions } from "bullmq";
import { Redis, type RedisOptions } from "ioredis";
import type { Logger } from "@proctor/schema";
import { QueueUnreachableError, QueueUrlError } from "./errors";

/** Key prefix of everything Proctor keeps in Redis (BullMQ's own keys too). */
export const KEY_PREFIX = "proctor";
/** The BullMQ queue holding one job per trial. */
export const TRIAL_QUEUE = "trials";

export interface QueueTarget {
  host: string;
  port: number;
  db: number;
  username?: string;
  password?: string;
  tls: boolean;
  /** The URL without credentials, for messages and logs. */
  display: string;
}

/** Parses `redis://[user:pass@]HOST[:PORT][/DB]` (or `rediss://` for TLS); throws QueueUrlError naming the flag's problem. */
export function parseQueueUrl(url: string): QueueTarget {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new QueueUrlError(`--queue: "${url}" is not a URL; use redis://HOST:PORT/DB (e.g. redis://127.0.0.1:6379/0)`, url);
  }
  if (parsed.protocol !== "redis:" && parsed.protocol !== "rediss:") {
    throw new QueueUrlError(`--queue: scheme must be redis:// or rediss://, got ${parsed.protocol}//`, url);
  }
  if (!parsed.hostname) throw new QueueUrlError("--queue: the URL names no host; use redis://HOST:PORT/DB", url);
  const port = parsed.port ? Number(parsed.port) : 6379;
  const dbText = parsed.pathname.replace(/^\//, "");
  const db = dbText === "" ? 0 : Number(dbText);
  if (!Number.isInteger(db) || db < 0 || db > 15 || !/^\d*$/.test(dbText)) {
    throw new QueueUrlError(`--queue: the database must be a number 0-15 after the port (redis://HOST:PORT/DB), got "/${dbText}"`, url);
  }
  const tls = parsed.protocol === "rediss:";
  return {
    host: parsed.hostname.replace(/^\[|\]$/g, ""),
    port,
    db,
    ...(parsed.username ? { username: decodeURIComponent(parsed.username) } : {}),
    ...(parsed.password ? { password: decodeURIComponent(parsed.password) } : {}),
    tls,
    display: `${parsed.protocol}//${parsed.host}/${db}`,
  };
}

/** ioredis options for BullMQ: commands wait through a reconnect instead of failing (nothing lost while Redis is gone). */
function redisOptions(target: QueueTarget): RedisOptions {
  return {
    host: target.host,
    port: target.port,
    db: target.db,
    ...(target.username ? { username: target.username } : {}),
    ...(target.password ? { password: target.password } : {}),
    ...(target.tls ? { tls: {} } : {}),
    maxRetriesPerRequest: null,
    enableOfflineQueue: true,
    retryStrategy: (times) => Math.min(200 * times, 2000),
  };
}

/** The same options, typed for BullMQ's Queue, Worker and QueueEvents. */
export function bullConnection(target: QueueTarget): ConnectionOptions {
  return redisOptions(target) as ConnectionOptions;
}

/**
 * A connection that says clearly, once per outage, that Redis is gone and that it keeps
 * retrying, and says when it is back.
 */
export function connect(target: QueueTarget, logger: Logger, role: string, outage: Outage = { down: false }): Redis {
  const redis = new Redis(redisOptions(target));
  watchConnection(redis, target, logger, role, outage);
  return redis;
}

/** Whether Redis is away, shared by one side's connections so an outage is reported once, not once per connection. */
export interface Outage {
  down: boolean;
}

export function watchConnection(emitter: { on(event: string, fn: (...args: any[]) => void): unknown }, target: QueueTarget, logger: Logger, role: string, outage: Outage = { down: false }): void {
  emitter.on("error", (error: Error) => {
    if (outage.down) return;
    outage.down = true;
    logger.error(`Redis at ${target.display} is unreachable (${error.message}); ${role} keeps retrying, nothing is lost`, { role });
  });
  emitter.on("ready", () => {
    if (!outage.down) return;
    outage.down = false;
    logger.info(`Redis at ${target.display} is back; ${role} continues`, { role });
  });
}

/**
 * One PING with no retries, before anything is queued: a run or a server that starts against a
 * Redis that is not there stops with one line (QueueUnreachableError) instead of waiting for it.
 * Outages after a good start are waited out (see connect()).
 */
export async function checkQueueReachable(url: string, timeoutMs = 5000): Promise<void> {
  const target = parseQueueUrl(url);
  const redis = new Redis({ ...redisOptions(target), lazyConnect: true, connectTimeout: timeoutMs, maxRetriesPerRequest: 0, enableOfflineQueue: false, retryStrategy: () => null });
  // The socket's own error (ECONNREFUSED, ENOTFOUND) says more than the rejection ("Connection is closed").
  let first: Error | null = null;
  redis.on("error", (error: Error) => (first ??= error));
  try {
    await redis.connect();
    await redis.ping();
  } catch (error) {
    const reason = (first ?? (error instanceof Error ? error : null))?.message ?? String(error);
    throw new QueueUnreachableError(`Redis at ${target.display} does not answer (${reason}): start it (redis-server --port ${target.port} --appendonly yes) or fix --queue`, { cause: error });
  } finally {
    // A connection that failed has ended; disconnecting it again would leave a 2 s timer holding the process.
    if (redis.status !== "end") redis.disconnect();
  }
}
