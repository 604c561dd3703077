import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import { watch, type FSWatcher } from "node:fs";
import { open, readFile, stat } from "node:fs/promises";
import { basename, dirname, extname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { WebSocketServer, type WebSocket } from "ws";
import type { Logger, TrialResult } from "@proctor/schema";
import { buildComparison, buildRunReport, findRunDirs, fullReason, loadRun, trialFlags, type LoadedRun } from "@proctor/report";
import { wilsonInterval } from "@proctor/reward";

/** assets/ beside src/ and dist/: the same path from source and from the build. */
const ASSETS = resolve(dirname(fileURLToPath(import.meta.url)), "..", "assets");
const TYPES: Record<string, string> = { ".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml" };
/** Files of a trial dir the viewer may serve; nothing else is reachable. */
const TRIAL_FILES = new Set(["agent/stdout.txt", "agent/stderr.txt", "agent/trajectory.json", "verifier/test-stdout.txt", "verifier/test-stderr.txt", "verifier/reward.json", "verifier/reward.txt", "setup/install.log"]);
/** Bytes of a log sent per request; the page asks for the next chunk. */
const LOG_CHUNK = 256 * 1024;
const PAGE_MAX = 500;

export interface ViewerOptions {
  /** Run dirs, or dirs holding run dirs (re-scanned for new runs). */
  paths: string[];
  host?: string;
  /** 0 picks a free port. */
  port?: number;
  logger?: Logger;
  /** How often the dirs are re-scanned for new runs and changed files, besides fs.watch (ms). */
  pollMs?: number;
}

export interface ViewerHandle {
  url: string;
  server: Server;
  close(): Promise<void>;
}

interface CachedRun {
  dir: string;
  run: LoadedRun;
  /** mtimes + sizes of results.jsonl and summary.json when loaded */
  stamp: string;
}

async function stampOf(dir: string): Promise<string> {
  const parts: string[] = [];
  for (const name of ["results.jsonl", "summary.json", "run.json"]) {
    const s = await stat(join(dir, name)).catch(() => null);
    parts.push(s ? `${s.size}:${s.mtimeMs}` : "-");
  }
  return parts.join("|");
}

function json(res: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { "content-type": "application/json; charset=utf-8", "cache-control": "no-store" });
  res.end(text);
}

function runListEntry(run: LoadedRun) {
  const s = run.summary;
  const passed = run.results.filter((r) => r.status === "passed").length;
  const report = buildRunReport(run, { resamples: 200 });
  return {
    runId: run.runId,
    agent: report.agent,
    model: report.model,
    dataset: run.config?.sources.map((x) => basename(x)).join(", ") ?? null,
    tasks: run.config?.tasks.length ?? new Set(run.results.map((r) => r.taskId)).size,
    trials: { planned: s.trials.planned, finished: run.results.length, passed, failed: report.trials.failed, errored: report.trials.errored },
    passRate: run.results.length === 0 ? null : passed / run.results.length,
    passRateCi: wilsonInterval(passed, run.results.length),
    durationMs: s.durationMs,
    startedAt: s.startedAt,
    status: s.status,
  };
}

function trialRow(r: TrialResult) {
  return {
    trialId: r.trialId,
    taskId: r.taskId,
    attempt: r.attempt,
    category: r.category,
    status: r.status,
    reward: r.reward,
    errorKind: r.error?.kind ?? null,
    reason: r.status === "passed" && trialFlags(r).length === 0 ? "" : fullReason(r),
    durationMs: r.durationMs,
    flagged: trialFlags(r).length > 0,
  };
}

