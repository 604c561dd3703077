import { lstat, open, readdir, readFile, realpath, stat } from "node:fs/promises";
import { basename, join, resolve, sep } from "node:path";
import type { TrialResult } from "@proctor/schema";
import { buildComparison, buildLeaderboard, buildRunReport, fullReason, leaderboardPlots, readFirstFailure, runStats, trialFlags, type Leaderboard, type RunReport, type RunStats } from "@proctor/report";
import { trialCostUsd, wilsonInterval } from "@proctor/reward";
import type { RunDir } from "./run-dir";

/** Files of a trial dir the viewer may serve; nothing else is reachable. */
export const TRIAL_FILES: ReadonlySet<string> = new Set([
  "agent/stdout.txt",
  "agent/stderr.txt",
  "agent/trajectory.json",
  "verifier/test-stdout.txt",
  "verifier/test-stderr.txt",
  "verifier/reward.json",
  "verifier/reward.txt",
  "setup/install.log",
]);
/**
 * Where a trial dir keeps what the sandbox itself wrote to /logs (the task's tests, the agent):
 * `logs/verifier/...`, `logs/agent/...` (competitions: /home/logs). A dir the log cap cut has a
 * `logs/<dir>.TRUNCATED` note beside it.
 */
export const SANDBOX_LOGS_DIR = "logs";
/** Most files of logs/ listed on a trial page (the rest are counted). */
export const SANDBOX_FILES_MAX = 500;
/** Most bytes of one `.TRUNCATED` note shown. */
const NOTE_BYTES = 4096;

/** Most bytes of a log sent per request; the page asks for the next (or earlier) chunk. */
export const LOG_CHUNK = 256 * 1024;
/** Most trial rows per page. */
export const PAGE_MAX = 500;
const SORTS = new Set(["taskId", "status", "durationMs", "reward", "finishedAt"]);

/** The runs one caller may see. The local viewer shows every run dir; the server only the caller's batches. */
export interface RunSource {
  /** Every run visible to the caller (any order: the API sorts newest first). */
  runs(): Promise<RunDir[]>;
  /** One run by id; null when unknown or not visible (both answer the same 404). */
  run(runId: string): Promise<RunDir | null>;
}

export interface ViewerApiOptions {
  /** Include run and trial directories (paths on the host's disk) in answers; default true. */
  showPaths?: boolean;
  /** A task's instruction; default: `<source>/<taskId>/instruction.md` for each of run.json's sources. */
  instruction?: (run: RunDir, taskId: string) => Promise<string | null>;
  /** Fields that replace a run's list entry fields (a server batch's own status, its owner). */
  describe?: (run: RunDir) => Record<string, unknown>;
}

/** A JSON answer: HTTP status and body (errors are `{error, message}`). */
export interface ApiAnswer {
  status: number;
  body: unknown;
}

const notFound = (message: string): ApiAnswer => ({ status: 404, body: { error: "not_found", message } });
const badRequest = (message: string): ApiAnswer => ({ status: 400, body: { error: "bad_request", message } });

/** Bootstrap draws per report: the run page of a live 10,000-trial run is recomputed on every change. */
const BOOTSTRAP_DRAWS = 1_000_000;

/** The run's report, once per change; the bootstrap's resamples shrink with the run (its `method` says how many). */
function report(run: RunDir): RunReport {
  return run.cached("report", () => {
    const resamples = Math.max(100, Math.min(500, Math.floor(BOOTSTRAP_DRAWS / Math.max(1, run.results.length))));
    return buildRunReport(run.loaded(), { resamples });
  });
}

/** The leaderboard's view of the run, once per change. */
function stats(run: RunDir): RunStats {
  return run.cached("stats", () => runStats(run.loaded()));
}

/** The last leaderboard built for a source, with the run versions it was built from. */
const boards = new WeakMap<RunSource, { key: string; board: Leaderboard }>();

