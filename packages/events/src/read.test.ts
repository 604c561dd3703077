import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { TrialResult, silentLogger } from "@proctor/schema";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { JsonlParseError, JsonlReadError } from "./errors";
import { readJsonl } from "./read";

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), "proctor-jsonl-"));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

async function file(name: string, text: string): Promise<string> {
  const path = join(dir, name);
  await writeFile(path, text);
  return path;
}

async function parseError(promise: Promise<unknown>): Promise<JsonlParseError> {
  const error = await promise.then(
    () => expect.fail("readJsonl accepted a garbled file"),
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(JsonlParseError);
  return error as JsonlParseError;
}

const result = {
  trialId: "t1",
  taskId: "hello",
  attempt: 1,
  category: null,
  difficulty: null,
  status: "passed",
  reward: 1,
  error: null,
  durationMs: 5,
  startedAt: "2025-01-01T00:00:00.000Z",
  finishedAt: "2025-01-01T00:00:01.000Z",
  retries: 0,
  phases: [],
  agent: null,
  checks: null,
};

describe("readJsonl", () => {
  it("reads one record per line, skipping blank lines and accepting CRLF", async () => {
    const path = await file("a.jsonl", '{"a":1}\n\n{"a":2}\r\n   \n{"a":3}\n');
    expect(await readJsonl(path)).toEqual({ records: [{ a: 1 }, { a: 2 }, { a: 3 }], truncatedTail: null });
  });

  it("accepts a complete last record without a final newline", async () => {
    const path = await file("a.jsonl", '{"a":1}\n{"a":2}');
    expect((await readJsonl(path)).records).toEqual([{ a: 1 }, { a: 2 }]);
  });

  it("tolerates a truncated last line and says so", async () => {
    const path = await file("results.jsonl", '{"a":1}\n{"a":2}\n{"a":3,"b":"tru');
    const warnings: unknown[] = [];
    const logger = { ...silentLogger, warn: (_m: string, f?: Record<string, unknown>) => void warnings.push(f) };
    const read = await readJsonl(path, { logger });
    expect(read.records).toEqual([{ a: 1 }, { a: 2 }]);
    expect(read.truncatedTail).toEqual({ line: 3, content: '{"a":3,"b":"tru' });
    expect(warnings).toEqual([{ path, line: 3, content: '{"a":3,"b":"tru' }]);
  });

  it("errors on a garbled line in the middle, naming the file and line", async () => {
    const path = await file("results.jsonl", '{"a":1}\n{"a":2}\n{"a":3,"b\n{"a":4}\n');
    const error = await parseError(readJsonl(path));
    expect(error.path).toBe(path);
    expect(error.line).toBe(3);
    expect(error.content).toBe('{"a":3,"b');
    expect(error.message).toContain(`${path}:3: not valid JSON`);
  });

  it("errors on a garbled last line that was terminated (not a crash mid-write)", async () => {
    const path = await file("results.jsonl", '{"a":1}\nnot json\n');
    expect((await parseError(readJsonl(path))).line).toBe(2);
  });

  it("validates records with a schema and names the bad line", async () => {
    const good = JSON.stringify(result);
    const bad = JSON.stringify({ ...result, trialId: "t2", status: "maybe" });
    const path = await file("results.jsonl", `${good}\n${bad}\n`);
    const error = await parseError(readJsonl(path, { schema: TrialResult }));
    expect(error.line).toBe(2);
    expect(error.message).toMatch(/results\.jsonl:2: record does not match the expected shape/);
    const ok = await file("ok.jsonl", `${good}\n${good.slice(0, 40)}`);
    const read = await readJsonl(ok, { schema: TrialResult });
    expect(read.records).toEqual([result]);
    expect(read.truncatedTail?.line).toBe(2);
  });

  it("trims a huge garbled line in the error", async () => {
    const path = await file("a.jsonl", `${"y".repeat(10_000)}\n{}\n`);
    const error = await parseError(readJsonl(path));
    expect(error.content.length).toBeLessThanOrEqual(201);
  });

  it("throws JsonlReadError for a missing file unless missingOk", async () => {
    const path = join(dir, "nope.jsonl");
    await expect(readJsonl(path)).rejects.toBeInstanceOf(JsonlReadError);
    await expect(readJsonl(path)).rejects.toThrow(/nope\.jsonl: cannot read/);
    expect(await readJsonl(path, { missingOk: true })).toEqual({ records: [], truncatedTail: null });
  });

  it("reads an empty file as no records", async () => {
    expect(await readJsonl(await file("e.jsonl", ""))).toEqual({ records: [], truncatedTail: null });
  });
});
