import { spawn, type ChildProcess } from "node:child_process";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { LABELS, ownedTempPrefix } from "@proctor/sandbox";
import type { Logger } from "@proctor/schema";
import type Dockerode from "dockerode";
import { CHANNEL_TEMP_PREFIX } from "./channel";
import { parseOwner } from "./owner";

/**
 * How the watchdog reaches the daemon: the runtime's own Unix socket (or Windows pipe), or its
 * DOCKER_HOST over TCP, with the same TLS material when it uses TLS.
 */
export type WatchdogEndpoint =
  | { socketPath: string }
  | { protocol: "http" | "https"; host: string; port: number; ca?: string[]; cert?: string; key?: string };

/** argv[1] of every watchdog process (`node -e <script> proctor-watchdog <owner>`), so `ps` tells what it is. */
export const WATCHDOG_TAG = "proctor-watchdog";
/** How often the watchdog looks at its owner. */
export const WATCH_INTERVAL_MS = 2000;

/**
 * The watchdog: a detached Node process, started with the first sandbox of an owner, that
 * outlives its owner. Every `watchMs` it checks that the owner (pid + start time) is alive; once
 * it is gone (kill -9 included, or a clean exit), it removes every container whose
 * `proctor.owner` label is exactly the owner's, confirms none is left, removes the owner's
 * exec-channel directories, and exits. Self-contained
 * (node built-ins only, the Engine API over the daemon's socket or TCP), so it runs with any
 * `node` and needs nothing from this package at run time. testcontainers' Ryuk does the same from
 * a container; without a registry a host process is what we can start.
 *
 * argv: proctor-watchdog <owner label>; everything else (endpoint, TLS material, pid, start time)
 * comes in the PROCTOR_WATCHDOG environment variable, so keys never show in a process listing.
 * A SIGTERM/SIGINT/SIGHUP (its owner's service or group being stopped) makes it watch closely for
 * 10 s: if the owner dies in that time it still reaps, else it exits.
 */
const WATCHDOG_SCRIPT = String.raw`
"use strict";
const http = require("node:http");
const https = require("node:https");
const fs = require("node:fs");
const path = require("node:path");
const cfg = JSON.parse(process.env.PROCTOR_WATCHDOG || "{}");
delete process.env.PROCTOR_WATCHDOG;
const owner = process.argv[2];
const pid = Number(cfg.pid);
if (!owner || !(pid > 0) || !cfg.endpoint || !cfg.label) process.exit(2);
const startTime = (p) => {
  try { const s = fs.readFileSync("/proc/" + p + "/stat", "utf8"); return s.slice(s.lastIndexOf(")") + 2).split(" ")[19] || null; } catch { return null; }
};
const alive = () => {
  try { process.kill(pid, 0); } catch (e) { if (e.code !== "EPERM") return false; }
  if (!cfg.start) return true;
  const now = startTime(pid);
  return now === null || now === cfg.start;
};
const e = cfg.endpoint;
const transport = e.protocol === "https" ? https : http;
const where = e.socketPath ? { socketPath: e.socketPath } : { host: e.host, port: e.port, ca: e.ca, cert: e.cert, key: e.key };
const call = (method, path) => new Promise((resolve, reject) => {
  const req = transport.request({ ...where, method, path, agent: false, timeout: 30000 }, (res) => {
    let body = "";
    res.setEncoding("utf8");
    res.on("data", (c) => { if (body.length < 64 * 1024 * 1024) body += c; });
    res.on("end", () => resolve({ status: res.statusCode, body }));
    res.on("error", reject);
  });
  req.on("timeout", () => req.destroy(new Error("timeout")));
  req.on("error", reject);
  req.end();
});
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
// Containers whose owner label is exactly ours (checked here too, not only by the daemon's filter).
const ours = async () => {
  const filters = encodeURIComponent(JSON.stringify({ label: [cfg.label + "=" + owner] }));
  const list = await call("GET", "/containers/json?all=1&filters=" + filters);
  if (list.status !== 200) throw new Error("list: " + list.status);
  return JSON.parse(list.body).filter((c) => c && c.Labels && c.Labels[cfg.label] === owner).map((c) => c.Id);
};
let reaping = false;
const reap = async () => {
  if (reaping) return;
  reaping = true;
  // Up to 5 min (a daemon restarting), until two lists a moment apart are empty: a create the
  // owner sent just before it died may land after the first list.
  const until = Date.now() + 5 * 60 * 1000;
  let empty = 0;
  while (Date.now() < until && empty < 2) {
    try {
      const ids = await ours();
      if (ids.length === 0) empty++;
      else {
        empty = 0;
        await Promise.all(ids.map((id) => call("DELETE", "/containers/" + encodeURIComponent(id) + "?force=1&v=1").catch(() => undefined)));
        continue;
      }
    } catch {
      empty = 0;
    }
    await sleep(1500);
  }
  // The owner's exec-channel directories on this host (its close() never ran if it was killed).
  if (cfg.channels) {
    try {
      const dir = path.dirname(cfg.channels);
      const prefix = path.basename(cfg.channels);
      for (const name of fs.readdirSync(dir)) if (name.startsWith(prefix)) fs.rmSync(path.join(dir, name), { recursive: true, force: true });
    } catch {}
  }
  process.exit(0);
};
const timer = setInterval(() => { if (!alive()) { clearInterval(timer); void reap(); } }, Number(cfg.watchMs) || 2000);
const closely = () => {
  if (reaping) return;
  clearInterval(timer);
  const end = Date.now() + 10000;
  const t = setInterval(() => {
    if (!alive()) { clearInterval(t); void reap(); } else if (Date.now() > end) process.exit(0);
  }, 100);
};
for (const s of ["SIGTERM", "SIGINT", "SIGHUP"]) process.on(s, closely);
`;