/** The leaderboard over `runs`, rebuilt only when a run appeared, went, or changed (a run's stats are memoized apart). */
function leaderboardOf(source: RunSource, runs: readonly RunDir[]): Leaderboard {
  const key = runs.map((r) => `${r.dir}\0${r.version}`).join("\n");
  const last = boards.get(source);
  if (last?.key === key) return last.board;
  const board = buildLeaderboard(runs.map(stats));
  boards.set(source, { key, board });
  return board;
}

function listEntry(run: RunDir, options: ViewerApiOptions) {
  // describe() is not memoized: a server batch's status can change without a file changing.
  return { ...baseEntry(run), ...options.describe?.(run) };
}

function baseEntry(run: RunDir) {
  return run.cached("entry", () => {
    const results = run.results;
    const s = run.summary;
    const r = report(run);
    const passed = r.trials.passed;
    return {
      runId: run.runId,
      agent: r.agent,
      model: r.model,
      dataset: run.config?.sources.map((x) => basename(x)).join(", ") ?? null,
      tasks: run.config?.tasks.length ?? new Set(results.map((x) => x.taskId)).size,
      trials: { planned: s.trials.planned, finished: results.length, passed, failed: r.trials.failed, errored: r.trials.errored },
      passRate: results.length === 0 ? null : passed / results.length,
      passRateCi: wilsonInterval(passed, results.length),
      durationMs: s.durationMs,
      startedAt: s.startedAt,
      status: s.status as string,
    };
  });
}

function trialRow(r: TrialResult) {
  const flags = trialFlags(r);
  return {
    trialId: r.trialId,
    taskId: r.taskId,
    attempt: r.attempt,
    category: r.category,
    status: r.status,
    reward: r.reward,
    errorKind: r.error?.kind ?? null,
    reason: r.status === "passed" && flags.length === 0 ? "" : fullReason(r),
    durationMs: r.durationMs,
    flagged: flags.length > 0,
    costUsd: trialCostUsd(r),
  };
}

type SortValue = string | number;
function sortKey(key: string): (r: TrialResult) => SortValue {
  if (key === "durationMs") return (r) => r.durationMs;
  if (key === "reward") return (r) => r.reward ?? -1;
  if (key === "status") return (r) => r.status;
  if (key === "finishedAt") return (r) => r.finishedAt;
  return (r) => r.trialId;
}

/** The run's trials sorted by `sort` (`-` prefix: descending), memoized until the run changes. */
function sorted(run: RunDir, sort: string): TrialResult[] {
  return run.cached(`sorted:${sort}`, () => {
    const get = sortKey(sort.replace(/^-/, ""));
    const dir = sort.startsWith("-") ? -1 : 1;
    // Decorate once: a comparator calling get() twice per comparison costs 10x at 10,000 rows.
    const keyed = run.results.map((r) => ({ k: get(r), id: r.trialId, r }));
    keyed.sort((x, y) => (x.k < y.k ? -dir : x.k > y.k ? dir : x.id < y.id ? -1 : x.id > y.id ? 1 : 0));
    return keyed.map((x) => x.r);
  });
}

/** instruction.md of a task from run.json's sources (a dir of task dirs, or the task dir itself); null when not found. */
async function defaultInstruction(run: RunDir, taskId: string): Promise<string | null> {
  for (const source of run.config?.sources ?? []) {
    const candidates = [join(source, taskId, "instruction.md")];
    if (basename(source) === taskId) candidates.push(join(source, "instruction.md"));
    for (const file of candidates) {
      const text = await readFile(resolve(file), "utf8").catch(() => null);
      if (text !== null) return text.length > LOG_CHUNK ? `${text.slice(0, LOG_CHUNK)}\n[... cut]` : text;
    }
  }
  return null;
}

/** Moves `at` forward past UTF-8 continuation bytes so a chunk never starts inside a character. */
function charStart(buffer: Buffer, at: number): number {
  let i = at;
  while (i < buffer.length && i - at < 4 && ((buffer[i] ?? 0) & 0xc0) === 0x80) i++;
  return i;
}

