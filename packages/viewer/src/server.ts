import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import { watch, type FSWatcher } from "node:fs";
import { resolve } from "node:path";
import { WebSocketServer, type WebSocket } from "ws";
import type { Logger } from "@proctor/schema";
import { findRunDirs } from "@proctor/report";
import { answerApi, type RunSource } from "./api";
import { readViewerAsset } from "./assets";
import { RunDir } from "./run-dir";

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

function json(res: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { "content-type": "application/json; charset=utf-8", "cache-control": "no-store" });
  res.end(text);
}

/**
 * Serves the viewer app and its JSON API over the run dirs named, and pushes `{type:"changed",
 * runIds}` over WebSocket `/ws` when a run's results or summary change (fs.watch, with a poll as
 * the fallback for file systems where watching does not work). Each run is read incrementally
 * (RunDir): a change costs the bytes appended to results.jsonl, not the whole file.
 */
export async function startViewer(options: ViewerOptions): Promise<ViewerHandle> {
  const host = options.host ?? "127.0.0.1";
  const logger = options.logger;
  /** By directory; a run's id can change once its summary.json appears, its directory cannot. */
  const byDir = new Map<string, RunDir>();
  const watchers = new Map<string, FSWatcher>();
  /** The version of each run last announced over WebSocket. */
  const announced = new Map<string, number>();

  async function rescan(): Promise<string[]> {
    const dirs = await findRunDirs(options.paths).catch(() => [] as string[]);
    const changed: string[] = [];
    const seen = new Set(dirs);
    for (const dir of dirs) {
      let run = byDir.get(dir);
      if (!run) {
        run = new RunDir(dir);
        byDir.set(dir, run);
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
      // Compare versions, not refresh()'s answer: an API request may have read the change first.
      await run.refresh().catch(() => false);
      if (announced.get(dir) !== run.version) {
        announced.set(dir, run.version);
        changed.push(run.runId);
      }
    }
    for (const dir of [...byDir.keys()]) {
      if (seen.has(dir)) continue;
      changed.push((byDir.get(dir) as RunDir).runId);
      byDir.delete(dir);
      announced.delete(dir);
      watchers.get(dir)?.close();
      watchers.delete(dir);
    }
    return changed;
  }

  const source: RunSource = {
    runs: async () => [...byDir.values()],
    run: async (runId) => [...byDir.values()].find((r) => r.runId === runId) ?? null,
  };

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

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = new URL(req.url ?? "/", "http://localhost");
    const parts = url.pathname.split("/").filter(Boolean).map(decodeURIComponent);
    if (req.method !== "GET" && req.method !== "HEAD") return json(res, 405, { error: "method_not_allowed", message: "GET only" });
    if (parts[0] !== "api") {
      const asset = await readViewerAsset(parts.join("/"));
      if (!asset) return json(res, 404, { error: "not_found", message: url.pathname });
      res.writeHead(200, asset.headers);
      res.end(asset.body);
      return;
    }
    // The local viewer has no login: whoever reaches the port reads the run dirs (it binds loopback by default).
    if (parts[1] === "session" && parts.length === 2) return json(res, 200, { login: false, signedIn: true, identity: null });
    const answer = await answerApi(source, parts.slice(1), url.searchParams);
    return json(res, answer.status, answer.body);
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
      ws.send(JSON.stringify({ type: "hello" }));
    });
  });
  await new Promise<void>((done, fail) => {
    server.once("error", fail);
    server.listen(options.port ?? 4180, host, () => done());
  }).catch(async (error: unknown) => {
    // Nothing may keep the process alive after a failed listen: the poll and the watchers go too.
    clearInterval(poll);
    for (const w of watchers.values()) w.close();
    wss.close();
    await scanning;
    throw error;
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