interface Running {
  child: ChildProcess;
}

/** Watchdogs started by this process, by endpoint and owner; removed when one exits. */
const running = new Map<string, Running>();
const endpoints = new WeakMap<object, Promise<WatchdogEndpoint | string>>();

function text(value: unknown): string | undefined {
  if (typeof value === "string") return value;
  if (Buffer.isBuffer(value)) return value.toString("utf8");
  return undefined;
}

/**
 * The daemon endpoint of a docker-modem, for the watchdog; a string says why there is none.
 * docker-modem keeps either a socket path or a function that finds the default socket, or
 * host/port/protocol (+ ca/cert/key for TLS) from DOCKER_HOST.
 */
export async function watchdogEndpoint(modem: unknown): Promise<WatchdogEndpoint | string> {
  const m = (modem ?? {}) as Record<string, unknown>;
  if (m.socketPath !== undefined && !m.host) {
    const found = typeof m.socketPath === "function" ? await (m.socketPath as () => Promise<unknown>)().catch(() => undefined) : m.socketPath;
    return typeof found === "string" && found !== "" ? { socketPath: found } : "the daemon's socket path is unknown";
  }
  const protocol = typeof m.protocol === "string" ? m.protocol : "http";
  if (protocol !== "http" && protocol !== "https") return `the daemon is reached over ${protocol}, which the watchdog does not speak`;
  if (typeof m.host !== "string" || m.host === "") return "the daemon's host is unknown";
  const port = Number(m.port) || (protocol === "https" ? 2376 : 2375);
  const endpoint: WatchdogEndpoint = { protocol, host: m.host, port };
  const ca = Array.isArray(m.ca) ? m.ca.map(text).filter((c): c is string => c !== undefined) : text(m.ca) === undefined ? undefined : [text(m.ca) as string];
  if (ca && ca.length > 0) endpoint.ca = ca;
  const cert = text(m.cert);
  const key = text(m.key);
  if (cert !== undefined) endpoint.cert = cert;
  if (key !== undefined) endpoint.key = key;
  return endpoint;
}