/** Length of `buffer` without a character cut at its end. */
function charEnd(buffer: Buffer): number {
  const i = buffer.length;
  // Back up over continuation bytes to the lead byte; keep it only if its character is complete.
  let back = 0;
  while (back < 4 && i - back - 1 >= 0 && ((buffer[i - back - 1] ?? 0) & 0xc0) === 0x80) back++;
  const lead = buffer[i - back - 1];
  if (lead === undefined || lead < 0xc0) return i;
  const need = lead >= 0xf0 ? 4 : lead >= 0xe0 ? 3 : 2;
  return back + 1 >= need ? i : i - back - 1;
}

/**
 * One chunk of a trial's log file: `offset` reads forward from there; `end` reads the chunk
 * before that byte; neither gives the tail (the last LOG_CHUNK bytes). Only this chunk is read.
 */
async function readLog(path: string, name: string, query: URLSearchParams): Promise<ApiAnswer> {
  const handle = await open(path, "r").catch(() => null);
  if (!handle) return notFound(`${name} is not there`);
  try {
    const size = (await handle.stat()).size;
    const limit = Math.min(LOG_CHUNK, Math.max(1, Number(query.get("limit") ?? LOG_CHUNK) || LOG_CHUNK));
    let start: number;
    let end: number;
    if (query.has("offset")) {
      start = Math.min(size, Math.max(0, Number(query.get("offset")) || 0));
      end = Math.min(size, start + limit);
    } else {
      end = query.has("end") ? Math.min(size, Math.max(0, Number(query.get("end")) || 0)) : size;
      start = Math.max(0, end - limit);
    }
    const buffer = Buffer.alloc(end - start);
    const { bytesRead } = await handle.read(buffer, 0, buffer.length, start);
    let bytes = buffer.subarray(0, bytesRead);
    // Whole characters only: a reader going backwards drops the cut head, one going forward the cut tail.
    const skip = start > 0 ? charStart(bytes, 0) : 0;
    const keep = start + bytesRead < size ? charEnd(bytes) : bytes.length;
    bytes = bytes.subarray(skip, Math.max(skip, keep));
    const from = start + skip;
    const to = from + bytes.length;
    return { status: 200, body: { name, size, start: from, end: to, text: bytes.toString("utf8"), prev: from > 0 ? from : null, next: to < size ? to : null } };
  } finally {
    await handle.close();
  }
}

/** A file the sandbox wrote, and a dir of them the log cap cut. */
interface SandboxFiles {
  files: { name: string; size: number }[];
  /** Files past SANDBOX_FILES_MAX, not listed. */
  omitted: number;
  /** `logs/agent` with the note of its `logs/agent.TRUNCATED`. */
  truncated: { dir: string; note: string }[];
}

/**
 * Every regular file under the trial's logs/ (breadth first, names sorted; links are not
 * followed), and the `.TRUNCATED` notes of the dirs the log cap cut.
 */
async function sandboxFiles(trialDir: string): Promise<SandboxFiles> {
  const out: SandboxFiles = { files: [], omitted: 0, truncated: [] };
  const queue = [SANDBOX_LOGS_DIR];
  while (queue.length > 0) {
    const rel = queue.shift() as string;
    const entries = await readdir(join(trialDir, rel), { withFileTypes: true }).catch(() => []);
    for (const entry of entries.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))) {
      const name = `${rel}/${entry.name}`;
      if (entry.isDirectory()) queue.push(name);
      else if (entry.isFile() && rel === SANDBOX_LOGS_DIR && entry.name.endsWith(".TRUNCATED")) {
        const note = await readFile(join(trialDir, name)).then((b) => b.subarray(0, NOTE_BYTES).toString("utf8").trim(), () => "");
        out.truncated.push({ dir: name.slice(0, -".TRUNCATED".length), note });
      } else if (entry.isFile()) {
        if (out.files.length >= SANDBOX_FILES_MAX) out.omitted++;
        else out.files.push({ name, size: (await stat(join(trialDir, name)).catch(() => null))?.size ?? 0 });
      }
    }
  }
  return out;
}

