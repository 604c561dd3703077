import { createHash } from "node:crypto";
import type { Redis } from "ioredis";
import type { z } from "zod";
import { SpecError } from "./errors";
import { keys, SPEC_TTL_SECONDS } from "./protocol";

/** Publishes a record under the sha256 of its JSON text (idempotent: same content, same key); returns the sha256. */
export async function publishSpec(redis: Redis, prefix: string, record: unknown): Promise<string> {
  const text = JSON.stringify(record);
  const sha256 = createHash("sha256").update(text).digest("hex");
  await redis.set(keys.spec(prefix, sha256), text, "EX", SPEC_TTL_SECONDS);
  return sha256;
}

const MAX_CACHED = 1000;

/**
 * A worker's published records, fetched once per sha256 and kept parsed: a worker running 10,000
 * trials of 100 tasks reads 100 task records from Redis, not 10,000.
 */
export class SpecCache {
  private readonly records = new Map<string, Promise<unknown>>();

  constructor(
    private readonly redis: Redis,
    private readonly prefix: string,
  ) {}

  get<T>(sha256: string, schema: z.ZodType<T>, what: string): Promise<T> {
    let record = this.records.get(sha256);
    if (!record) {
      if (this.records.size >= MAX_CACHED) this.records.delete(this.records.keys().next().value as string);
      record = this.fetch(sha256, schema, what);
      record.catch(() => this.records.delete(sha256)); // a failed read is tried again by the next job
      this.records.set(sha256, record);
    }
    return record as Promise<T>;
  }

  private async fetch<T>(sha256: string, schema: z.ZodType<T>, what: string): Promise<T> {
    const key = keys.spec(this.prefix, sha256);
    const bytes = await this.redis.getBuffer(key);
    if (bytes === null) {
      throw new SpecError(`the job's ${what} (Redis key ${key}) is gone: it expires ${SPEC_TTL_SECONDS / 86_400} days after its run was dispatched; resume the run to publish it again`, sha256);
    }
    const actual = createHash("sha256").update(bytes).digest("hex");
    if (actual !== sha256) throw new SpecError(`the job's ${what} (Redis key ${key}) was refused: its content hashes to ${actual}`, sha256);
    const parsed = schema.safeParse(JSON.parse(bytes.toString("utf8")));
    if (!parsed.success) {
      const issue = parsed.error.issues[0];
      throw new SpecError(`the job's ${what} (Redis key ${key}) is not one this worker understands (${issue?.path.join(".")}: ${issue?.message}); are dispatcher and worker the same Proctor version?`, sha256);
    }
    return parsed.data;
  }
}
