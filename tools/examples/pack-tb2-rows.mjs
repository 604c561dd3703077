#!/usr/bin/env node
// Writes examples/tb2/rows.jsonl: the four example tasks (examples/tasks) as Terminal-Bench 2
// dataset rows, one JSON object per line with the fields the TB2 dataset has (task_id,
// instruction, category, difficulty, tags, docker_image, tests_tar and solution_tar as base64
// tar.gz, the timeouts). Byte for byte reproducible (sorted entries, fixed owner and mtime, gzip
// without a name or time), so a test can tell when it is stale:
// `node tools/examples/pack-tb2-rows.mjs --check`.
import { execFileSync } from "node:child_process";
import { existsSync, readFileSync, readdirSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";

const repo = resolve(import.meta.dirname, "../..");
const tasksDir = join(repo, "examples", "tasks");
const out = join(repo, "examples", "tb2", "rows.jsonl");

/** `dir` of task `id` as a reproducible tar.gz, in base64 (the tar holds `<dir>/...`). */
function tarOf(id, dir) {
  const tar = execFileSync("tar", ["--sort=name", "--mtime=@0", "--owner=0", "--group=0", "--numeric-owner", "--mode=a+rX,u+w,go-w", "-cf", "-", "-C", join(tasksDir, id), dir]);
  return execFileSync("gzip", ["-n", "-9"], { input: tar }).toString("base64");
}

/** The few task.toml values a row carries (the example tasks' own, simple TOML). */
function tomlValue(toml, table, key) {
  const section = new RegExp(`^\\[${table}\\]\\n([\\s\\S]*?)(?=^\\[|(?![\\s\\S]))`, "m").exec(toml)?.[1] ?? "";
  const raw = new RegExp(`^${key}\\s*=\\s*(.+)$`, "m").exec(section)?.[1]?.trim();
  return raw === undefined ? null : JSON.parse(raw);
}

/** The rows file's text, built from the example tasks as they are now. */
export function packTb2Rows() {
  const rows = readdirSync(tasksDir, { withFileTypes: true })
    .filter((e) => e.isDirectory() && existsSync(join(tasksDir, e.name, "tests", "test.sh")))
    .map((e) => e.name)
    .sort()
    .map((id) => {
      const toml = readFileSync(join(tasksDir, id, "task.toml"), "utf8");
      return {
        task_id: id,
        instruction: readFileSync(join(tasksDir, id, "instruction.md"), "utf8"),
        category: tomlValue(toml, "metadata", "category"),
        difficulty: tomlValue(toml, "metadata", "difficulty"),
        tags: tomlValue(toml, "metadata", "tags") ?? [],
        // "": no prebuilt image and no environment_tar, so the runtime's default image.
        docker_image: "",
        tests_tar: tarOf(id, "tests"),
        solution_tar: tarOf(id, "solution"),
        max_agent_timeout_sec: tomlValue(toml, "agent", "timeout_sec"),
        max_test_timeout_sec: tomlValue(toml, "verifier", "timeout_sec"),
      };
    });
  return rows.map((row) => `${JSON.stringify(row)}\n`).join("");
}

if (process.argv[1] === import.meta.filename) {
  const text = packTb2Rows();
  if (process.argv.includes("--check")) {
    const same = existsSync(out) && readFileSync(out, "utf8") === text;
    process.stdout.write(same ? "examples/tb2/rows.jsonl is up to date\n" : "examples/tb2/rows.jsonl is stale: run node tools/examples/pack-tb2-rows.mjs\n");
    process.exit(same ? 0 : 1);
  }
  writeFileSync(out, text);
  process.stdout.write(`wrote ${out} (${text.split("\n").length - 1} rows, ${text.length} bytes)\n`);
}