/** The host path of a logs/ file a request names, or null: a relative path to a regular file inside the trial's logs/, reached without links. */
async function sandboxFilePath(trialDir: string, name: string): Promise<string | null> {
  const parts = name.split("/");
  if (parts[0] !== SANDBOX_LOGS_DIR || parts.length < 2 || parts.some((p) => p === "" || p === "." || p === ".." || p.includes("\0"))) return null;
  const path = join(trialDir, ...parts);
  const [root, real, info] = await Promise.all([realpath(join(trialDir, SANDBOX_LOGS_DIR)).catch(() => null), realpath(path).catch(() => null), lstat(path).catch(() => null)]);
  if (!root || !real || !info?.isFile() || !real.startsWith(`${root}${sep}`)) return null;
  return path;
}

function newestFirst(a: RunDir, b: RunDir): number {
  const x = a.summary.startedAt;
  const y = b.summary.startedAt;
  return x < y ? 1 : x > y ? -1 : a.runId < b.runId ? 1 : -1;
}

/**
 * The viewer's JSON API, the same for every host: `path` is what follows `api/` (split on `/`,
 * decoded). GET only; the host authenticates and decides which runs `source` holds.
 *
 * - `runs`: the runs list; `runs/<id>`: run page data; `runs/<id>/trials?status&category&kind&q&sort&offset&limit`:
 *   one page of the trial table, filtered and sorted here (limit <= 500), `total` = matching rows;
 * - `runs/<id>/trials/<trialId>`: trial page data (Proctor's captures in `files`, what the sandbox
 *   wrote under logs/ in `sandboxFiles` with the log cap's cuts); `.../file?name&(offset|end)`: one
 *   chunk of a log (a TRIAL_FILES name, or `logs/...`);
 * - `compare?a&b`: the paired comparison of two runs;
 * - `leaderboard`: every run grouped by dataset and agent + model (@proctor/report's Leaderboard);
 *   `leaderboard/plots?dataset&runs`: one dataset's leaderboard group and the data of its plots
 *   (`runs`: comma-separated run ids the bars, pass@k curves and heat map show; default the newest of each row).
 */
