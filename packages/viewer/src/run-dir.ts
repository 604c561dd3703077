import { open, readFile, stat } from "node:fs/promises";
import { basename, join, resolve } from "node:path";
import { RunConfig, RunSummary, TrialResult } from "@proctor/schema";
import { summarize } from "@proctor/reward";
import type { LoadedRun } from "@proctor/report";

/** Bytes of results.jsonl read per call while catching up (a 10,000-trial run is ~10 MB). */
const READ_CHUNK = 4 * 1024 * 1024;

export interface RunDirOptions {
  /** Trials planned when run.json does not say (a server batch before its run starts). */
  plannedTrials?: number;
  /** When the run began, if no result or summary says yet (a queued server batch: its creation time). */
  startedAt?: string;
}

/** size + mtime + inode: changes whenever the file is rewritten or replaced. */
function stampOf(s: { size: number; mtimeMs: number; ino: number } | null): string {
  return s ? `${s.size}:${s.mtimeMs}:${s.ino}` : "-";
}

/**
 * One run directory kept in memory and brought up to date incrementally: `refresh()` stats
 * results.jsonl and parses only the bytes appended since the last call (a byte offset, with a
 * torn last line kept for the next call); run.json and summary.json are re-read only when their
 * size, mtime or inode changed. A shorter or replaced results.jsonl starts over. Everything
 * derived from the results (sorted tables, reports) is memoized per `version`.
 */
export class RunDir {
  readonly dir: string;
  config: RunConfig | null = null;
  /** Lines of results.jsonl that did not parse as a TrialResult. */
  skippedLines = 0;
  /** Bumped whenever anything read from the directory changed. */
  version = 0;
  private summaryFile: RunSummary | null = null;
  /** run.json and summary.json as written (for optional fields the schema does not carry: see LoadedRun.raw). */
  private raw: { config: unknown; summary: unknown } = { config: null, summary: null };
  private readonly byTrial = new Map<string, TrialResult>();
  private offset = 0;
  private resultsIno = -1;
  private partial: Buffer = Buffer.alloc(0);
  private stamps = { config: "", summary: "" };
  private memo = new Map<string, unknown>();
  private memoVersion = 0;
  private refreshing: Promise<boolean> | null = null;
  private again = false;

  constructor(
    dir: string,
    private readonly options: RunDirOptions = {},
  ) {
    this.dir = resolve(dir);
  }

  /** Run id: summary.json's, else run.json's, else the directory's name. */
  get runId(): string {
    return this.summaryFile?.runId ?? this.config?.runId ?? basename(this.dir);
  }

  /** Bytes of results.jsonl consumed so far (for tests and the bench). */
  get resultsOffset(): number {
    return this.offset;
  }

  /**
   * Read what changed on disk; resolves true when anything did. Concurrent calls share one read
   * (and a call made during a read triggers one more pass after it).
   */
  refresh(): Promise<boolean> {
    if (this.refreshing) {
      this.again = true;
      return this.refreshing;
    }
    this.refreshing = (async () => {
      let changed = false;
      do {
        this.again = false;
        if (await this.readOnce()) changed = true;
      } while (this.again);
      return changed;
    })().finally(() => {
      this.refreshing = null;
    });
    return this.refreshing;
  }

  private async readOnce(): Promise<boolean> {
    let changed = false;
    const [configStat, summaryStat, resultsStat] = await Promise.all(
      ["run.json", "summary.json", "results.jsonl"].map((name) => stat(join(this.dir, name)).catch(() => null)),
    );
    const configStamp = stampOf(configStat ?? null);
    if (configStamp !== this.stamps.config) {
      this.stamps.config = configStamp;
      const read = parseJson(await readFile(join(this.dir, "run.json"), "utf8").catch(() => null), RunConfig);
      this.config = read.parsed;
      this.raw = { ...this.raw, config: read.raw };
      changed = true;
    }
    const summaryStamp = stampOf(summaryStat ?? null);
    if (summaryStamp !== this.stamps.summary) {
      this.stamps.summary = summaryStamp;
      const read = parseJson(await readFile(join(this.dir, "summary.json"), "utf8").catch(() => null), RunSummary);
      this.summaryFile = read.parsed;
      this.raw = { ...this.raw, summary: read.raw };
      changed = true;
    }
    if (await this.readResults(resultsStat ?? null)) changed = true;
    if (changed) this.version++;
    return changed;
  }

