import { createHash, randomBytes } from "node:crypto";
import { createReadStream } from "node:fs";
import { mkdir, readdir, rename, rm, writeFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { Readable } from "node:stream";
import { extractArchive, type ExtractLimits } from "@proctor/archive";
import { TASK_ID_PATTERN, type TaskSpec } from "@proctor/schema";
import { asyncBufferFromFile, parquetMetadataAsync, parquetReadObjects, parquetSchema } from "hyparquet";
import { compressors } from "hyparquet-compressors";
import { stringify as toToml } from "smol-toml";
import type { LoadedTask, LoaderOptions } from "./common";
import { TaskLoadError } from "./errors";
import { displayPath } from "./fields";
import { loadNativeTask } from "./native";
import { defaultCacheDir, isDir } from "./tree";

/**
 * Terminal-Bench 2 dataset rows (JSONL, or parquet): one task per row, its directories as tars
 * (base64 strings; in parquet also raw binary columns).
 * Field names read (the brief's and the TB2 dataset's; extra fields are kept in `extra`):
 * - id: `task_id`, else `task_name` (the TB2 dataset's column), else `instance`, else `id`, else `name`
 * - `instruction` (required), `category`, `difficulty`, `tags` (list or JSON-encoded list)
 * - `docker_image`; `environment_tar` (the task's environment/: Dockerfile + build context);
 *   with neither, the runtime's default image is used (as for a native task without one).
 *   An empty `docker_image` ("") means no prebuilt image, as TB2 environments read it.
 * - `tests_tar` (required: tests/ with test.sh), `solution_tar` (solution/ with solve.sh)
 * - `max_agent_timeout_sec`, `max_test_timeout_sec`
 */
export interface Tb2Options extends LoaderOptions {
  /** Limits for each unpacked tar (defaults: TB2_ARCHIVE_LIMITS). */
  archiveLimits?: Partial<ExtractLimits>;
}

/** Bounds for each tar of a row: a task's directories, not a whole dataset. */
export const TB2_ARCHIVE_LIMITS: Partial<ExtractLimits> = {
  maxCompressedBytes: 256 * 1024 * 1024,
  maxTotalBytes: 1024 * 1024 * 1024,
  maxEntries: 20_000,
};

const TAR_FIELDS = { environment_tar: "environment", tests_tar: "tests", solution_tar: "solution" } as const;
const ID_FIELDS = ["task_id", "task_name", "instance", "id", "name"] as const;
const KNOWN = new Set<string>([...ID_FIELDS, ...Object.keys(TAR_FIELDS), "instruction", "category", "difficulty", "tags", "docker_image", "max_agent_timeout_sec", "max_test_timeout_sec"]);
const BASE64 = /^[A-Za-z0-9+/\r\n]*={0,2}\s*$/;

/** Reads a file line by line (lines of any length; a row's tars can be megabytes). */
function lines(path: string): AsyncIterable<string> {
  return createInterface({ input: createReadStream(path, { encoding: "utf8" }), crlfDelay: Infinity });
}

const PARQUET = /\.parquet$/i;
/** Parquet rows read at a time: a row holds a task's tars, so a small batch bounds memory. */
const PARQUET_BATCH_ROWS = 8;

/**
 * True when `path` is a .parquet file (read as TB2 rows only), or a .jsonl file whose first row is
 * a TB2 row (it has `tests_tar` or `environment_tar`); SWE-bench rows (`instance_id`, no tars) are
 * left to their own loader.
 */
export async function isTb2File(path: string): Promise<boolean> {
  if (PARQUET.test(path)) return true;
  if (!/\.jsonl$/i.test(path)) return false;
  try {
    for await (const line of lines(path)) {
      if (line.trim() === "") continue;
      const row: unknown = JSON.parse(line);
      return typeof row === "object" && row !== null && ("tests_tar" in row || "environment_tar" in row);
    }
  } catch {
    return false;
  }
  return false;
}

/** One row: where it is (`file:line`, `file: row n`), its place for `extra.tb2Source`, its JSON text. */
interface RowText {
  where: string;
  /** `line 3`, `row 3`: for "repeats ..." messages. */
  label: string;
  source: Record<string, unknown>;
  text: string;
}

async function* jsonlRows(file: string): AsyncGenerator<RowText> {
  let lineNo = 0;
  for await (const line of lines(file)) {
    lineNo++;
    if (line.trim() !== "") yield { where: `${displayPath(file)}:${lineNo}`, label: `line ${lineNo}`, source: { file: displayPath(file), line: lineNo }, text: line };
  }
}

/** A parquet cell as JSON: binary tars as base64, other binary as UTF-8 text, big integers as numbers. */
function jsonCell(key: string, value: unknown): unknown {
  if (value instanceof Uint8Array) return key in TAR_FIELDS ? Buffer.from(value).toString("base64") : Buffer.from(value).toString("utf8");
  if (typeof value === "bigint") return Number.isSafeInteger(Number(value)) ? Number(value) : value.toString();
  if (value instanceof Date) return value.toISOString();
  return value;
}

/**
 * Parquet rows (hyparquet; snappy, gzip, zstd, brotli, lz4), a few at a time, each turned into the
 * JSON text a JSONL row would have, so both formats load (and are cached) the same way.
 */
async function* parquetRows(file: string): AsyncGenerator<RowText> {
  const shown = displayPath(file);
  let buffer;
  let metadata;
  try {
    buffer = await asyncBufferFromFile(file);
    metadata = await parquetMetadataAsync(buffer);
  } catch (error) {
    throw new TaskLoadError(shown, `is not a readable parquet file: ${(error as Error).message}`, { cause: error });
  }
  const columns = parquetSchema(metadata).children.map((c) => c.element.name);
  if (!columns.includes("tests_tar")) {
    throw new TaskLoadError(shown, `has no tests_tar column (columns: ${columns.join(", ")}): a .parquet source is read as Terminal-Bench 2 rows; give SWE-bench rows as JSONL`, { field: "tests_tar" });
  }
  const total = Number(metadata.num_rows);
  for (let start = 0; start < total; start += PARQUET_BATCH_ROWS) {
    let rows: Record<string, unknown>[];
    try {
      // utf8: false keeps binary columns (raw tars) as bytes; UTF8-annotated columns are still strings.
      rows = await parquetReadObjects({ file: buffer, metadata, compressors, rowStart: start, rowEnd: Math.min(total, start + PARQUET_BATCH_ROWS), utf8: false });
    } catch (error) {
      throw new TaskLoadError(shown, `rows ${start + 1}-${Math.min(total, start + PARQUET_BATCH_ROWS)} could not be read: ${(error as Error).message}`, { cause: error });
    }
    for (const [i, row] of rows.entries()) {
      const n = start + i + 1;
      const json = Object.fromEntries(Object.entries(row).map(([k, v]) => [k, jsonCell(k, v)]));
      yield { where: `${shown}: row ${n}`, label: `row ${n}`, source: { file: shown, row: n }, text: JSON.stringify(json) };
    }
  }
}

/** Load every row of a TB2 JSONL or parquet file; a bad row is an error naming the file, line (row) and field. */
export async function loadTb2File(path: string, options: Tb2Options = {}): Promise<{ tasks: TaskSpec[]; errors: TaskLoadError[] }> {
  const file = resolve(path);
  const tasks: TaskSpec[] = [];
  const errors: TaskLoadError[] = [];
  const seen = new Map<string, string>();
  try {
    for await (const row of PARQUET.test(file) ? parquetRows(file) : jsonlRows(file)) {
      const loaded = await loadRow(row, options);
      errors.push(...loaded.errors);
      if (!loaded.task) continue;
      const first = seen.get(loaded.task.id);
      if (first !== undefined) {
        errors.push(new TaskLoadError(row.where, `task_id ${JSON.stringify(loaded.task.id)} repeats ${first}`, { field: "task_id", taskId: loaded.task.id }));
        continue;
      }
      seen.set(loaded.task.id, row.label);
      tasks.push(loaded.task);
    }
  } catch (error) {
    if (!(error instanceof TaskLoadError)) throw error;
    errors.push(error);
  }
  return { tasks: tasks.sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0)), errors };
}

