/**
 * A second Docker daemon on this machine, standing in for a second host: its own data root (so
 * its own images), exec root, pid file, socket, bridge and daemon ID. Stopped and removed by
 * `stop()`, which is safe to call twice, before `start()` and after a failed one.
 */
import { execFile, spawn, type ChildProcess } from "node:child_process";
import { closeSync, openSync, readFileSync } from "node:fs";
import { mkdir, readFile, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { promisify } from "node:util";

const run = promisify(execFile);

export interface SecondDaemon {
  /** `unix:///.../docker.sock`, for DOCKER_HOST. */
  host: string;
  /** Its data root (images, containers), removed by stop(). */
  dataRoot: string;
  bridge: string;
  /** Its dockerd log (kept until stop()). */
  log: string;
  stop(): Promise<void>;
}

/** Runs the docker CLI against `host` (undefined: the default daemon, as this process's env says). */
export async function docker(host: string | undefined, args: string[], options: { input?: string } = {}): Promise<string> {
  const env = { ...process.env };
  if (host !== undefined) env.DOCKER_HOST = host;
  const { stdout } = await run("docker", args, { env, maxBuffer: 64 * 1024 * 1024, ...options });
  return stdout;
}

/** A /24 on 10.99.x.0 that no interface of this machine has yet (10.99.0.0/24 when free). */
async function freeSubnet(): Promise<string> {
  const { stdout } = await run("ip", ["-4", "-o", "addr", "show"]);
  for (let x = 0; x < 256; x++) if (!stdout.includes(` 10.99.${x}.`)) return `10.99.${x}`;
  throw new Error("no free 10.99.x.0/24 for the second daemon's bridge");
}

/**
 * A `dockerd` (`start()`) with everything of its own under `dir` and a bridge of its own (the host's
 * docker0 and its iptables rules are not touched: `--iptables=false`; the bench's containers need
 * no network). `--config-file` sets `deprecated-key-path`: Docker 20.10 derives the daemon ID
 * from /etc/docker/key.json, so without it both daemons would have the same ID, which two real
 * hosts do not (and Proctor scopes its per-daemon build lock by that ID).
 */
export function secondDaemon(dir: string, options: { storageDriver: string; tag: string }): SecondDaemon & { start(): Promise<void> } {
  const dataRoot = join(dir, "data");
  const execRoot = join(dir, "exec");
  const socket = join(dir, "docker.sock");
  const pidfile = join(dir, "dockerd.pid");
  const log = join(dir, "dockerd.log");
  const config = join(dir, "daemon.json");
  const bridge = `pbimg${options.tag}`.slice(0, 15);
  const host = `unix://${socket}`;

  let child: ChildProcess | null = null;
  let bridgeMade = false;
  let stopped = false;
  let starting: Promise<void> | null = null;
  const alive = () => {
    if (stopped) throw new Error("the second dockerd was stopped while it started");
  };
  const stop = async () => {
    if (stopped) return;
    stopped = true;
    // A start under way ends at its next step (alive()); then everything it made is known here.
    await starting?.catch(() => undefined);
    if (child && child.exitCode === null && child.signalCode === null) {
      const proc = child;
      const exited = new Promise((r) => proc.once("exit", r));
      proc.kill("SIGTERM");
      const timer = setTimeout(() => proc.kill("SIGKILL"), 45_000);
      await exited;
      clearTimeout(timer);
    }
    // A dockerd killed hard leaves its containerd (and mounts) behind: end that one, by its pid
    // file, and only when that pid is still this daemon's containerd (its config is under execRoot).
    const containerdPid = Number((await readFile(join(execRoot, "containerd", "containerd.pid"), "utf8").catch(() => "")).trim());
    const cmdline = containerdPid > 0 ? await readFile(`/proc/${containerdPid}/cmdline`, "utf8").catch(() => "") : "";
    if (cmdline.includes(`${execRoot}/`)) {
      try {
        process.kill(containerdPid, "SIGKILL");
      } catch {
        // already gone
      }
    }
    await unmountUnder([dataRoot, execRoot]);
    await rm(dir, { recursive: true, force: true });
    if (bridgeMade) await run("ip", ["link", "del", bridge]).catch((error: unknown) => console.error(`images: could not remove bridge ${bridge}: ${String(error)}`));
  };

  const run1 = async () => {
    if (process.getuid?.() !== 0) throw new Error("the images bench starts a second dockerd and a bridge: run it as root");
    await mkdir(dataRoot, { recursive: true });
    await mkdir(execRoot, { recursive: true });
    await writeFile(config, `${JSON.stringify({ "deprecated-key-path": join(dir, "key.json") })}\n`);
    const subnet = await freeSubnet();
    alive();
    await run("ip", ["link", "add", "name", bridge, "type", "bridge"]);
    bridgeMade = true;
    await run("ip", ["addr", "add", `${subnet}.1/24`, "dev", bridge]);
    await run("ip", ["link", "set", bridge, "up"]);
    alive();
    const out = openSync(log, "a");
    // detached: a Ctrl-C in the terminal reaches the bench, which stops this daemon itself (its
    // containers first), instead of the daemon going down under running workers.
    const args = ["--config-file", config, "--data-root", dataRoot, "--exec-root", execRoot, "--pidfile", pidfile, "-H", `unix://${socket}`, "--bridge", bridge, "--iptables=false", "--ip-masq=false", "--storage-driver", options.storageDriver];
    child = spawn("dockerd", args, { detached: true, stdio: ["ignore", out, out] });
    let spawnError: Error | null = null;
    child.once("error", (error) => (spawnError = error));
    closeSync(out);
    const deadline = Date.now() + 60_000;
    for (;;) {
      alive();
      if (spawnError !== null) throw new Error(`starting dockerd failed: ${(spawnError as Error).message}`);
      if (child.exitCode !== null || child.signalCode !== null) throw new Error(`the second dockerd exited (${child.exitCode ?? child.signalCode}); last lines of ${log}:\n${tail(log)}`);
      const up = await docker(host, ["version", "--format", "{{.Server.Version}}"]).then(
        () => true,
        () => false,
      );
      if (up) break;
      if (Date.now() > deadline) throw new Error(`the second dockerd did not answer on ${socket} within 60 s; last lines of ${log}:\n${tail(log)}`);
      await new Promise((r) => setTimeout(r, 250));
    }
  };
  const start = () => (starting = run1());
  return { host, dataRoot, bridge, log, start, stop };
}

function tail(path: string, lines = 15): string {
  try {
    return readFileSync(path, "utf8").trimEnd().split("\n").slice(-lines).join("\n");
  } catch {
    return "(no log)";
  }
}

/** Lazily unmounts whatever a stopped daemon left mounted under these dirs (deepest first). */
async function unmountUnder(dirs: string[]): Promise<void> {
  const mounts = (await readFile("/proc/self/mounts", "utf8").catch(() => ""))
    .split("\n")
    .map((line) => line.split(" ")[1]?.replace(/\\040/g, " "))
    .filter((point): point is string => point !== undefined && dirs.some((d) => point === d || point.startsWith(`${d}/`)))
    .sort((a, b) => b.length - a.length);
  for (const point of mounts) await run("umount", ["-l", point]).catch(() => undefined);
}