interface WatchdogOptions {
  endpoint: WatchdogEndpoint;
  ownerLabel: string;
  ownerPid: number;
  ownerStart: string | null;
  watchMs?: number;
  logger: Logger;
}

function keyOf(endpoint: WatchdogEndpoint, ownerLabel: string): string {
  const where = "socketPath" in endpoint ? endpoint.socketPath : `${endpoint.protocol}://${endpoint.host}:${endpoint.port}`;
  return `${where}\n${ownerLabel}`;
}

/**
 * Starts the watchdog for `ownerLabel` on `endpoint` unless one started by this process is still
 * running (one per owner and daemon, not per container; a watchdog that died is started again).
 * Returns whether one is running.
 */
function startWatchdog(options: WatchdogOptions): boolean {
  const { endpoint, ownerLabel, logger } = options;
  const key = keyOf(endpoint, ownerLabel);
  if (running.has(key)) return true;
  const channels = join(tmpdir(), ownedTempPrefix(CHANNEL_TEMP_PREFIX, options.ownerPid, options.ownerStart));
  const config = JSON.stringify({ endpoint, label: LABELS.owner, pid: options.ownerPid, start: options.ownerStart, channels, watchMs: options.watchMs ?? WATCH_INTERVAL_MS });
  try {
    const child = spawn(process.execPath, ["-e", WATCHDOG_SCRIPT, WATCHDOG_TAG, ownerLabel], {
      detached: true,
      stdio: "ignore",
      cwd: "/",
      // Only what the script needs: none of the owner's environment (API keys) goes along.
      env: { PATH: process.env.PATH ?? "", PROCTOR_WATCHDOG: config },
    });
    const entry: Running = { child };
    running.set(key, entry);
    const forget = () => {
      if (running.get(key) === entry) running.delete(key);
    };
    child.once("error", (error) => {
      forget();
      logger.warn("the sandbox watchdog failed to start", { error: error.message });
    });
    child.once("exit", (code, signal) => {
      forget();
      logger.warn("the sandbox watchdog exited while its owner lives; the next sandbox starts another", { code, signal });
    });
    child.unref();
    return true;
  } catch (error) {
    logger.warn("the sandbox watchdog failed to start", { error: error instanceof Error ? error.message : String(error) });
    return false;
  }
}

/** Pid of the watchdog this process runs for `ownerLabel`, if one runs (for diagnostics and tests). */
export function watchdogPid(ownerLabel: string): number | undefined {
  for (const [key, { child }] of running) if (key.endsWith(`\n${ownerLabel}`)) return child.pid;
  return undefined;
}

const unsupported = new Set<string>();

/**
 * Makes sure a watchdog guards `ownerLabel`'s containers on `docker`'s daemon. Does nothing for
 * an owner label that is not this process's own `<host>:<pid>:<start>` (its process watches its
 * own), and logs once when the daemon's endpoint is one the watchdog cannot reach (ssh).
 */
export async function watchOwner(docker: Dockerode, ownerLabel: string, logger: Logger): Promise<boolean> {
  const owner = parseOwner(ownerLabel);
  if (!owner || owner.pid !== process.pid) return false;
  const modem = docker.modem as object;
  let endpoint = endpoints.get(modem);
  if (!endpoint) {
    endpoint = watchdogEndpoint(modem);
    endpoints.set(modem, endpoint);
  }
  const resolved = await endpoint;
  if (typeof resolved === "string") {
    if (!unsupported.has(resolved)) {
      unsupported.add(resolved);
      logger.warn(`no watchdog for sandboxes: ${resolved}; containers of a killed owner wait for \`proctor gc\`, the next run or their lifetime`);
    }
    return false;
  }
  return startWatchdog({ endpoint: resolved, ownerLabel, ownerPid: owner.pid, ownerStart: owner.startTime, logger });
}