async function loadRow({ where, source, text: line }: RowText, options: Tb2Options): Promise<LoadedTask> {
  const bad = (field: string, detail: string, taskId?: string): LoadedTask => ({
    task: null,
    errors: [new TaskLoadError(where, `${field} ${detail}`, { field, ...(taskId === undefined ? {} : { taskId }) })],
  });
  let row: Record<string, unknown>;
  try {
    const parsed: unknown = JSON.parse(line);
    if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) return bad("row", "must be a JSON object");
    row = parsed as Record<string, unknown>;
  } catch (error) {
    return bad("row", `is not valid JSON: ${(error as Error).message}`);
  }
  const idField = ID_FIELDS.find((f) => row[f] !== undefined && row[f] !== null);
  if (idField === undefined) return bad("task_id", "is missing: give each row a task_id (or task_name / instance / id / name)");
  const id = row[idField];
  if (typeof id !== "string" || !TASK_ID_PATTERN.test(id)) {
    return bad(idField, `must be a task id (1-128 of [A-Za-z0-9._-], starting with a letter or digit), got ${JSON.stringify(id).slice(0, 80)}`);
  }
  const str = (field: string, required = false): string | null | LoadedTask => {
    const value = row[field];
    if (value === undefined || value === null) return required ? bad(field, "is missing", id) : null;
    if (typeof value !== "string" || (required && value.trim() === "")) return bad(field, `must be a non-empty string, got ${JSON.stringify(value).slice(0, 80)}`, id);
    return value;
  };
  const num = (field: string): number | null | LoadedTask => {
    const value = row[field];
    if (value === undefined || value === null) return null;
    const n = typeof value === "string" && value.trim() !== "" ? Number(value) : value;
    if (typeof n !== "number" || !Number.isFinite(n) || n <= 0) return bad(field, `must be a positive number of seconds, got ${JSON.stringify(value).slice(0, 80)}`, id);
    return n;
  };
  const fields: Record<string, string | number | null> = {};
  // "" (or blanks): no prebuilt image, so the environment_tar is built (TB2 rows say it so).
  if (typeof row.docker_image === "string" && row.docker_image.trim() === "") row = { ...row, docker_image: null };
  for (const f of ["instruction", "category", "difficulty", "docker_image"]) {
    const v = str(f, f === "instruction");
    if (v !== null && typeof v === "object") return v;
    fields[f] = v;
  }
  for (const f of ["max_agent_timeout_sec", "max_test_timeout_sec"]) {
    const v = num(f);
    if (v !== null && typeof v === "object") return v;
    fields[f] = v;
  }
  let tags: string[] = [];
  if (row.tags !== undefined && row.tags !== null) {
    let value = row.tags;
    if (typeof value === "string") {
      try {
        value = JSON.parse(value);
      } catch {
        value = [value];
      }
    }
    if (!Array.isArray(value) || !value.every((t) => typeof t === "string")) return bad("tags", `must be a list of strings, got ${JSON.stringify(row.tags).slice(0, 80)}`, id);
    tags = value;
  }
  const tars: Partial<Record<keyof typeof TAR_FIELDS, Buffer>> = {};
  for (const field of Object.keys(TAR_FIELDS) as (keyof typeof TAR_FIELDS)[]) {
    const value = row[field];
    if (value === undefined || value === null || value === "") continue;
    if (typeof value !== "string" || !BASE64.test(value)) return bad(field, "must be a base64-encoded tar (or tar.gz)", id);
    tars[field] = Buffer.from(value, "base64");
  }
  if (!tars.tests_tar) return bad("tests_tar", "is missing: the row needs its tests/ directory (with test.sh) as a base64 tar", id);

  // The row becomes a native task directory, content-addressed by the row's text.
  const cacheRoot = options.cacheDir ?? defaultCacheDir();
  const dir = join(cacheRoot, `tb2-${id}-${createHash("sha256").update(line).digest("hex").slice(0, 16)}`, id);
  if (!(await isDir(dir))) {
    const temp = `${dir}.tmp-${process.pid}-${randomBytes(4).toString("hex")}`;
    try {
      await mkdir(temp, { recursive: true });
      for (const [field, data] of Object.entries(tars) as [keyof typeof TAR_FIELDS, Buffer][]) {
        const name = TAR_FIELDS[field];
        const dest = join(temp, `${name}.unpacked`);
        try {
          await extractArchive(Readable.from([data]), dest, { ...TB2_ARCHIVE_LIMITS, ...options.archiveLimits });
        } catch (error) {
          return bad(field, `could not be unpacked: ${(error as Error).message}`, id);
        }
        // A tar of the directory itself (tests/test.sh) or of its contents (test.sh): both work.
        const entries = await readdir(dest, { withFileTypes: true });
        const only = entries.length === 1 ? entries[0] : undefined;
        const inner = only?.isDirectory() && only.name === name ? join(dest, name) : dest;
        await rename(inner, join(temp, name));
        await rm(dest, { recursive: true, force: true });
      }
      await writeFile(join(temp, "instruction.md"), fields.instruction as string);
      const metadata: Record<string, unknown> = { tags };
      if (fields.category !== null) metadata.category = fields.category;
      if (fields.difficulty !== null) metadata.difficulty = fields.difficulty;
      const agent = fields.max_agent_timeout_sec !== null ? { timeout_sec: fields.max_agent_timeout_sec } : {};
      const verifier = fields.max_test_timeout_sec !== null ? { timeout_sec: fields.max_test_timeout_sec } : {};
      const environment = fields.docker_image !== null ? { docker_image: fields.docker_image } : {};
      const toml = { metadata, agent, verifier, environment };
      await writeFile(join(temp, "task.toml"), toToml(toml));
      await mkdir(join(dir, ".."), { recursive: true });
      await rename(temp, dir).catch(async (error: NodeJS.ErrnoException) => {
        if ((error.code === "ENOTEMPTY" || error.code === "EEXIST") && (await isDir(dir))) return;
        throw error;
      });
    } finally {
      await rm(temp, { recursive: true, force: true });
    }
  }
  const loaded = await loadNativeTask(dir, options);
  if (!loaded.task) {
    return { task: null, errors: loaded.errors.map((e) => new TaskLoadError(where, `${id}: ${e.message}`, { taskId: id, ...(e.field === undefined ? {} : { field: e.field }) })) };
  }
  const extra: Record<string, unknown> = { ...loaded.task.extra, tb2Source: source };
  // Unknown fields are kept, except big blobs (another tar, an archive) that would bloat run.json.
  for (const [key, value] of Object.entries(row)) if (!KNOWN.has(key) && !(typeof value === "string" && value.length > 64 * 1024)) extra[key] = value;
  return { task: { ...loaded.task, extra }, errors: loaded.errors };
}
