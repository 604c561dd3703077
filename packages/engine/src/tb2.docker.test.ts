import { execFileSync } from "node:child_process";
import { mkdir, readdir, readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { DockerRuntime, dockerTestGate } from "@proctor/sandbox-docker";
import { loadTasks } from "@proctor/tasks";
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { startRun } from "./run";
import { containersOf, EXAMPLES_DIR, readResultsFile, removeRunContainers, tempDir } from "./testing/fixtures";

const haveDocker = await dockerTestGate();

/** base64 of a tar.gz of `dir`/`name`, made with the system tar. */
const tarB64 = (dir: string, name: string) => execFileSync("tar", ["-czf", "-", "-C", dir, name]).toString("base64");


describe.skipIf(!haveDocker)("Terminal-Bench 2 rows as the dataset writes them, on Docker", () => {
  let root: { path: string; cleanup: () => Promise<void> };
  let rowsFile: string;
  const runId = `tb2-rows-${process.pid}`;
  beforeAll(async () => {
    root = await tempDir("proctor-tb2-docker-");
    // Each row's environment_tar holds a Dockerfile; docker_image "" says there is no prebuilt image.
    const env = join(root.path, "env");
    await mkdir(join(env, "environment"), { recursive: true });
    await writeFile(join(env, "environment", "Dockerfile"), "FROM proctor/base:bookworm\nWORKDIR /app\n");
    const rows: string[] = [];
    const examples = join(EXAMPLES_DIR, "tasks");
    for (const id of (await readdir(examples)).sort()) {
      const dir = join(examples, id);
      rows.push(JSON.stringify({
        task_name: id,
        instruction: await readFile(join(dir, "instruction.md"), "utf8"),
        category: "examples",
        docker_image: "",
        environment_tar: tarB64(env, "environment"),
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
    removeRunContainers([runId]);
    await root?.cleanup();
  });

  test("task_name rows with docker_image \"\" build their environment_tar; the oracle passes 4/4", async () => {
    const loaded = await loadTasks([rowsFile], { cacheDir: join(root.path, "cache") });
    expect(loaded.errors.map((e) => e.message)).toEqual([]);
    expect(loaded.tasks.map((t) => t.id).sort()).toEqual(["fizzbuzz-python", "git-first-commit", "greeting-file", "word-frequency"]);
    const runDir = join(root.path, "runs", runId);
    const handle = startRun({ runId, runDir, runtime: new DockerRuntime(), tasks: loaded.tasks, agent: { kind: "oracle" }, concurrency: 2, attempts: 1, defaultImage: null });
    await handle.done;
    const results = await readResultsFile(runDir);
    expect(results.map((r) => [r.taskId, r.status, r.error?.message ?? null]).sort()).toEqual(loaded.tasks.map((t) => [t.id, "passed", null]).sort());
    expect(containersOf(runId)).toEqual([]);
  }, 600_000);
});
