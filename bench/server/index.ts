/**
 * Server benchmark. Three measurements, each with a baseline from the same run:
 *   1. GET /batch/:id on loopback with autocannon (N connections), against GET /health
 *      (no auth, no lookup) as the baseline; auth none and bearer-token auth. Target >= 5,000 req/s.
 *   2. WebSocket fan-out: 1 subscriber (baseline), then 1,000 subscribers to one batch; latency
 *      of every event = receive time - the event's ts (stamped by the engine). Target p99 < 100 ms.
 *   3. Server RSS (a child process, /proc/<pid>/status) while a batch of N instant tasks runs on
 *      the local runtime (agent: `touch done.txt`, check: `test -f done.txt`); baseline: its RSS
 *      idle after start. Target peak < 300 MB at N = 10,000.
 *
 *   node --conditions=@proctor/source --import tsx bench/server/index.ts [--tasks 10000] [--subscribers 1000]
 *        [--connections 50] [--duration 5] [--concurrency 8] [--skip http,ws,rss]
 */
import { execFileSync, spawn } from "node:child_process";
import { mkdir, mkdtemp, readFile, readdir, rm, writeFile } from "node:fs/promises";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { parseArgs } from "node:util";
import { uploadArchive } from "../../apps/server/src/index";
import type { WireEnvelope } from "../../apps/server/src/index";
import { bundleForNode } from "../lib/esbuild";
import { reportFigure } from "../lib/figures";

// Dependencies of apps/server (bench/ has no node_modules of its own).
const requireFromServer = createRequire(new URL("../../apps/server/package.json", import.meta.url));
const autocannon = requireFromServer("autocannon") as (opts: Record<string, unknown>) => Promise<{ requests: { average: number }; latency: { p99: number }; non2xx: number; errors: number }>;
const tar = requireFromServer("tar") as typeof import("tar");
const WebSocket = requireFromServer("ws") as typeof import("ws").default;

const { values: args } = parseArgs({
  options: {
    tasks: { type: "string", default: "10000" },
    subscribers: { type: "string", default: "1000" },
    connections: { type: "string", default: "50" },
    duration: { type: "string", default: "5" },
    concurrency: { type: "string", default: "8" },
    skip: { type: "string", default: "" },
  },
});
const skip = new Set(args.skip.split(",").filter(Boolean));
const root = await mkdtemp(join(tmpdir(), "proctor-bench-server-"));
const figures: Record<string, string> = {};

function git(cwd: string, ...a: string[]): string {
  return execFileSync("git", ["-c", "user.email=b@example.com", "-c", "user.name=b", "-c", "init.defaultBranch=main", ...a], { cwd, encoding: "utf8" }).trim();
}

async function fixtureRepo(): Promise<{ repo: string; commit: string }> {
  const repo = join(root, "repo");
  await mkdir(repo);
  await writeFile(join(repo, "README.md"), "bench\n");
  git(repo, "init", "-q");
  git(repo, "add", ".");
  git(repo, "commit", "-q", "-m", "init");
  return { repo, commit: git(repo, "rev-parse", "HEAD") };
}

/** A term-executor archive of `count` instant tasks. */
async function makeArchive(name: string, count: number, fixture: { repo: string; commit: string }, agent = "#!/bin/bash\ntouch done.txt\n"): Promise<string> {
  const tree = join(root, `tree-${name}`);
  for (let i = 0; i < count; i++) {
    const dir = join(tree, "tasks", `task-${String(i).padStart(5, "0")}`);
    await mkdir(join(dir, "tests"), { recursive: true });
    await writeFile(join(dir, "workspace.yaml"), `repo: "${fixture.repo}"\nbase_commit: "${fixture.commit}"\n`);
    await writeFile(join(dir, "prompt.md"), "Create done.txt.\n");
    await writeFile(join(dir, "tests", "check.sh"), "#!/bin/bash\ntest -f done.txt\n");
  }
  await mkdir(join(tree, "agent_code"), { recursive: true });
  await writeFile(join(tree, "agent_code", "run.sh"), agent);
  const file = join(root, `${name}.tar.gz`);
  await tar.create({ gzip: true, file, cwd: tree }, ["tasks", "agent_code"]);
  await rm(tree, { recursive: true, force: true });
  return file;
}

function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

async function waitDone(url: string, batchId: string, headers: Record<string, string> = {}): Promise<Record<string, unknown>> {
  for (;;) {
    const body = (await (await fetch(`${url}/batch/${batchId}`, { headers })).json()) as Record<string, unknown>;
    if (["completed", "failed", "cancelled"].includes(String(body.status))) return body;
    await new Promise((r) => setTimeout(r, 200));
  }
}

