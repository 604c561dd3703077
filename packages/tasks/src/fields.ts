import { relative, isAbsolute, sep } from "node:path";
import { z } from "zod";
import { TaskLoadError } from "./errors";

/** Where a loader reports problems: the file (as shown to the user) and the errors so far. */
export interface Report {
  file: string;
  taskId?: string;
  errors: TaskLoadError[];
}

/** Record one problem with `field` in the report's file. */
export function fail(report: Report, detail: string, field?: string): void {
  report.errors.push(new TaskLoadError(report.file, detail, { field, taskId: report.taskId }));
}

/** A path as shown in messages: relative to the working directory when inside it, else absolute. */
export function displayPath(path: string): string {
  const rel = relative(process.cwd(), path);
  if (rel === "") return ".";
  if (rel.startsWith("..") || isAbsolute(rel)) return path;
  return rel.split(sep).join("/");
}

/** A value as quoted in messages: strings in JSON quotes, long things shortened. */
export function describe(value: unknown): string {
  if (value === undefined) return "nothing";
  if (value instanceof Date) return value.toISOString();
  if (typeof value === "number" || typeof value === "boolean" || typeof value === "bigint") return String(value);
  let text: string;
  try {
    text = JSON.stringify(value) ?? String(value);
  } catch {
    text = String(value);
  }
  return text.length > 80 ? `${text.slice(0, 77)}...` : text;
}

/** What a field must hold: a zod schema for the check and a phrase for the message. */
export interface Kind<T> {
  schema: z.ZodType<T>;
  expected: string;
}

const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

export const kinds = {
  positiveNumber: { schema: z.number().positive().finite(), expected: "a positive number" },
  positiveInt: { schema: z.number().int().positive(), expected: "a positive integer" },
  nonNegativeInt: { schema: z.number().int().nonnegative(), expected: "a whole number >= 0" },
  string: { schema: z.string().min(1), expected: "a non-empty string" },
  boolean: { schema: z.boolean(), expected: "true or false" },
  stringList: { schema: z.array(z.string()), expected: "a list of strings" },
  absolutePath: { schema: z.string().startsWith("/"), expected: 'an absolute path such as "/app"' },
  gradingMode: { schema: z.enum(["auto", "fresh", "shared"]), expected: '"auto", "fresh" or "shared"' },
  env: {
    schema: z
      .record(z.string().regex(ENV_NAME), z.union([z.string(), z.number(), z.boolean()]))
      .transform((env) => Object.fromEntries(Object.entries(env).map(([k, v]) => [k, String(v)]))),
    expected: "a table of NAME = \"value\" pairs (names are letters, digits and _)",
  },
} satisfies Record<string, Kind<unknown>>;

/**
 * Reads known keys from one table of a task file, checks each against its kind and records
 * every problem (never stops at the first); the keys it was not asked for stay in `rest()`.
 */
export class Section {
  private readonly used = new Set<string>();
  readonly raw: Record<string, unknown>;

  constructor(
    private readonly report: Report,
    raw: unknown,
    /** How a key of this table is written in messages, e.g. `[agent].timeout_sec`. */
    private readonly label: (key: string) => string,
  ) {
    this.raw = isTable(raw) ? raw : {};
  }

  has(key: string): boolean {
    return this.raw[key] !== undefined;
  }

  /** The raw value, marked as used, without any check. */
  take(key: string): unknown {
    this.used.add(key);
    return this.raw[key];
  }

  /** The checked value; undefined when absent or invalid (the problem is recorded). */
  get<T>(key: string, kind: Kind<T>): T | undefined {
    const value = this.take(key);
    if (value === undefined) return undefined;
    const parsed = kind.schema.safeParse(value);
    if (parsed.success) return parsed.data;
    this.fail(key, `must be ${kind.expected}, got ${describe(value)}`);
    return undefined;
  }

  /** Record a problem with `key` of this table. */
  fail(key: string, problem: string): void {
    fail(this.report, `${this.label(key)} ${problem}`, this.label(key));
  }

  /** Keys nobody asked for, verbatim (they go to TaskSpec.extra). */
  rest(): Record<string, unknown> {
    return Object.fromEntries(Object.entries(this.raw).filter(([key]) => !this.used.has(key)));
  }
}

/** TaskSpec.extra of a task file: its unknown top-level tables, and each known table's unread keys. */
export function extraFields(raw: Record<string, unknown>, sections: Record<string, Section>): Record<string, unknown> {
  const extra: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(raw)) if (!Object.hasOwn(sections, key)) extra[key] = value;
  for (const [name, section] of Object.entries(sections)) {
    const rest = section.rest();
    if (Object.keys(rest).length > 0) extra[name] = rest;
  }
  return extra;
}

export function isTable(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value) && !(value instanceof Date);
}

/** A list of strings, or one string taken as a list of one. Undefined (and recorded) when neither. */
export function stringOrList(section: Section, key: string): string[] | undefined {
  const value = section.raw[key];
  if (typeof value === "string") {
    section.take(key);
    return [value];
  }
  return section.get(key, kinds.stringList);
}

const SIZE = /^\s*(\d+(?:\.\d+)?)\s*([kmgt])(?:ib?|b)?\s*$/i;
const MB_PER_UNIT: Record<string, number> = { k: 1 / 1024, m: 1, g: 1024, t: 1024 * 1024 };

/** Megabytes in a legacy size string ("2G" -> 2048, "512M" -> 512, "1.5G" -> 1536); null if not one. */
export function parseSizeMb(text: string): number | null {
  const [, amount, unit] = SIZE.exec(text) ?? [];
  if (amount === undefined || unit === undefined) return null;
  const mb = Math.ceil(Number(amount) * (MB_PER_UNIT[unit.toLowerCase()] ?? Number.NaN));
  return Number.isFinite(mb) && mb > 0 ? mb : null;
}

/**
 * The name among `names` that a mistyped `word` most likely meant: the nearest by edit distance
 * (letters added, dropped, changed or swapped; case ignored) when it is close for the word's
 * length, or a name the word begins (`timeout` for `timeout_sec`); undefined when none is.
 */
export function nearestName(word: string, names: readonly string[]): string | undefined {
  const w = word.toLowerCase();
  let best: string | undefined;
  let bestDistance = Number.POSITIVE_INFINITY;
  for (const name of names) {
    const d = editDistance(w, name.toLowerCase());
    if (d < bestDistance) [best, bestDistance] = [name, d];
  }
  if (best !== undefined && bestDistance <= Math.max(1, Math.floor(w.length / 3))) return best;
  return w.length >= 4 ? names.find((name) => name.toLowerCase().startsWith(w)) : undefined;
}

/** Optimal string alignment distance: insertions, deletions, substitutions and adjacent swaps. */
function editDistance(a: string, b: string): number {
  const rows = Array.from({ length: a.length + 1 }, (_, i) => Array.from({ length: b.length + 1 }, (_, j) => (i === 0 ? j : j === 0 ? i : 0)));
  for (let i = 1; i <= a.length; i++) {
    for (let j = 1; j <= b.length; j++) {
      const row = rows[i] as number[];
      const up = rows[i - 1] as number[];
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      row[j] = Math.min((up[j] as number) + 1, (row[j - 1] as number) + 1, (up[j - 1] as number) + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) row[j] = Math.min(row[j] as number, ((rows[i - 2] as number[])[j - 2] as number) + 1);
    }
  }
  return (rows[a.length] as number[])[b.length] as number;
}
