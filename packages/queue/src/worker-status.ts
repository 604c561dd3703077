import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import type { WorkerMetrics } from "./worker-metrics";

/** What /health reports about a worker (name and id are null until it joined the queue). */
export interface WorkerState {
  /** Null until the worker joined the queue. */
  name: string | null;
  id: string | null;
  runtime: string;
  capacity: number;
  queue: string;
  heartbeatMs: number;
}

export interface WorkerStatusServer {
  url: string;
  close(): Promise<void>;
}

/**
 * GET /health and GET /metrics. Healthy (200) once the worker joined the queue and Redis took a
 * heartbeat within the last three intervals; otherwise 503 with the reason. A draining worker
 * stays healthy: it is finishing its trials.
 */
export async function startWorkerStatusServer(options: { host: string; port: number; metrics: WorkerMetrics; state: WorkerState }): Promise<WorkerStatusServer> {
  const { metrics, state } = options;
  const health = () => {
    const base = { worker: state.name, id: state.id, runtime: state.runtime, queue: state.queue, running: metrics.runningTrials, capacity: state.capacity, draining: metrics.draining };
    const lastBeat = metrics.lastHeartbeatMs === 0 ? null : new Date(metrics.lastHeartbeatMs).toISOString();
    if (state.id === null) return { code: 503, body: { status: "starting", reason: `waiting for Redis at ${state.queue}`, ...base, lastHeartbeatAt: lastBeat } };
    const ageMs = Date.now() - metrics.lastHeartbeatMs;
    if (ageMs > state.heartbeatMs * 3) {
      return { code: 503, body: { status: "unhealthy", reason: `no heartbeat reached Redis at ${state.queue} for ${Math.round(ageMs / 1000)} s`, ...base, lastHeartbeatAt: lastBeat } };
    }
    return { code: 200, body: { status: "ok", ...base, lastHeartbeatAt: lastBeat } };
  };
  const server: Server = createServer((request, response) => {
    const send = (code: number, type: string, body: string) => {
      response.writeHead(code, { "content-type": type, "cache-control": "no-store" });
      response.end(body);
    };
    const path = (request.url ?? "/").split("?")[0];
    if (request.method !== "GET" && request.method !== "HEAD") return send(405, "application/json", JSON.stringify({ error: "method_not_allowed", message: "only GET /health and GET /metrics" }));
    if (path === "/health") {
      const { code, body } = health();
      return send(code, "application/json", `${JSON.stringify(body)}\n`);
    }
    if (path === "/metrics") {
      metrics.registry.metrics().then(
        (text) => send(200, metrics.registry.contentType, text),
        (error: unknown) => send(500, "application/json", JSON.stringify({ error: "metrics_failed", message: (error as Error).message })),
      );
      return;
    }
    send(404, "application/json", JSON.stringify({ error: "not_found", message: "only GET /health and GET /metrics" }));
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(options.port, options.host, () => {
      server.off("error", reject);
      resolve();
    });
  });
  const address = server.address() as AddressInfo;
  const host = address.family === "IPv6" ? `[${address.address}]` : address.address;
  return {
    url: `http://${host}:${address.port}`,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