/** instruction.md of a task from run.json's sources (a dir of task dirs, or the task dir itself); null when not found. */
async function instructionOf(run: LoadedRun, taskId: string): Promise<string | null> {
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

/**
 * Serves the viewer app and its JSON API over the run dirs named, and pushes `{type:"changed",
 * runIds}` over WebSocket `/ws` when a run's results or summary change (fs.watch, with a poll as
 * the fallback for file systems where watching does not work).
 */
export async function startViewer(options: ViewerOptions): Promise<ViewerHandle> {
  const host = options.host ?? "127.0.0.1";
  const logger = options.logger;
  const cache = new Map<string, CachedRun>();
  let runIds: string[] = [];
  const watchers = new Map<string, FSWatcher>();

  async function rescan(): Promise<string[]> {
    const dirs = await findRunDirs(options.paths).catch(() => [] as string[]);
    const changed: string[] = [];
    const seen = new Set<string>();
    for (const dir of dirs) {
      const stamp = await stampOf(dir);
      const cached = [...cache.values()].find((c) => c.dir === dir);
      if (cached && cached.stamp === stamp) {
        seen.add(cached.run.runId);
        continue;
      }
      const run = await loadRun(dir).catch(() => null);
      if (!run) continue;
      if (cached && cached.run.runId !== run.runId) cache.delete(cached.run.runId);
      cache.set(run.runId, { dir, run, stamp });
      seen.add(run.runId);
      changed.push(run.runId);
      if (!watchers.has(dir)) {
        try {
          const w = watch(dir, () => schedule());
          w.on("error", () => undefined);
          watchers.set(dir, w);
        } catch {
          // polling covers it
        }
      }
    }
    for (const id of [...cache.keys()]) if (!seen.has(id)) cache.delete(id);
    runIds = [...cache.values()].sort((a, b) => (a.run.summary.startedAt < b.run.summary.startedAt ? 1 : -1)).map((c) => c.run.runId);
    return changed;
  }

  const sockets = new Set<WebSocket>();
  function broadcast(message: unknown): void {
    const text = JSON.stringify(message);
    for (const ws of sockets) {
      // A slow client gets no more than it can take: skip it until its buffer drains (it refetches anyway).
      if (ws.readyState === ws.OPEN && ws.bufferedAmount < 1024 * 1024) ws.send(text);
    }
  }

  let scanning: Promise<void> | null = null;
  let again = false;
  function schedule(): void {
    if (scanning) {
      again = true;
      return;
    }
    scanning = (async () => {
      do {
        again = false;
        const changed = await rescan();
        if (changed.length > 0) broadcast({ type: "changed", runIds: changed });
      } while (again);
    })()
      .catch((error: unknown) => logger?.warn(`viewer: rescan failed: ${(error as Error).message}`))
      .finally(() => {
        scanning = null;
      });
  }

  await rescan();
  for (const path of options.paths) {
    try {
      const w = watch(resolve(path), () => schedule());
      w.on("error", () => undefined);
      watchers.set(`root:${path}`, w);
    } catch {
      // polling covers it
    }
  }
  const poll = setInterval(schedule, options.pollMs ?? 1000);

  function runOr404(res: ServerResponse, id: string): LoadedRun | null {
    const run = cache.get(id)?.run;
    if (!run) json(res, 404, { error: "not_found", message: `no run ${id}` });
    return run ?? null;
  }

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = new URL(req.url ?? "/", "http://localhost");
    const parts = url.pathname.split("/").filter(Boolean).map(decodeURIComponent);
    if (req.method !== "GET" && req.method !== "HEAD") return json(res, 405, { error: "method_not_allowed", message: "GET only" });
    if (parts[0] !== "api") {
      const name = parts.length === 0 ? "index.html" : parts.join("/");
      if (!/^[a-z0-9-]+\.(?:html|js|css|svg)$/.test(name)) return json(res, 404, { error: "not_found", message: url.pathname });
      const body = await readFile(join(ASSETS, name)).catch(() => null);
      if (!body) return json(res, 404, { error: "not_found", message: url.pathname });
      res.writeHead(200, {
        "content-type": TYPES[extname(name)] ?? "application/octet-stream",
        "cache-control": "no-cache",
        // Nothing leaves this origin: no CDN, no fonts, no analytics.
        "content-security-policy": "default-src 'self'; connect-src 'self' ws: wss:; img-src 'self' data:; style-src 'self'; script-src 'self'",
        "x-content-type-options": "nosniff",
      });
      res.end(body);
      return;
    }
    const [, what, id, sub, trialId, leaf] = parts;
    if (what === "runs" && !id) return json(res, 200, { runs: runIds.map((r) => runListEntry((cache.get(r) as CachedRun).run)) });
    if (what === "runs" && id && !sub) {
      const run = runOr404(res, id);
      if (!run) return;
      const report = buildRunReport(run, { resamples: 500 });
      return json(res, 200, {
        ...runListEntry(run),
        meanReward: report.meanReward,
        passAtK: report.passAtK,
        byCategory: report.byCategory,
        errorsByKind: report.errorsByKind,
        categories: [...new Set(run.results.map((r) => r.category ?? "uncategorized"))].sort(),
        dir: run.dir,
      });
    }
    if (what === "runs" && id && sub === "trials" && !trialId) {
      const run = runOr404(res, id);
      if (!run) return;
      const q = url.searchParams;
      const status = q.get("status") || null;
      const category = q.get("category") || null;
      const kind = q.get("kind") || null;
      const search = (q.get("q") ?? "").toLowerCase();
      const offset = Math.max(0, Number(q.get("offset") ?? 0) || 0);
      const limit = Math.min(PAGE_MAX, Math.max(1, Number(q.get("limit") ?? 50) || 50));
      const sort = q.get("sort") ?? "taskId";
      let rows = run.results.filter(
        (r) =>
          (!status || r.status === status) &&
          (!category || (r.category ?? "uncategorized") === category) &&
          (!kind || (r.error?.kind ?? "") === kind) &&
          (!search || r.taskId.toLowerCase().includes(search)),
      );
      const key = sort.replace(/^-/, "");
      const dir = sort.startsWith("-") ? -1 : 1;
      const get = (r: TrialResult): string | number => (key === "durationMs" ? r.durationMs : key === "reward" ? (r.reward ?? -1) : key === "status" ? r.status : key === "finishedAt" ? r.finishedAt : r.trialId);
      rows = [...rows].sort((x, y) => (get(x) < get(y) ? -dir : get(x) > get(y) ? dir : 0));
      return json(res, 200, { total: rows.length, offset, limit, trials: rows.slice(offset, offset + limit).map(trialRow) });
    }
    if (what === "runs" && id && sub === "trials" && trialId) {
      const run = runOr404(res, id);
      if (!run) return;
      const trial = run.results.find((r) => r.trialId === trialId);
      if (!trial) return json(res, 404, { error: "not_found", message: `no trial ${trialId} in ${id}` });
      const trialDir = join(run.dir, "trials", trial.trialId);
      if (leaf === "file") {
        const name = url.searchParams.get("name") ?? "";
        if (!TRIAL_FILES.has(name)) return json(res, 400, { error: "bad_request", message: `not a trial file: ${name}` });
        const offset = Math.max(0, Number(url.searchParams.get("offset") ?? 0) || 0);
        const handle = await open(join(trialDir, name), "r").catch(() => null);
        if (!handle) return json(res, 404, { error: "not_found", message: `${name} is not there` });
        try {
          const size = (await handle.stat()).size;
          const buffer = Buffer.alloc(Math.max(0, Math.min(LOG_CHUNK, size - offset)));
          await handle.read(buffer, 0, buffer.length, offset);
          return json(res, 200, { name, size, offset, text: buffer.toString("utf8"), next: offset + buffer.length < size ? offset + buffer.length : null });
        } finally {
          await handle.close();
        }
      }
      const files: Record<string, number> = {};
      for (const name of TRIAL_FILES) {
        const s = await stat(join(trialDir, name)).catch(() => null);
        if (s?.isFile()) files[name] = s.size;
      }
      return json(res, 200, { result: trial, reason: fullReason(trial), flags: trialFlags(trial), files, instruction: await instructionOf(run, trial.taskId), trialDir });
    }
    if (what === "compare") {
      const a = runOr404(res, url.searchParams.get("a") ?? "");
      if (!a) return;
      const b = runOr404(res, url.searchParams.get("b") ?? "");
      if (!b) return;
      const c = buildComparison(a, b, { resamples: 2000 });
      return json(res, 200, { a: runListEntry(a), b: runListEntry(b), comparison: c.comparison });
    }
    return json(res, 404, { error: "not_found", message: url.pathname });
  }

  const server = createServer((req, res) => {
    handle(req, res).catch((error: unknown) => {
      logger?.error(`viewer: ${req.url}: ${(error as Error).stack ?? String(error)}`);
      if (!res.headersSent) json(res, 500, { error: "internal", message: (error as Error).message });
      else res.end();
    });
  });
  const wss = new WebSocketServer({ noServer: true, maxPayload: 4096 });
  server.on("upgrade", (req, socket, head) => {
    if (new URL(req.url ?? "/", "http://localhost").pathname !== "/ws") {
      socket.destroy();
      return;
    }
    wss.handleUpgrade(req, socket, head, (ws) => {
      sockets.add(ws);
      let alive = true;
      ws.on("pong", () => (alive = true));
      ws.on("error", () => undefined);
      const ping = setInterval(() => {
        if (!alive) return ws.terminate();
        alive = false;
        ws.ping();
      }, 15_000);
      ws.on("close", () => {
        clearInterval(ping);
        sockets.delete(ws);
      });
      ws.send(JSON.stringify({ type: "hello", runIds }));
    });
  });
  await new Promise<void>((done, fail) => {
    server.once("error", fail);
    server.listen(options.port ?? 4180, host, () => done());
  });
  const address = server.address();
  const port = typeof address === "object" && address ? address.port : (options.port ?? 4180);
  const shownHost = host.includes(":") ? `[${host}]` : host;
  return {
    url: `http://${shownHost}:${port}/`,
    server,
    async close() {
      clearInterval(poll);
      for (const w of watchers.values()) w.close();
      for (const ws of sockets) ws.terminate();
      wss.close();
      await new Promise<void>((done) => server.close(() => done()));
      await scanning;
    },
  };
}
