import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Logger, ProctorEvent } from "@proctor/schema";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { EventBus } from "./bus";
import { JsonlClosedError, JsonlWriteError } from "./errors";
import { readJsonl } from "./read";
import { JsonlSink } from "./sink";

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), "proctor-events-"));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

function recordingLogger() {
  const lines: Array<{ level: string; message: string; fields?: Record<string, unknown> }> = [];
  const at = (level: string) => (message: string, fields?: Record<string, unknown>) => void lines.push({ level, message, fields });
  const logger: Logger = { debug: at("debug"), info: at("info"), warn: at("warn"), error: at("error") };
  return { logger, lines };
}

async function fileLines(path: string): Promise<unknown[]> {
  const text = await readFile(path, "utf8");
  expect(text.endsWith("\n")).toBe(true);
  return text.trimEnd().split("\n").map((line) => JSON.parse(line));
}

describe("JsonlSink", () => {
  it("writes every event of a bus as one line, in seq order, under a burst of emits", async () => {
    const path = join(dir, "runs", "r1", "events.jsonl");
    const sink = await JsonlSink.open<ProctorEvent>(path);
    const bus = new EventBus({ runId: "r1" });
    bus.subscribe((e) => sink.write(e));
    for (let i = 0; i < 5000; i++) {
      bus.emit({ type: "trial_phase", trialId: `t${i}`, taskId: "x", data: { phase: "agent", status: "started", detail: "é ✓ \n line" } });
    }
    await sink.close();
    const events = (await fileLines(path)) as ProctorEvent[];
    expect(events.map((e) => e.seq)).toEqual(Array.from({ length: 5000 }, (_, i) => i + 1));
    expect(events[4999]).toMatchObject({ runId: "r1", trialId: "t4999", data: { detail: "é ✓ \n line" } });
  });

  it("keeps write() order across many concurrent async writers", async () => {
    const path = join(dir, "results.jsonl");
    const sink = await JsonlSink.open<{ order: number; writer: number; i: number }>(path);
    let order = 0;
    await Promise.all(
      Array.from({ length: 40 }, async (_, writer) => {
        for (let i = 0; i < 50; i++) {
          sink.write({ order: order++, writer, i });
          if (i % 7 === writer % 7) await sink.flush();
          else await Promise.resolve();
        }
      }),
    );
    await sink.close();
    const rows = (await fileLines(path)) as Array<{ order: number; writer: number; i: number }>;
    expect(rows.map((r) => r.order)).toEqual(Array.from({ length: 2000 }, (_, i) => i));
    expect(sink.written).toBe(2000);
  });

  it("has every queued line in the file when flush() resolves", async () => {
    const path = join(dir, "results.jsonl");
    const sink = await JsonlSink.open(path);
    sink.write({ trialId: "a" });
    sink.write({ trialId: "b" });
    await sink.flush({ fsync: true });
    expect(await fileLines(path)).toEqual([{ trialId: "a" }, { trialId: "b" }]);
    await sink.close();
  });

  it("appends to an existing file instead of replacing it", async () => {
    const path = join(dir, "results.jsonl");
    await writeFile(path, '{"trialId":"old"}\n');
    const sink = await JsonlSink.open(path);
    sink.write({ trialId: "new" });
    await sink.close();
    expect(await fileLines(path)).toEqual([{ trialId: "old" }, { trialId: "new" }]);
    expect(sink.repairedTail).toBeNull();
  });

  it("cuts off an unterminated last line left by a crash before appending", async () => {
    const path = join(dir, "results.jsonl");
    await writeFile(path, '{"trialId":"a"}\n{"trialId":"b"}\n{"trialId":"c","sta');
    const { logger, lines } = recordingLogger();
    const sink = await JsonlSink.open(path, { logger });
    sink.write({ trialId: "d" });
    await sink.close();
    expect(await fileLines(path)).toEqual([{ trialId: "a" }, { trialId: "b" }, { trialId: "d" }]);
    expect(sink.repairedTail).toBe('{"trialId":"c","sta');
    expect(lines).toMatchObject([{ level: "warn", fields: { path, bytes: 19 } }]);
  });

  it("repairs a file that is one unterminated line, and one whose partial line is longer than a read chunk", async () => {
    const short = join(dir, "short.jsonl");
    await writeFile(short, '{"half');
    const a = await JsonlSink.open(short);
    await a.close();
    expect(await readFile(short, "utf8")).toBe("");

    const long = join(dir, "long.jsonl");
    await writeFile(long, `{"ok":1}\n{"big":"${"x".repeat(200_000)}`);
    const b = await JsonlSink.open(long);
    b.write({ ok: 2 });
    await b.close();
    expect(await fileLines(long)).toEqual([{ ok: 1 }, { ok: 2 }]);
  });

  it("surfaces a failed write: logged, flush and close reject, later writes throw", async () => {
    const { logger, lines } = recordingLogger();
    const sink = await JsonlSink.open("/dev/full", { logger });
    sink.write({ a: 1 });
    const flushed = sink.flush();
    await expect(flushed).rejects.toBeInstanceOf(JsonlWriteError);
    await expect(flushed).rejects.toThrow(/\/dev\/full: writing 1 line\(s\) failed: .*ENOSPC/);
    expect((sink.failure?.cause as NodeJS.ErrnoException).code).toBe("ENOSPC");
    expect(() => sink.write({ a: 2 })).toThrow(JsonlWriteError);
    await expect(sink.close()).rejects.toBeInstanceOf(JsonlWriteError);
    expect(lines.filter((l) => l.level === "error")).toMatchObject([{ fields: { path: "/dev/full", lostLines: 1 } }]);
  });

  it("fails to open a path it cannot create, naming it", async () => {
    const file = join(dir, "plain");
    await writeFile(file, "");
    await expect(JsonlSink.open(join(file, "events.jsonl"))).rejects.toThrow(JsonlWriteError);
    await expect(JsonlSink.open(join(file, "events.jsonl"))).rejects.toThrow(/plain\/events\.jsonl: cannot open for appending/);
  });

  it("refuses writes after close and values JSON cannot hold", async () => {
    const sink = await JsonlSink.open(join(dir, "x.jsonl"));
    expect(() => sink.write(undefined)).toThrow(TypeError);
    await sink.close();
    await sink.close();
    expect(() => sink.write({})).toThrow(JsonlClosedError);
  });

  it("round-trips with readJsonl", async () => {
    const path = join(dir, "events.jsonl");
    const sink = await JsonlSink.open(path);
    for (let i = 0; i < 100; i++) sink.write({ i });
    await sink.close();
    const { records, truncatedTail } = await readJsonl<{ i: number }>(path);
    expect(records.map((r) => r.i)).toEqual(Array.from({ length: 100 }, (_, i) => i));
    expect(truncatedTail).toBeNull();
  });
});
