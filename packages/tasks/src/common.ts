import { readFile } from "node:fs/promises";
import { TaskSpec, TASK_ID_PATTERN, silentLogger, type Logger } from "@proctor/schema";
import { parseDocument, isScalar, type Document } from "yaml";
import { TaskLoadError } from "./errors";
import { displayPath, fail, type Report } from "./fields";

/** Options every loader takes. */
export interface LoaderOptions {
  /** Where prepared directories (e.g. TB1 tests + run-tests.sh) are written; default: a dir under the OS temp dir. */
  cacheDir?: string;
  logger?: Logger;
}

/** What loading one task gives: the task, or null with at least one error. */
export interface LoadedTask {
  task: TaskSpec | null;
  errors: TaskLoadError[];
}

export function loggerOf(options: LoaderOptions): Logger {
  return options.logger ?? silentLogger;
}

/** Record a problem unless `name` is a valid task id. */
export function checkTaskId(name: string, dir: string, report: Report, what = "directory name"): boolean {
  if (TASK_ID_PATTERN.test(name)) return true;
  report.errors.push(
    new TaskLoadError(
      displayPath(dir),
      `${what} ${JSON.stringify(name)} is not a valid task id: use 1-128 of [A-Za-z0-9._-], starting with a letter or digit`,
      { taskId: name },
    ),
  );
  return false;
}

/**
 * The spec checked against the shared schema. A failure here is a loader bug, but it is still
 * reported as a load error for the task rather than passed on to the engine.
 */
export function finish(spec: TaskSpec, report: Report): LoadedTask {
  if (report.errors.length > 0) return { task: null, errors: report.errors };
  const parsed = TaskSpec.safeParse(spec);
  if (parsed.success) return { task: parsed.data, errors: [] };
  for (const issue of parsed.error.issues) {
    fail(report, `the loaded task is invalid at ${issue.path.join(".") || "(root)"}: ${issue.message}`);
  }
  return { task: null, errors: report.errors };
}

/** Read a UTF-8 file, recording a problem (and returning null) when it cannot be read. */
export async function readText(path: string, report: Report): Promise<string | null> {
  try {
    return await readFile(path, "utf8");
  } catch (error) {
    fail(report, `cannot be read: ${(error as Error).message}`);
    return null;
  }
}

/** Parse YAML, recording syntax errors with their line; null when it has any. */
export function parseYaml(text: string, report: Report): Document | null {
  const doc = parseDocument(text, { prettyErrors: true, uniqueKeys: true });
  if (doc.errors.length === 0) return doc;
  for (const error of doc.errors) {
    const line = error.linePos?.[0]?.line;
    const message = (error.message.split("\n")[0] ?? "").replace(/ at line \d+, column \d+:?$/, "");
    fail(report, `is not valid YAML${line === undefined ? "" : ` (line ${line})`}: ${message}`);
  }
  return null;
}

/**
 * A top-level scalar exactly as written. YAML reads `base_commit: 1234e56` or `version: 3.10` as
 * numbers (1.234e59, 3.1); for fields that are really strings the source text is the truth.
 */
export function scalarSource(doc: Document, text: string, key: string): string | undefined {
  const node = doc.get(key, true);
  if (!isScalar(node) || node.range === undefined || node.range === null) return undefined;
  if (typeof node.value === "string") return node.value;
  if (typeof node.value !== "number") return undefined;
  return text.slice(node.range[0], node.range[1]).trim();
}