// The server child runs as one plain-JS bundle built by esbuild from source, so its RSS is the
// server's and not a TypeScript loader's (dockerode's optional native helper stays external).
const childBundle = join(root, "server-child.mjs");
await bundleForNode(join(import.meta.dirname, "child.ts"), childBundle, { external: ["cpu-features", "*.node"] });

/** The server in a child process (its own event loop and RSS, apart from the load generators here). */
async function spawnServer(dataDir: string, token?: string): Promise<{ url: string; pid: number; stop(): Promise<void> }> {
  const argv = [childBundle, dataDir, args.concurrency, ...(token === undefined ? [] : [token])];
  const child = spawn(process.execPath, argv, { stdio: ["ignore", "pipe", "inherit"] });
  process.once("exit", () => child.kill("SIGKILL")); // never leave a server behind when the bench fails
  const line = await new Promise<string>((resolve, reject) => {
    createInterface({ input: child.stdout! }).once("line", resolve);
    child.once("exit", (code) => reject(new Error(`bench server exited with ${code}`)));
  });
  const { url } = JSON.parse(line) as { url: string };
  return {
    url,
    pid: child.pid!,
    stop: () =>
      new Promise<void>((resolve) => {
        child.once("exit", () => resolve());
        child.kill("SIGTERM");
      }),
  };
}

const fixture = await fixtureRepo();

