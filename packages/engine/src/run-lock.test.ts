import { spawn } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { mkdir, readdir, writeFile } from "node:fs/promises";
import { hostname } from "node:os";
import { join } from "node:path";
import { LocalRuntime } from "@proctor/sandbox";
import type { TaskSpec } from "@proctor/schema";
import { loadTasks } from "@proctor/tasks";
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { RunLockedError } from "./errors";
import { startRun } from "./run";
import { lockRunDir, RUN_LOCK_FILE } from "./store";
import { EXAMPLES_DIR, readResultsFile, tempDir } from "./testing/fixtures";

// One writer per run directory: a run (or resume) locks it; a live holder is named, a dead one
// (kill -9, or a pid now used by another process) does not keep the directory locked.

let root: { path: string; cleanup: () => Promise<void> };
let runtime: LocalRuntime;
let tasks: TaskSpec[];

beforeAll(async () => {
  root = await tempDir("proctor-engine-lock-");
  await mkdir(join(root.path, "sandboxes"));
  runtime = new LocalRuntime({ rootDir: join(root.path, "sandboxes") });
  tasks = (await loadTasks([join(EXAMPLES_DIR, "tasks")], { include: ["greeting-file"] })).tasks;
  expect(tasks.map((t) => t.id)).toEqual(["greeting-file"]);
});
afterAll(async () => {
  await root.cleanup();
});

/** The kernel's start time of `pid` (field 22 of /proc/<pid>/stat). */
function startTimeOf(pid: number): string {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  return stat.slice(stat.lastIndexOf(")") + 2).split(" ")[19] ?? "";
}

describe.skipIf(!existsSync("/proc/self/stat"))("run directory lock", () => {
  test("a live holder is refused by pid; a holder killed with -9, or a pid now naming another process, is taken over", async () => {
    const dir = join(root.path, "runs", "held");
    await mkdir(dir, { recursive: true });
    const lockFile = join(dir, RUN_LOCK_FILE);
    const child = spawn("sleep", ["60"], { stdio: "ignore" });
    const pid = child.pid as number;
    const exited = new Promise((resolve) => child.once("exit", resolve));
    const owner = { pid, startTime: startTimeOf(pid), host: hostname(), since: "2026-01-01T00:00:00.000Z" };
    try {
      await writeFile(lockFile, JSON.stringify(owner));
      const refused = await lockRunDir(dir).then(() => null, (error: unknown) => error);
      expect(refused).toBeInstanceOf(RunLockedError);
      expect((refused as Error).message).toContain(`process ${pid} is writing it`);
      expect(JSON.parse(readFileSync(lockFile, "utf8"))).toEqual(owner);

      // The same pid with another start time is a later process: the lock's owner is gone.
      await writeFile(lockFile, JSON.stringify({ ...owner, startTime: "1" }));
      const reused = await lockRunDir(dir);
      expect(JSON.parse(readFileSync(lockFile, "utf8"))).toMatchObject({ pid: process.pid });
      await reused.release();
      expect(existsSync(lockFile)).toBe(false);
    } finally {
      child.kill("SIGKILL");
      await exited;
    }
    // Killed with -9: nothing let the lock go, and it does not matter.
    await writeFile(lockFile, JSON.stringify(owner));
    const after = await lockRunDir(dir);
    expect(JSON.parse(readFileSync(lockFile, "utf8"))).toMatchObject({ pid: process.pid });
    // This process holds it now: a second taker (in this process too) is refused.
    await expect(lockRunDir(dir)).rejects.toThrow(`process ${process.pid} is writing it`);
    await after.release();
    expect(await readdir(dir)).toEqual([]);
  });

  test("startRun refuses a run directory being written, writing nothing; otherwise it holds the lock for the run and lets it go", async () => {
    const runDir = join(root.path, "runs", "engine");
    const held = await lockRunDir(runDir);
    const refused = startRun({ runId: "engine", runDir, tasks, agent: { kind: "oracle" }, runtime, concurrency: 1, attempts: 1 });
    await expect(refused.done).rejects.toBeInstanceOf(RunLockedError);
    expect(await readdir(runDir)).toEqual([RUN_LOCK_FILE]);
    await held.release();

    const handle = startRun({ runId: "engine", runDir, tasks, agent: { kind: "oracle" }, runtime, concurrency: 1, attempts: 1 });
    const during: boolean[] = [];
    handle.bus.subscribe((event) => {
      if (event.type === "trial_started") during.push(existsSync(join(runDir, RUN_LOCK_FILE)));
    });
    expect(await handle.done).toMatchObject({ status: "completed", trials: { total: 1, passed: 1 } });
    expect(during).toEqual([true]);
    expect(existsSync(join(runDir, RUN_LOCK_FILE))).toBe(false);
    expect((await readResultsFile(runDir)).map((r) => r.trialId)).toEqual(["greeting-file__1"]);
  });
});
