import { execFileSync } from "node:child_process";
import { readdir, readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { LocalRuntime } from "@proctor/sandbox";
import { loadTasks } from "@proctor/tasks";
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { startRun } from "./run";
import { EXAMPLES_DIR, readResultsFile, tempDir } from "./testing/fixtures";

/** base64 of a tar.gz of `dir`/`name`, made with the system tar. */
const tarB64 = (dir: string, name: string) => execFileSync("tar", ["-czf", "-", "-C", dir, name]).toString("base64");

describe("Terminal-Bench 2 dataset rows on the local runtime", () => {
  let root: { path: string; cleanup: () => Promise<void> };
  let rowsFile: string;
  beforeAll(async () => {
    root = await tempDir("proctor-tb2-rows-");
    const rows: string[] = [];
    const examples = join(EXAMPLES_DIR, "tasks");
    for (const id of (await readdir(examples)).sort()) {
      const dir = join(examples, id);
      rows.push(JSON.stringify({
        task_id: id,
        instruction: await readFile(join(dir, "instruction.md"), "utf8"),
        category: "examples",
        docker_image: null,
        tests_tar: tarB64(dir, "tests"),
        solution_tar: tarB64(dir, "solution"),
        max_agent_timeout_sec: 120,
        max_test_timeout_sec: 60,
      }));
    }
    rowsFile = join(root.path, "rows.jsonl");
    await writeFile(rowsFile, `${rows.join("\n")}\n`);
  });
  afterAll(async () => {
    await root?.cleanup();
  });

  test("rows.jsonl built from the example tasks: the oracle passes every row, nop fails every row", async () => {
    const loaded = await loadTasks([rowsFile], { cacheDir: join(root.path, "cache") });
    expect(loaded.errors.map((e) => e.message)).toEqual([]);
    expect(loaded.tasks).toHaveLength(4);
    const runtime = new LocalRuntime({ rootDir: join(root.path, "sandboxes") });
    execFileSync("mkdir", ["-p", join(root.path, "sandboxes")]);
    for (const [agent, status] of [["oracle", "passed"], ["nop", "failed"]] as const) {
      const runDir = join(root.path, "runs", agent);
      await startRun({ runId: `tb2-${agent}`, runDir, runtime, tasks: loaded.tasks, agent: { kind: agent }, concurrency: 4, attempts: 1 }).done;
      const results = await readResultsFile(runDir);
      expect(results.map((r) => [r.taskId, r.status]).sort()).toEqual(loaded.tasks.map((t) => [t.id, status]));
    }
  }, 240_000);
});
