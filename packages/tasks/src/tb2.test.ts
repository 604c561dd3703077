import { execFileSync } from "node:child_process";
import { readdir, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { describe, expect, test } from "vitest";
import { must, tempDir, writeTree } from "../test/fixtures";
import { exampleParquetRows, writeTb2Parquet } from "../test/tb2-parquet";
import { loadTasks } from "./sources";
import { isTb2File, loadTb2File } from "./tb2";

const EXAMPLES = join(import.meta.dirname, "..", "..", "..", "examples", "tasks");

/** base64 of a tar.gz of `dir`'s `name` subdirectory (tests/, solution/), made with the system tar. */
function tarB64(dir: string, name: string): string {
  return execFileSync("tar", ["-czf", "-", "-C", dir, name]).toString("base64");
}

/** One TB2 row per bundled example task, built at test time. */
async function exampleRows(): Promise<Record<string, unknown>[]> {
  const rows: Record<string, unknown>[] = [];
  for (const id of (await readdir(EXAMPLES)).sort()) {
    const dir = join(EXAMPLES, id);
    const toml = execFileSync("cat", [join(dir, "task.toml")], { encoding: "utf8" });
    rows.push({
      task_id: id,
      instruction: execFileSync("cat", [join(dir, "instruction.md")], { encoding: "utf8" }),
      category: /category = "([^"]+)"/.exec(toml)?.[1] ?? null,
      difficulty: "easy",
      tags: JSON.stringify(["example"]),
      docker_image: null,
      tests_tar: tarB64(dir, "tests"),
      solution_tar: tarB64(dir, "solution"),
      max_agent_timeout_sec: 120,
      max_test_timeout_sec: 60,
      source: "examples",
    });
  }
  return rows;
}

async function writeRows(rows: (Record<string, unknown> | string)[]): Promise<string> {
  const root = await tempDir();
  const file = join(root, "rows.jsonl");
  await writeFile(file, `${rows.map((r) => (typeof r === "string" ? r : JSON.stringify(r))).join("\n")}\n`);
  return file;
}

/** A tar.gz (base64) whose one entry is named `name` (e.g. ../escape.sh), made with Python's tarfile. */
function craftedTar(name: string, size: number): string {
  const script = `
import io, sys, tarfile, base64
buf = io.BytesIO()
with tarfile.open(fileobj=buf, mode="w:gz") as t:
    data = b"x" * int(sys.argv[2])
    info = tarfile.TarInfo(sys.argv[1]); info.size = len(data); info.mode = 0o755
    t.addfile(info, io.BytesIO(data))
sys.stdout.write(base64.b64encode(buf.getvalue()).decode())
`;
  return execFileSync("python3", ["-c", script, name, String(size)], { encoding: "utf8" });
}