export async function answerApi(source: RunSource, path: readonly string[], query: URLSearchParams, options: ViewerApiOptions = {}): Promise<ApiAnswer> {
  const showPaths = options.showPaths ?? true;
  const [what, id, sub, trialId, leaf, ...rest] = path;
  const runOr404 = async (runId: string): Promise<RunDir | null> => {
    const run = await source.run(runId);
    if (run) await run.refresh();
    return run;
  };
  if (what === "runs" && id === undefined) {
    const runs = await source.runs();
    await Promise.all(runs.map((r) => r.refresh()));
    return { status: 200, body: { runs: [...runs].sort(newestFirst).map((r) => listEntry(r, options)) } };
  }
  if (what === "runs" && id !== undefined) {
    const run = await runOr404(id);
    if (!run) return notFound(`no run ${id}`);
    if (sub === undefined) {
      const r = report(run);
      return {
        status: 200,
        body: {
          ...listEntry(run, options),
          meanReward: r.meanReward,
          passAtK: r.passAtK,
          byCategory: r.byCategory,
          errorsByKind: r.errorsByKind,
          cost: r.cost,
          budget: r.budget,
          categories: run.cached("categories", () => [...new Set(run.results.map((x) => x.category ?? "uncategorized"))].sort()),
          dir: showPaths ? run.dir : null,
        },
      };
    }
    if (sub !== "trials") return notFound(`no such page: runs/${id}/${sub}`);
    if (trialId === undefined) {
      const status = query.get("status") || null;
      const category = query.get("category") || null;
      const kind = query.get("kind") || null;
      const search = (query.get("q") ?? "").trim().toLowerCase();
      const offset = Math.max(0, Math.floor(Number(query.get("offset") ?? 0)) || 0);
      const limit = Math.min(PAGE_MAX, Math.max(1, Math.floor(Number(query.get("limit") ?? 50)) || 50));
      const sort = query.get("sort") || "taskId";
      if (!SORTS.has(sort.replace(/^-/, ""))) return badRequest(`sort must be one of ${[...SORTS].join(", ")} (optionally prefixed with -), got ${JSON.stringify(sort)}`);
      const all = sorted(run, sort);
      const filtered =
        !status && !category && !kind && !search
          ? all
          : all.filter(
              (r) =>
                (!status || r.status === status) &&
                (!category || (r.category ?? "uncategorized") === category) &&
                (!kind || (r.error?.kind ?? "") === kind) &&
                (!search || r.taskId.toLowerCase().includes(search) || r.trialId.toLowerCase().includes(search)),
            );
      return { status: 200, body: { total: filtered.length, offset, limit, trials: filtered.slice(offset, offset + limit).map(trialRow) } };
    }
    const trial = run.trial(trialId);
    if (!trial || rest.length > 0) return notFound(`no trial ${trialId} in ${id}`);
    const trialDir = join(run.dir, "trials", trial.trialId);
    if (leaf === "file") {
      const name = query.get("name") ?? "";
      if (TRIAL_FILES.has(name)) return readLog(join(trialDir, name), name, query);
      if (name.startsWith(`${SANDBOX_LOGS_DIR}/`)) {
        const path = await sandboxFilePath(trialDir, name);
        return path ? readLog(path, name, query) : notFound(`${name} is not a file the sandbox wrote to this trial's logs`);
      }
      return badRequest(`not a trial file: ${name}`);
    }
    if (leaf !== undefined) return notFound(`no such page: ${leaf}`);
    const files: Record<string, number> = {};
    for (const name of TRIAL_FILES) {
      const s = await stat(join(trialDir, name)).catch(() => null);
      if (s?.isFile()) files[name] = s.size;
    }
    const instruction = await (options.instruction ?? defaultInstruction)(run, trial.taskId);
    const body = { result: trial, reason: fullReason(trial), failure: await readFirstFailure(trial, trialDir), flags: trialFlags(trial), files, sandboxFiles: await sandboxFiles(trialDir), instruction, trialDir: showPaths ? trialDir : null };
    // Without paths, the run dir inside the result (an uploaded agent's dir, a message) reads as "." instead.
    return { status: 200, body: showPaths ? body : (JSON.parse(JSON.stringify(body).split(run.dir).join(".")) as unknown) };
  }
  if (what === "leaderboard" && (id === undefined || (id === "plots" && sub === undefined))) {
    const runs = await source.runs();
    await Promise.all(runs.map((r) => r.refresh()));
    if (id === undefined) return { status: 200, body: leaderboardOf(source, runs) };
    const all = runs.map(stats);
    const dataset = query.get("dataset") ?? "";
    const runIds = (query.get("runs") ?? "").split(",").filter(Boolean);
    const plots = leaderboardPlots(all, dataset, { runIds });
    if (!plots) return notFound(`no run of dataset ${JSON.stringify(dataset)}`);
    const group = buildLeaderboard(all.filter((s) => s.dataset.key === dataset)).groups[0] ?? null;
    return { status: 200, body: { group, plots } };
  }
  if (what === "compare" && id === undefined) {
    const a = await runOr404(query.get("a") ?? "");
    if (!a) return notFound(`no run ${query.get("a") ?? ""}`);
    const b = await runOr404(query.get("b") ?? "");
    if (!b) return notFound(`no run ${query.get("b") ?? ""}`);
    const c = buildComparison(a.loaded(), b.loaded(), { resamples: 2000 });
    return { status: 200, body: { a: listEntry(a, options), b: listEntry(b, options), comparison: c.comparison, pinsDiffer: c.pinsDiffer } };
  }
  return notFound(`api/${path.join("/")}`);
}
