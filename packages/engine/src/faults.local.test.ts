import { execFileSync } from "node:child_process";
import { mkdir, readFile, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { LocalRuntime } from "@proctor/sandbox";
import { TrialResult } from "@proctor/schema";
import { loadTasks } from "@proctor/tasks";
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { RunStorageError } from "./errors";
import { startRun } from "./run";
import { ADVERSARIAL_TASKS, tempDir, writeTasks } from "./testing/fixtures";

// A small filesystem of its own (tmpfs) makes "disk full" real without filling the machine's disk.
const canMount = process.getuid?.() === 0;
if (!canMount && process.env.CI === "true") throw new Error("the disk-full test needs root (to mount a tmpfs) under CI=true");

describe.skipIf(!canMount)("a full disk under the run directory", () => {
  let root: { path: string; cleanup: () => Promise<void> };
  let disk: string;

  beforeAll(async () => {
    root = await tempDir("proctor-diskfull-");
    disk = join(root.path, "disk");
    await mkdir(disk);
    execFileSync("mount", ["-t", "tmpfs", "-o", "size=2m", "tmpfs", disk]);
  });
  afterAll(async () => {
    execFileSync("umount", ["-l", disk]);
    await root.cleanup();
  });

  test("stops the run with a clear error, leaves results.jsonl whole, and a resume finishes it", async () => {
    const specs = Object.fromEntries(Array.from({ length: 40 }, (_, i) => [`t${String(i).padStart(2, "0")}`, ADVERSARIAL_TASKS["needs-work"]!]));
    const loaded = await loadTasks([await writeTasks(join(root.path, "tasks"), specs)]);
    const runtime = new LocalRuntime({ rootDir: join(root.path, "sandboxes") });
    const runDir = join(disk, "runs", "full");
    // Leave a few trials' worth of room.
    await mkdir(runDir, { recursive: true });
    await writeFile(join(disk, "filler"), Buffer.alloc(2 * 1024 * 1024 - 160 * 1024));
    const first = startRun({ runId: "full", runDir, tasks: loaded.tasks, agent: { kind: "oracle" }, runtime, concurrency: 2, attempts: 1 });
    const error = await first.done.then(() => null, (e: unknown) => e);
    expect(error).toBeInstanceOf(RunStorageError);
    expect((error as Error).message).toMatch(/disk is full.*proctor run --resume/s);

    const lines = (await readFile(join(runDir, "results.jsonl"), "utf8")).split("\n");
    expect(lines.pop()).toBe(""); // ends with a complete line
    for (const line of lines) expect(TrialResult.safeParse(JSON.parse(line)).success).toBe(true);
    expect(lines.length).toBeLessThan(40);

    await rm(join(disk, "filler"));
    const second = startRun({ runId: "full", runDir, tasks: loaded.tasks, agent: { kind: "oracle" }, runtime, concurrency: 2, attempts: 1, resume: true });
    const summary = await second.done;
    expect(summary.trials).toMatchObject({ total: 40, passed: 40 });
    const ids = (await readFile(join(runDir, "results.jsonl"), "utf8")).trim().split("\n").map((l) => (JSON.parse(l) as TrialResult).trialId);
    expect(new Set(ids).size).toBe(40);
    expect(ids.length).toBe(40);
  });
});
