import { spawn } from "node:child_process";
import type { Logger } from "@proctor/schema";

/**
 * The watchdog: a detached Node process, started with the first sandbox of an owner, that
 * outlives its owner. Every WATCH_MS it checks that the owner (pid + start time) is alive; once
 * it is gone (even by kill -9), it removes every container labelled with the owner and exits.
 * Self-contained (node built-ins only, the Engine API over the daemon's Unix socket), so it runs
 * with any `node` and needs nothing from this package at run time. testcontainers' Ryuk does the
 * same from a container; without a registry a host process is what we can start.
 *
 * argv: socketPath ownerLabel ownerPid ownerStartTime watchMs
 */
export const WATCHDOG_SCRIPT = `
const http = require("node:http");
const fs = require("node:fs");
const [socketPath, owner, pidText, start, watchText] = process.argv.slice(1);
const pid = Number(pidText);
const startTime = (p) => { try { const s = fs.readFileSync("/proc/" + p + "/stat", "utf8"); return s.slice(s.lastIndexOf(")") + 2).split(" ")[19] || null; } catch { return null; } };
const alive = () => {
  try { process.kill(pid, 0); } catch (e) { if (e.code !== "EPERM") return false; }
  return start === "unknown" || startTime(pid) === start;
};
const call = (method, path) => new Promise((resolve, reject) => {
  const req = http.request({ socketPath, method, path, timeout: 30000 }, (res) => {
    let body = "";
    res.on("data", (c) => (body += c));
    res.on("end", () => resolve({ status: res.statusCode, body }));
  });
  req.on("timeout", () => req.destroy(new Error("timeout")));
  req.on("error", reject);
  req.end();
});
const reap = async () => {
  const filters = encodeURIComponent(JSON.stringify({ label: ["proctor.owner=" + owner] }));
  for (let round = 0; round < 20; round++) {
    try {
      const list = await call("GET", "/containers/json?all=1&filters=" + filters);
      const ids = JSON.parse(list.body).map((c) => c.Id);
      if (ids.length === 0) return;
      await Promise.all(ids.map((id) => call("DELETE", "/containers/" + id + "?force=1&v=1").catch(() => undefined)));
    } catch {}
    await new Promise((r) => setTimeout(r, 3000));
  }
};
const timer = setInterval(() => {
  if (alive()) return;
  clearInterval(timer);
  reap().finally(() => process.exit(0));
}, Number(watchText) || 2000);
`;

const started = new Set<string>();

/**
 * Starts the watchdog for `ownerLabel` once per process and daemon socket. Does nothing (and
 * says so) when the daemon is not reached over a Unix socket, or the owner label is not this
 * process's own `<host>:<pid>:<start>` label.
 */
export function startWatchdog(options: { socketPath: string | undefined; ownerLabel: string; ownerPid: number; ownerStart: string | null; watchMs?: number; logger: Logger }): boolean {
  const { socketPath, ownerLabel, logger } = options;
  if (!socketPath) {
    logger.warn("no watchdog for sandboxes: the Docker daemon is not reached over a Unix socket, so containers of a killed owner wait for `proctor gc` or their lifetime");
    return false;
  }
  const key = `${socketPath}\n${ownerLabel}`;
  if (started.has(key)) return true;
  started.add(key);
  try {
    const child = spawn(process.execPath, ["-e", WATCHDOG_SCRIPT, socketPath, ownerLabel, String(options.ownerPid), options.ownerStart ?? "unknown", String(options.watchMs ?? 2000)], {
      detached: true,
      stdio: "ignore",
      // Only what the script needs: no secrets of the owner's environment.
      env: { PATH: process.env.PATH ?? "" },
    });
    child.on("error", (error) => logger.warn("the sandbox watchdog failed to start", { error: error.message }));
    child.unref();
    return true;
  } catch (error) {
    started.delete(key);
    logger.warn("the sandbox watchdog failed to start", { error: error instanceof Error ? error.message : String(error) });
    return false;
  }
}
