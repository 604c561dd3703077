import { readFile } from "node:fs/promises";
import type { Logger } from "@proctor/schema";
import { silentLogger } from "@proctor/schema";
import { JsonlParseError, JsonlReadError } from "./errors";

export interface ReadJsonlOptions<T> {
  /** Validates each record, e.g. a zod schema (`{ schema: TrialResult }`). A failure is a JsonlParseError. */
  schema?: { parse(value: unknown): T };
  /** Return no records instead of throwing when the file does not exist. Default false. */
  missingOk?: boolean;
  /** Told about a tolerated truncated last line. */
  logger?: Logger;
}

export interface JsonlContents<T> {
  records: T[];
  /** An unterminated, unparseable last line (a crash mid-write) that was skipped; null when none. */
  truncatedTail: { line: number; content: string } | null;
}

const SHOWN = 200;

function shown(text: string): string {
  return text.length > SHOWN ? `${text.slice(0, SHOWN)}…` : text;
}

/**
 * Reads a JSONL file. Blank lines are skipped. Only the LAST line may be broken, and only if it
 * has no terminating newline (a crash mid-append): it is skipped and reported in
 * `truncatedTail`. Any complete line that is not JSON, or that `schema` rejects, throws a
 * JsonlParseError naming the file and line. A missing file throws JsonlReadError unless
 * `missingOk`.
 */
export async function readJsonl<T = unknown>(path: string, options: ReadJsonlOptions<T> = {}): Promise<JsonlContents<T>> {
  let text: string;
  try {
    text = await readFile(path, "utf8");
  } catch (error) {
    if (options.missingOk && (error as NodeJS.ErrnoException).code === "ENOENT") return { records: [], truncatedTail: null };
    throw new JsonlReadError(`${path}: cannot read: ${error instanceof Error ? error.message : String(error)}`, path, { cause: error });
  }
  const lines = text.split("\n");
  // After the last "\n" comes either "" (a complete file) or an unterminated line.
  const tail = lines.pop() as string;
  const records: T[] = [];
  const take = (raw: string, lineNo: number, terminated: boolean): boolean => {
    if (raw.trim() === "") return true;
    let value: unknown;
    try {
      value = JSON.parse(raw);
    } catch (error) {
      if (!terminated) return false;
      throw new JsonlParseError(path, lineNo, shown(raw), "not valid JSON", { cause: error });
    }
    if (options.schema) {
      try {
        value = options.schema.parse(value);
      } catch (error) {
        const reason = error instanceof Error ? error.message.replace(/\s+/g, " ").slice(0, SHOWN) : String(error);
        throw new JsonlParseError(path, lineNo, shown(raw), `record does not match the expected shape (${reason})`, { cause: error });
      }
    }
    records.push(value as T);
    return true;
  };
  lines.forEach((raw, index) => take(raw, index + 1, true));
  let truncatedTail: JsonlContents<T>["truncatedTail"] = null;
  if (!take(tail, lines.length + 1, false)) {
    truncatedTail = { line: lines.length + 1, content: shown(tail) };
    (options.logger ?? silentLogger).warn("skipped a truncated last line (a crash mid-write)", { path, ...truncatedTail });
  }
  return { records, truncatedTail };
}