try {
  // 1. HTTP
  if (!skip.has("http")) {
    const token = "bench-token-0123456789abcdef0123";
    for (const auth of ["none", "token"] as const) {
      const server = await spawnServer(join(root, `http-${auth}`), auth === "token" ? token : undefined);
      const headers = auth === "token" ? { authorization: `Bearer ${token}` } : {};
      const archive = await makeArchive(`http-${auth}`, 3, fixture);
      const batch = await uploadArchive({ server: server.url, archivePath: archive, ...(auth === "token" ? { token } : {}) });
      await waitDone(server.url, batch.batch_id, headers);
      const run = (path: string) =>
        autocannon({ url: `${server.url}${path}`, connections: Number(args.connections), duration: Number(args.duration), headers });
      const health = await run("/health");
      const status = await run(`/batch/${batch.batch_id}`);
      if (status.non2xx > 0 || status.errors > 0) throw new Error(`GET /batch/:id had ${status.non2xx} non-2xx answers and ${status.errors} errors`);
      figures[`GET /batch/:id req/s (auth ${auth})`] = `${Math.round(status.requests.average)} (p99 ${status.latency.p99} ms); GET /health ${Math.round(health.requests.average)} req/s; ratio ${(status.requests.average / health.requests.average).toFixed(2)}`;
      console.log(`[http] auth ${auth}: /batch/:id ${Math.round(status.requests.average)} req/s, /health ${Math.round(health.requests.average)} req/s`);
      reportFigure({
        bench: "server",
        figure: `GET /batch/:id, auth ${auth}, ${args.connections} connections`,
        proctor: { value: status.requests.average, unit: "req/s" },
        baseline: { value: health.requests.average, unit: "req/s", label: "GET /health, same server" },
        ratio: status.requests.average / health.requests.average,
        ratioMeaning: "/batch/:id rate / /health rate",
        target: { on: "proctor", op: ">=", value: 5000, unit: "req/s" },
      });
      await server.stop();
    }
  }

  // 2. WebSocket fan-out
  if (!skip.has("ws")) {
    const server = await spawnServer(join(root, "ws"));
    const blockerArchive = await makeArchive("ws-blocker", 1, fixture, "#!/bin/bash\nsleep 2\ntouch done.txt\n");
    const watchedArchive = await makeArchive("ws-watched", 100, fixture);
    const p99s: number[] = [];
    for (const subscribers of [1, Number(args.subscribers)]) {
      const blocker = await uploadArchive({ server: server.url, archivePath: blockerArchive });
      const batch = await uploadArchive({ server: server.url, archivePath: watchedArchive, concurrentTasks: Number(args.concurrency) });
      const latencies: number[] = [];
      let events = 0;
      const opened: Promise<void>[] = [];
      const closed: Promise<void>[] = [];
      for (let i = 0; i < subscribers; i++) {
        const ws = new WebSocket(`${server.url.replace("http", "ws")}/ws?batch_id=${batch.batch_id}`);
        opened.push(new Promise((resolve, reject) => { ws.once("open", () => resolve()); ws.once("error", reject); }));
        closed.push(new Promise((resolve) => ws.once("close", () => resolve())));
        ws.on("message", (data) => {
          const now = Date.now();
          const envelope = JSON.parse(String(data)) as WireEnvelope;
          if (envelope.event === "snapshot") return;
          events += 1;
          latencies.push(now - Date.parse(envelope.ts));
        });
      }
      await Promise.all(opened);
      await Promise.all(closed);
      await waitDone(server.url, blocker.batch_id);
      const done = await waitDone(server.url, batch.batch_id);
      if (done.passed_tasks !== done.total_tasks) throw new Error(`the watched batch did not pass every task: ${JSON.stringify(done)}`);
      latencies.sort((a, b) => a - b);
      const line = `p50 ${percentile(latencies, 50)} ms, p99 ${percentile(latencies, 99)} ms, max ${latencies.at(-1)} ms over ${events} deliveries`;
      figures[`WS event latency, ${subscribers} subscriber(s)`] = line;
      console.log(`[ws] ${subscribers} subscribers: ${line}`);
      p99s.push(percentile(latencies, 99));
    }
    const [oneP99 = Number.NaN, manyP99 = Number.NaN] = p99s;
    reportFigure({
      bench: "server",
      figure: `WebSocket event latency p99, ${args.subscribers} subscribers`,
      proctor: { value: manyP99, unit: "ms" },
      baseline: { value: oneP99, unit: "ms", label: "p99 with 1 subscriber" },
      ratio: oneP99 > 0 ? manyP99 / oneP99 : null,
      ratioMeaning: `p99 at ${args.subscribers} subscribers / p99 at 1`,
      target: { on: "proctor", op: "<", value: 100, unit: "ms" },
    });
    await server.stop();
  }

  // 3. RSS during a big batch
  if (!skip.has("rss")) {
    const count = Number(args.tasks);
    const started = Date.now();
    const archive = await makeArchive("rss", count, fixture);
    console.log(`[rss] built a ${count}-task archive in ${((Date.now() - started) / 1000).toFixed(1)} s`);
    const dataDir = join(root, "rss");
    const server = await spawnServer(dataDir);
    const url = server.url;
    const rssMb = async () => Number(/^VmRSS:\s+(\d+) kB/m.exec(await readFile(`/proc/${server.pid}/status`, "utf8"))?.[1]) / 1024;
    const heapMb = async () => {
      const text = await (await fetch(`${url}/metrics`)).text();
      return Number(/^proctor_nodejs_heap_size_used_bytes (\S+)/m.exec(text)?.[1]) / 1024 / 1024;
    };
    await new Promise((r) => setTimeout(r, 1000));
    const idle = await rssMb();
    let peak = idle;
    const sampler = setInterval(() => {
      rssMb().then(
        (v) => { peak = Math.max(peak, v); },
        () => undefined, // the child may be exiting between two samples
      );
    }, 250);
    const runStart = Date.now();
    const batch = await uploadArchive({ server: url, archivePath: archive, concurrentTasks: Number(args.concurrency) });
    let last = 0;
    let final: Record<string, unknown>;
    for (;;) {
      final = (await (await fetch(`${url}/batch/${batch.batch_id}`)).json()) as Record<string, unknown>;
      if (["completed", "failed", "cancelled"].includes(String(final.status))) break;
      if (Date.now() - last > 5_000) {
        last = Date.now();
        console.log(`[rss] ${final.completed_tasks}/${count} tasks, rss ${(await rssMb()).toFixed(0)} MB (peak ${peak.toFixed(0)} MB), heap used ${(await heapMb()).toFixed(0)} MB`);
      }
      await new Promise((r) => setTimeout(r, 500));
    }
    clearInterval(sampler);
    if (final.passed_tasks !== count) throw new Error(`the ${count}-task batch did not pass every task, so its RSS says little: ${JSON.stringify(final)}`);
    const seconds = (Date.now() - runStart) / 1000;
    const line = `peak ${peak.toFixed(0)} MB, idle ${idle.toFixed(0)} MB, heap used at the end ${(await heapMb()).toFixed(0)} MB, ratio ${(peak / idle).toFixed(2)}; ${final.completed_tasks}/${count} tasks ${final.status} (${final.passed_tasks} passed) in ${seconds.toFixed(0)} s (${(count / seconds).toFixed(0)} tasks/s)`;
    figures[`server RSS, ${count}-task batch`] = line;
    reportFigure({
      bench: "server",
      figure: `server peak RSS, ${count}-task batch (${final.passed_tasks} passed)`,
      proctor: { value: peak, unit: "MB" },
      baseline: { value: idle, unit: "MB", label: "RSS idle after start" },
      ratio: peak / idle,
      ratioMeaning: "peak RSS / idle RSS",
      target: { on: "proctor", op: "<", value: 300, unit: "MB" },
    });
    console.log(`[rss] ${line}`);
    await server.stop();
    console.log(`[rss] batch dir: ${(await readdir(join(dataDir, "batches"))).length} batch(es)`);
  }
} finally {
  await rm(root, { recursive: true, force: true });
}

console.log("\n== server bench ==");
for (const [name, value] of Object.entries(figures)) console.log(`${name}: ${value}`);