describe("Terminal-Bench 2 rows", () => {
  test("rows built from the example tasks load as native tasks with their fields", async () => {
    const file = await writeRows(await exampleRows());
    expect(await isTb2File(file)).toBe(true);
    const { tasks, errors } = await loadTasks([file], { cacheDir: join(file, "..", "cache") });
    expect(errors.map((e) => e.message)).toEqual([]);
    expect(tasks.map((t) => t.id)).toEqual(["fizzbuzz-python", "git-first-commit", "greeting-file", "word-frequency"]);
    const greeting = must(tasks.find((t) => t.id === "greeting-file"));
    expect(greeting).toMatchObject({
      format: "native",
      category: "file-ops",
      difficulty: "easy",
      tags: ["example"],
      agent: { timeoutSec: 120 },
      verifier: { mode: "reward-file", timeoutSec: 60 },
      environment: { dockerImage: null },
      extra: { source: "examples", tb2Source: { line: 3 } },
    });
    expect(greeting.instruction).toContain("greeting");
    expect(await readdir(must(greeting.verifier.testsDir))).toContain("test.sh");
    expect(await readdir(must(greeting.solution).dir)).toContain("solve.sh");
  });

  test("rows as the TB2 dataset writes them: the id in task_name, docker_image \"\" means build environment_tar", async () => {
    const env = await tempDir();
    await writeTree(env, { "environment/Dockerfile": "FROM proctor/base:bookworm\nWORKDIR /app\n" });
    const rows = (await exampleRows()).map(({ task_id, ...rest }) => ({ ...rest, task_name: task_id, docker_image: "", environment_tar: tarB64(env, "environment") }));
    const file = await writeRows([...rows, { ...must(rows[0]), task_name: "no-env", environment_tar: undefined }]);
    const { tasks, errors } = await loadTb2File(file, { cacheDir: join(file, "..", "cache") });
    expect(errors.map((e) => e.message)).toEqual([]);
    expect(tasks.map((t) => t.id).sort()).toEqual(["fizzbuzz-python", "git-first-commit", "greeting-file", "no-env", "word-frequency"]);
    for (const task of tasks.filter((t) => t.id !== "no-env")) {
      expect(task.environment.dockerImage).toBeNull();
      expect(await readdir(must(task.environment.buildContext))).toEqual(["Dockerfile"]);
      expect(task.extra).not.toHaveProperty("task_name");
    }
    // No image and nothing to build: the runtime's default image, as for a row without the field.
    expect(tasks.find((t) => t.id === "no-env")?.environment).toMatchObject({ dockerImage: null, buildContext: null });
  });

  test("a bad row is an error naming the file, the line and the field; good rows still load", async () => {
    const [good] = await exampleRows();
    const file = await writeRows([
      must(good),
      "{not json",
      { ...must(good), task_id: "no-instruction", instruction: undefined },
      { ...must(good), task_id: "bad-tar", tests_tar: "!!not base64!!" },
      { ...must(good), task_id: "no-tests", tests_tar: undefined },
      { ...must(good), task_id: "bad-timeout", max_agent_timeout_sec: "soon" },
      { ...must(good), task_id: "../evil" },
    ]);
    const { tasks, errors } = await loadTb2File(file, { cacheDir: join(file, "..", "cache") });
    expect(tasks.map((t) => t.id)).toEqual(["fizzbuzz-python"]);
    const messages = errors.map((e) => e.message);
    expect(messages).toEqual([
      expect.stringMatching(new RegExp(`^${file.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}:2: row is not valid JSON`)),
      `${file}:3: instruction is missing`,
      `${file}:4: tests_tar must be a base64-encoded tar (or tar.gz)`,
      `${file}:5: tests_tar is missing: the row needs its tests/ directory (with test.sh) as a base64 tar`,
      `${file}:6: max_agent_timeout_sec must be a positive number of seconds, got "soon"`,
      expect.stringContaining(`${file}:7: task_id must be a task id`),
    ]);
    expect(errors.map((e) => e.field)).toEqual(["row", "instruction", "tests_tar", "tests_tar", "max_agent_timeout_sec", "task_id"]);
  });

  test("a malicious tar is refused: a path escaping the task directory, a file over the size limit", async () => {
    const [good] = await exampleRows();
    const file = await writeRows([
      { ...must(good), task_id: "escape", tests_tar: craftedTar("../../escape.sh", 10) },
      { ...must(good), task_id: "oversize", solution_tar: craftedTar("solve.sh", 64 * 1024) },
    ]);
    const cacheDir = join(file, "..", "cache");
    const { tasks, errors } = await loadTb2File(file, { cacheDir, archiveLimits: { maxFileBytes: 16 * 1024 } });
    expect(tasks).toEqual([]);
    expect(errors[0]?.message).toMatch(new RegExp(`rows.jsonl:1: tests_tar could not be unpacked: .*\\.\\./\\.\\./escape\\.sh`));
    expect(errors[0]?.field).toBe("tests_tar");
    expect(errors[1]?.message).toMatch(/rows\.jsonl:2: solution_tar could not be unpacked: .*(limit|large|exceed)/i);
    // Nothing was written outside the cache, and no half-made task directory is left in it.
    expect(await readdir(join(file, ".."))).toEqual(expect.arrayContaining(["rows.jsonl"]));
    expect((await readdir(join(file, ".."))).filter((n) => n.includes("escape"))).toEqual([]);
    const leftovers = (await readdir(cacheDir).catch(() => [] as string[])).map((d) => readdir(join(cacheDir, d)));
    expect((await Promise.all(leftovers)).flat()).toEqual([]);
  });

  test("parquet rows (binary tar columns, snappy) load like their JSONL twins; a row is named by its number", async () => {
    const root = await tempDir();
    const parquet = join(root, "rows.parquet");
    await writeTb2Parquet(parquet, exampleParquetRows());
    expect(await isTb2File(parquet)).toBe(true);
    const fromParquet = await loadTasks([parquet], { cacheDir: join(root, "cache") });
    expect(fromParquet.errors.map((e) => e.message)).toEqual([]);
    const jsonl = await loadTasks([await writeRows(await exampleRows())], { cacheDir: join(root, "cache2") });
    const shape = (t: { id: string; instruction: string; category: string | null }) => ({ id: t.id, instruction: t.instruction, category: t.category });
    expect(fromParquet.tasks.map(shape)).toEqual(jsonl.tasks.map(shape));
    const greeting = must(fromParquet.tasks.find((t) => t.id === "greeting-file"));
    expect(greeting).toMatchObject({ agent: { timeoutSec: 120 }, extra: { tb2Source: { row: 3 } } });
    expect((await readdir(must(greeting.verifier.testsDir))).sort()).toEqual((await readdir(join(EXAMPLES, "greeting-file", "tests"))).sort());
    expect(await readdir(must(greeting.solution).dir)).toContain("solve.sh");
  });

  test("parquet with base64 text tars; a bad row names the file, the row and the field", async () => {
    const root = await tempDir();
    const parquet = join(root, "rows.parquet");
    const [good] = exampleParquetRows();
    const b64 = (v: Uint8Array | string | null) => (v instanceof Uint8Array ? Buffer.from(v).toString("base64") : v);
    const text = { ...must(good), tests_tar: b64(must(good).tests_tar), solution_tar: b64(must(good).solution_tar) };
    await writeTb2Parquet(parquet, [text, { ...text, task_id: "no-tests", tests_tar: null }, { ...text, task_id: "../evil" }]);
    const { tasks, errors } = await loadTb2File(parquet, { cacheDir: join(root, "cache") });
    expect(tasks.map((t) => t.id)).toEqual(["fizzbuzz-python"]);
    expect(errors.map((e) => e.message)).toEqual([
      `${parquet}: row 2: tests_tar is missing: the row needs its tests/ directory (with test.sh) as a base64 tar`,
      expect.stringContaining(`${parquet}: row 3: task_id must be a task id`),
    ]);
  });

  test("a parquet file without a tests_tar column, or not parquet at all, is one clear error", async () => {
    const root = await tempDir();
    const { parquetWriteFile } = await import("hyparquet-writer");
    await parquetWriteFile({ filename: join(root, "swe.parquet"), columnData: [{ name: "instance_id", data: ["a__b-1"], type: "STRING" }] });
    const swe = await loadTb2File(join(root, "swe.parquet"));
    expect(swe.errors.map((e) => e.message)).toEqual([`${join(root, "swe.parquet")}: has no tests_tar column (columns: instance_id): a .parquet source is read as Terminal-Bench 2 rows; give SWE-bench rows as JSONL`]);
    await writeFile(join(root, "junk.parquet"), "not parquet at all");
    const junk = await loadTb2File(join(root, "junk.parquet"));
    expect(junk.tasks).toEqual([]);
    expect(junk.errors.map((e) => e.message)).toEqual([expect.stringMatching(new RegExp(`^${join(root, "junk.parquet").replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}: is not a readable parquet file: `))]);
  });

  test("SWE-bench rows are not taken for TB2 rows", async () => {
    const root = await tempDir();
    await writeTree(root, { "swe.jsonl": `${JSON.stringify({ instance_id: "a__b-1", repo: "a/b", base_commit: "0".repeat(40) })}\n` });
    expect(await isTb2File(join(root, "swe.jsonl"))).toBe(false);
  });
});