  private async readResults(s: { size: number; ino: number } | null): Promise<boolean> {
    const size = s?.size ?? 0;
    const replaced = s !== null && this.resultsIno !== -1 && s.ino !== this.resultsIno;
    if (size < this.offset || replaced) {
      // Truncated or replaced (a copy, a re-run into the same dir): start over.
      this.byTrial.clear();
      this.offset = 0;
      this.partial = Buffer.alloc(0);
      this.skippedLines = 0;
      if (size === 0) {
        this.resultsIno = s?.ino ?? -1;
        return true;
      }
    }
    if (s === null || size === this.offset) return false;
    this.resultsIno = s.ino;
    const handle = await open(join(this.dir, "results.jsonl"), "r");
    try {
      while (this.offset < size) {
        const buffer = Buffer.alloc(Math.min(READ_CHUNK, size - this.offset));
        const { bytesRead } = await handle.read(buffer, 0, buffer.length, this.offset);
        if (bytesRead === 0) break;
        this.offset += bytesRead;
        this.consume(buffer.subarray(0, bytesRead));
      }
    } finally {
      await handle.close();
    }
    return true;
  }

  /** Parse the complete lines of `chunk` (after any partial line kept from before). */
  private consume(chunk: Buffer): void {
    let data = this.partial.length > 0 ? Buffer.concat([this.partial, chunk]) : chunk;
    let start = 0;
    for (;;) {
      const nl = data.indexOf(10, start);
      if (nl < 0) break;
      this.line(data.toString("utf8", start, nl));
      start = nl + 1;
    }
    data = data.subarray(start);
    // Copy: the partial line must not pin the whole read buffer.
    this.partial = Buffer.from(data);
  }

  private line(text: string): void {
    if (text.trim() === "") return;
    let value: unknown;
    try {
      value = JSON.parse(text);
    } catch {
      this.skippedLines++;
      return;
    }
    const parsed = TrialResult.safeParse(value);
    if (!parsed.success) {
      this.skippedLines++;
      return;
    }
    // The last line for a trial wins and moves to the end (the order they finished in).
    this.byTrial.delete(parsed.data.trialId);
    this.byTrial.set(parsed.data.trialId, parsed.data);
  }

  /** A value computed from the current state, kept until the next change. */
  cached<T>(key: string, compute: () => T): T {
    if (this.memoVersion !== this.version) {
      this.memo.clear();
      this.memoVersion = this.version;
    }
    if (this.memo.has(key)) return this.memo.get(key) as T;
    const value = compute();
    this.memo.set(key, value);
    return value;
  }

  /** The finished trials, last line per trial id, in the order they finished. */
  get results(): TrialResult[] {
    return this.cached("results", () => [...this.byTrial.values()]);
  }

  trial(trialId: string): TrialResult | null {
    return this.byTrial.get(trialId) ?? null;
  }

  /** summary.json as written, or computed from results.jsonl when there is none (yet). */
  get summary(): RunSummary {
    if (this.summaryFile) return this.summaryFile;
    return this.cached("summary", () => {
      const results = this.results;
      const starts = results.map((r) => r.startedAt).sort();
      const ends = results.map((r) => r.finishedAt).sort();
      const planned = this.config ? this.config.tasks.length * this.config.attempts : (this.options.plannedTrials ?? results.length);
      return summarize({
        runId: this.runId,
        results,
        plannedTrials: Math.max(planned, results.length),
        attempts: this.config?.attempts ?? 1,
        startedAt: starts[0] ?? this.options.startedAt ?? new Date(0).toISOString(),
        now: ends[ends.length - 1] ?? starts[0] ?? this.options.startedAt ?? new Date(0).toISOString(),
        status: "running",
      });
    });
  }

  /** The shape @proctor/report works on. */
  loaded(): LoadedRun {
    return this.cached("loaded", () => ({ dir: this.dir, runId: this.runId, config: this.config, summary: this.summary, results: this.results, skippedLines: this.skippedLines, raw: this.raw }));
  }
}

function parseJson<T>(text: string | null, schema: { safeParse(value: unknown): { success: true; data: T } | { success: false } }): { parsed: T | null; raw: unknown } {
  if (text === null) return { parsed: null, raw: null };
  try {
    const raw = JSON.parse(text) as unknown;
    const parsed = schema.safeParse(raw);
    return { parsed: parsed.success ? parsed.data : null, raw };
  } catch {
    return { parsed: null, raw: null }; // rewritten atomically, but a copy may be cut short
  }
}
