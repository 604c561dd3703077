/**
 * bench/images: task images on a 2-host cluster, with and without an image registry. The same
 * Dockerfile tasks (each builds its own image on proctor/base:bookworm) run through Redis on two
 * `proctor worker`s, A on this machine's Docker daemon and B on a second dockerd started here with
 * its own data root (a second host's images), in four runs:
 *
 *   1. without registry, cold (no task image exists anywhere)   2. the same again, warm
 *   3. with registry, cold (a new nonce: new images)             4. the same again, warm
 *
 * For each: builds per image (image_build_finished events in the run's events.jsonl, checked
 * against the image ids on the two daemons), wall time of `proctor run`, task images and their
 * bytes on each host, the share of trial time spent getting images; every trial must pass.
 *
 *   node --conditions=@proctor/source --import tsx bench/images/index.ts [--tasks 32] [--attempts 3] [--per-worker 2] [--data-mb 4] [--keep]
 *
 * Needs root, Docker (proctor/base:bookworm), dockerd, ip, redis-server and docker-registry.
 * Everything it starts or makes is removed at the end, also on failure and on SIGINT / SIGTERM.
 */
import { execFile, spawn, type ChildProcess } from "node:child_process";
import { createWriteStream, readFileSync, type WriteStream } from "node:fs";
import { mkdir, mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { parseArgs, promisify } from "node:util";
import { startRedisServer } from "../../packages/queue/src/index";
import { ImageResolver, dockerAvailable, startRegistryServer, type RegistryServer } from "../../packages/sandbox-docker/src/index";
import { reportFigure } from "../lib/figures";
import { docker, secondDaemon, type SecondDaemon } from "./daemon";
import { writeTasks } from "./tasks";

const exec = promisify(execFile);
const { values } = parseArgs({
  options: {
    tasks: { type: "string", default: "32" },
    attempts: { type: "string", default: "3" },
    "per-worker": { type: "string", default: "2" },
    "data-mb": { type: "string", default: "4" },
    keep: { type: "boolean", default: false },
  },
});
const taskCount = Number(values.tasks);
const attempts = Number(values.attempts);
const perWorker = Number(values["per-worker"]);
const dataMb = Number(values["data-mb"]);
for (const [flag, value] of [["--tasks", taskCount], ["--attempts", attempts], ["--per-worker", perWorker], ["--data-mb", dataMb]] as const) {
  if (!Number.isInteger(value) || value < 1) throw new Error(`${flag} must be a positive integer`);
}
const parallel = 2 * perWorker;
const repo = resolve(import.meta.dirname, "../..");
const CLI = join(repo, "apps/cli/src/main.ts");
const BASE = "proctor/base:bookworm";
const load = () => readFileSync("/proc/loadavg", "utf8").split(" ").slice(0, 3).join(" ");
const MB = 1024 * 1024;

type Host = "A" | "B";
const HOSTS: Host[] = ["A", "B"];

interface Scenario {
  key: string;
  label: string;
  registry: boolean;
  warm: boolean;
}

interface Measured {
  scenario: Scenario;
  wallMs: number;
  trials: number;
  passed: number;
  trialsByHost: Record<Host, number>;
  images: number;
  /** image_build_finished ok events: one per `docker build` Proctor ran. */
  builds: number;
  buildsByHost: Record<Host, number>;
  failedBuilds: number;
  buildMs: number;
  /** New image ids for the run's tags across both daemons (an independent count of builds). */
  daemonBuilds: number;
  /** Distinct (host, task) pairs among the trials, per image: builds per image without a registry when each host builds once. */
  hostsPerImage: number;
  pullsByHost: Record<Host, number>;
  imagesOnHost: Record<Host, number>;
  bytesOnHost: Record<Host, number>;
  /** Trial time in the environment phase (image used, pulled or built, waits included) / all trial time. */
  environmentShare: number;
  registryTags: number | null;
  /** Bytes in the registry's storage after the run (null without one). */
  registryBytes: number | null;
  /** Per build, in the order builds finished: the builder trial's environment phase minus the build (lock, checks, push). */
  afterBuildMs: number[];
  /** Trials whose record has no image id (the pin of the image they ran on). */
  noImageId: number;
}

// ---------- cleanup: LIFO, once, also on SIGINT / SIGTERM ----------

const cleanups: { what: string; run: () => Promise<void> }[] = [];
let cleaning: Promise<void> | null = null;
let interrupted = false;
function cleanup(): Promise<void> {
  cleaning ??= (async () => {
    for (const step of cleanups.reverse()) {
      try {
        await step.run();
      } catch (error) {
        console.error(`images: cleanup (${step.what}) failed: ${error instanceof Error ? error.message : String(error)}`);
      }
    }
  })();
  return cleaning;
}
for (const [signal, code] of [["SIGINT", 130], ["SIGTERM", 143]] as const) {
  process.on(signal, () => {
    if (interrupted) return;
    interrupted = true;
    console.error(`images: ${signal}: stopping and cleaning up`);
    void cleanup().finally(() => process.exit(code));
  });
}

// ---------- processes ----------

/** A child whose output goes to a log file; `lines` sees each line. */
function spawnLogged(args: string[], env: NodeJS.ProcessEnv, log: WriteStream, onLine?: (line: string) => void): ChildProcess {
  const child = spawn(process.execPath, ["--conditions=@proctor/source", "--import", "tsx", CLI, ...args], { cwd: repo, env, stdio: ["ignore", "pipe", "pipe"] });
  for (const stream of [child.stdout, child.stderr]) {
    if (!stream) continue;
    createInterface({ input: stream }).on("line", (line) => {
      log.write(`${line}\n`);
      onLine?.(line);
    });
  }
  return child;
}

function tailOf(path: string, lines = 25): string {
  try {
    return readFileSync(path, "utf8").trimEnd().split("\n").slice(-lines).join("\n");
  } catch {
    return "(no log)";
  }
}

async function stopChild(child: ChildProcess, graceMs: number): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((r) => child.once("exit", r));
  child.kill("SIGTERM");
  const timer = setTimeout(() => child.kill("SIGKILL"), graceMs);
  await exited;
  clearTimeout(timer);
}

/** The env a "host" gets: its own Proctor cache (image index), its daemon, no inherited registry. */
function hostEnv(host: Host, daemonB: SecondDaemon, work: string): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env, PROCTOR_CACHE_DIR: join(work, `host-${host.toLowerCase()}`, "cache") };
  delete env.PROCTOR_IMAGE_REGISTRY;
  if (host === "B") env.DOCKER_HOST = daemonB.host;
  return env;
}

interface WorkerProc {
  host: Host;
  name: string;
  child: ChildProcess;
  log: string;
}

/** Starts `proctor worker` for a host; resolves once it printed its ready line. */
async function startWorkerProc(host: Host, tag: string, ctx: { redisUrl: string; registry: string | null; daemonB: SecondDaemon; work: string; spawned: ChildProcess[] }): Promise<WorkerProc> {
  const name = `images-${host.toLowerCase()}`;
  const dir = join(ctx.work, `host-${host.toLowerCase()}`);
  await mkdir(dir, { recursive: true });
  const log = join(dir, `worker-${tag}.log`);
  const out = createWriteStream(log, { flags: "a" });
  const args = ["worker", "--queue", ctx.redisUrl, "--name", name, "--runtime", "docker", "-n", String(perWorker), "--work-dir", join(dir, `worker-${tag}`)];
  if (ctx.registry) args.push("--image-registry", ctx.registry);
  let onReady: () => void = () => undefined;
  const ready = new Promise<void>((r) => (onReady = r));
  const child = spawnLogged(args, hostEnv(host, ctx.daemonB, ctx.work), out, (line) => {
    if (line.startsWith(`worker ${name} ready`)) onReady();
    else if (/^(warning|error):|status=(lost|error)/.test(line)) console.log(`  [worker ${host}] ${line}`);
  });
  ctx.spawned.push(child);
  child.once("exit", () => out.end());
  const exited = new Promise<never>((_, reject) => child.once("exit", (code, signal) => reject(new Error(`worker ${name} exited (${code ?? signal}) before it was ready; last lines of ${log}:\n${tailOf(log)}`))));
  const timeout = new Promise<never>((_, reject) => setTimeout(() => reject(new Error(`worker ${name} not ready within 120 s; last lines of ${log}:\n${tailOf(log)}`)), 120_000).unref());
  await Promise.race([ready, exited, timeout]);
  return { host, name, child, log };
}

// ---------- daemons ----------

interface ImageState {
  id: string;
  size: number;
}

/** Which of `tags` each daemon has, with image id and size. */
async function snapshot(tags: string[], daemonB: SecondDaemon): Promise<Record<Host, Map<string, ImageState>>> {
  const state = { A: new Map<string, ImageState>(), B: new Map<string, ImageState>() };
  for (const host of HOSTS) {
    let stdout: string;
    try {
      stdout = await docker(host === "B" ? daemonB.host : undefined, ["image", "inspect", "--format", "{{.Id}} {{.Size}} {{range .RepoTags}}{{.}} {{end}}", ...tags]);
    } catch (error) {
      // Exit 1 when some are missing; stdout still has the others.
      stdout = (error as { stdout?: string }).stdout ?? "";
    }
    const wanted = new Set(tags);
    for (const line of stdout.split("\n")) {
      const [id, size, ...refs] = line.trim().split(" ");
      if (!id || !size) continue;
      for (const ref of refs) {
        const tag = ref.replace(/:latest$/, "");
        if (wanted.has(tag)) state[host].set(tag, { id, size: Number(size) });
      }
    }
  }
  return state;
}

/** Our tags the registry holds (its tags list for proctor-build), or null without a registry. */
async function registryTags(registry: string | null, tags: string[]): Promise<number | null> {
  if (registry === null) return null;
  const response = await fetch(`http://${registry}/v2/proctor-build/tags/list`);
  if (response.status === 404) return 0;
  const body = (await response.json()) as { tags?: string[] | null };
  const held = new Set(body.tags ?? []);
  return tags.filter((tag) => held.has(tag.slice("proctor-build/".length))).length;
}

// ---------- the run ----------

interface TrialRecord {
  trialId: string;
  taskId: string;
  status: string;
  durationMs: number;
  phases: { phase: string; durationMs: number }[];
  worker?: { name: string };
  environment?: { image: string; imageId: string | null };
}

async function readJsonl<T>(path: string): Promise<T[]> {
  const text = await readFile(path, "utf8");
  return text
    .split("\n")
    .filter((line) => line.trim() !== "")
    .map((line) => JSON.parse(line) as T);
}

const problems: string[] = [];

async function duBytes(path: string): Promise<number> {
  const { stdout } = await exec("du", ["-sb", path]);
  return Number(stdout.split("\t")[0]);
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted.length === 0 ? Number.NaN : (sorted[Math.floor((sorted.length - 1) / 2)] ?? Number.NaN);
}

async function runScenario(scenario: Scenario, ctx: { tasksDir: string; tags: string[]; redisUrl: string; registry: string | null; registryStorage: string | null; daemonB: SecondDaemon; work: string; nonce: string; workers: WorkerProc[]; baseSize: number; current: { run: ChildProcess | null } }): Promise<Measured> {
  const { tags, daemonB } = ctx;
  const before = await snapshot(tags, daemonB);
  if (!scenario.warm) {
    const present = HOSTS.map((h) => before[h].size).reduce((a, b) => a + b, 0);
    const inRegistry = await registryTags(ctx.registry, tags);
    if (present > 0 || (inRegistry ?? 0) > 0) throw new Error(`${scenario.label}: not cold: ${present} of its images on the daemons, ${inRegistry ?? 0} in the registry`);
  }
  const runId = `images-${ctx.nonce}-${scenario.key}`;
  const log = join(ctx.work, `run-${scenario.key}.log`);
  const out = createWriteStream(log);
  const args = ["run", ctx.tasksDir, "--queue", ctx.redisUrl, "--agent", "oracle", "--runtime", "docker", "-n", String(parallel), "-k", String(attempts), "-o", join(ctx.work, "runs"), "--run-id", runId, "--bundles-host", "127.0.0.1"];
  const env: NodeJS.ProcessEnv = { ...process.env, PROCTOR_CACHE_DIR: join(ctx.work, "dispatcher-cache") };
  delete env.PROCTOR_IMAGE_REGISTRY;
  const t0 = performance.now();
  const child = spawnLogged(args, env, out);
  ctx.current.run = child;
  const code = await new Promise<number | null>((r) => child.once("exit", (c) => r(c)));
  const wallMs = performance.now() - t0;
  ctx.current.run = null;
  out.end();
  if (code !== 0) throw new Error(`${scenario.label}: proctor run exited ${code}; last lines of ${log}:\n${tailOf(log)}`);

  const runDir = join(ctx.work, "runs", runId);
  const latest = new Map<string, TrialRecord>();
  for (const r of await readJsonl<TrialRecord>(join(runDir, "results.jsonl"))) latest.set(r.trialId, r);
  const results = [...latest.values()];
  const notPassed = results.filter((r) => r.status !== "passed");
  const expected = taskCount * attempts;
  if (results.length !== expected || notPassed.length > 0) {
    throw new Error(`${scenario.label}: ${results.length} of ${expected} trials finished, ${notPassed.length} did not pass: ${notPassed.slice(0, 5).map((r) => `${r.trialId} ${r.status}`).join(", ")} (run dir ${runDir})`);
  }
  const hostOf = (name: string | undefined): Host | null => ctx.workers.find((w) => w.name === name)?.host ?? null;
  const trialsByHost: Record<Host, number> = { A: 0, B: 0 };
  const pairs = new Set<string>();
  let noImageId = 0;
  for (const r of results) {
    const host = hostOf(r.worker?.name);
    if (host === null) throw new Error(`${scenario.label}: trial ${r.trialId} names no worker of this bench (${JSON.stringify(r.worker)})`);
    trialsByHost[host]++;
    pairs.add(`${host} ${r.taskId}`);
    if (r.environment?.imageId == null) noImageId++;
    if (r.environment && !tags.includes(r.environment.image)) problems.push(`${scenario.label}: trial ${r.trialId} ran on ${r.environment.image}, not the tag the bench computed for its task`);
  }

  // Builds: one image_build_finished per `docker build` that ImageResolver ran (those that waited for it or reused it emit none).
  const events = (await readJsonl<{ type: string; trialId?: string; data?: { image: string; ok: boolean; durationMs: number } }>(join(runDir, "events.jsonl"))).filter((e) => e.type === "image_build_finished");
  const buildsByHost: Record<Host, number> = { A: 0, B: 0 };
  const builtWhere = new Map<string, string[]>();
  let builds = 0;
  let buildMs = 0;
  let failedBuilds = 0;
  const afterBuildMs: number[] = [];
  for (const e of events) {
    if (!e.data?.ok) {
      failedBuilds++;
      continue;
    }
    builds++;
    buildMs += e.data.durationMs;
    const builder = latest.get(e.trialId ?? "");
    const environment = builder?.phases.find((p) => p.phase === "environment")?.durationMs;
    if (environment !== undefined) afterBuildMs.push(Math.max(0, environment - e.data.durationMs));
    const host = hostOf(latest.get(e.trialId ?? "")?.worker?.name) ?? "A";
    buildsByHost[host]++;
    builtWhere.set(e.data.image, [...(builtWhere.get(e.data.image) ?? []), `${host} (${e.trialId})`]);
  }

  const after = await snapshot(tags, daemonB);
  const ids = (s: Record<Host, Map<string, ImageState>>) => new Set(HOSTS.flatMap((h) => [...s[h].values()].map((v) => v.id)));
  const daemonBuilds = [...ids(after)].filter((id) => !ids(before).has(id)).length;
  const pullsByHost: Record<Host, number> = { A: 0, B: 0 };
  const imagesOnHost: Record<Host, number> = { A: 0, B: 0 };
  const bytesOnHost: Record<Host, number> = { A: 0, B: 0 };
  for (const host of HOSTS) {
    const fresh = [...after[host].keys()].filter((tag) => !before[host].has(tag)).length;
    pullsByHost[host] = Math.max(0, fresh - buildsByHost[host]);
    imagesOnHost[host] = after[host].size;
    // What the task images add on top of the base image they share.
    bytesOnHost[host] = [...after[host].values()].reduce((sum, v) => sum + Math.max(0, v.size - ctx.baseSize), 0);
  }
  let environmentMs = 0;
  let trialMs = 0;
  for (const r of results) {
    trialMs += r.durationMs;
    environmentMs += r.phases.find((p) => p.phase === "environment")?.durationMs ?? 0;
  }

  // What should not happen.
  if (scenario.registry) for (const [image, where] of builtWhere) if (where.length > 1) problems.push(`${scenario.label}: ${image} built ${where.length} times with the registry: ${where.join(", ")}`);
  if (scenario.registry && scenario.warm && builds > 0) problems.push(`${scenario.label}: ${builds} build(s) in a warm run with the registry`);
  if (!scenario.registry && !scenario.warm && builds !== pairs.size) problems.push(`${scenario.label}: ${builds} builds but ${pairs.size} (host, image) pairs ran: each host should build each image it needs once`);
  if (daemonBuilds !== builds) problems.push(`${scenario.label}: ${builds} build events but ${daemonBuilds} new image ids on the daemons`);
  if (failedBuilds > 0) problems.push(`${scenario.label}: ${failedBuilds} failed build(s)`);
  if (noImageId > 0) problems.push(`${scenario.label}: ${noImageId} of ${results.length} trial records have environment.imageId null (the image pin), though the image was resolved on Docker`);

  return {
    scenario,
    wallMs,
    trials: results.length,
    passed: results.length - notPassed.length,
    trialsByHost,
    images: tags.length,
    builds,
    buildsByHost,
    failedBuilds,
    buildMs,
    daemonBuilds,
    hostsPerImage: pairs.size / tags.length,
    pullsByHost,
    imagesOnHost,
    bytesOnHost,
    environmentShare: trialMs > 0 ? environmentMs / trialMs : Number.NaN,
    registryTags: await registryTags(ctx.registry, tags),
    registryBytes: ctx.registryStorage === null ? null : await duBytes(ctx.registryStorage),
    afterBuildMs,
    noImageId,
  };
}

function printMeasured(m: Measured): void {
  const s = (ms: number) => `${(ms / 1000).toFixed(1)} s`;
  const mb = (b: number) => `${(b / MB).toFixed(1)} MB`;
  console.log(
    `${m.scenario.label}: wall ${s(m.wallMs)}; ${m.passed}/${m.trials} passed (A ${m.trialsByHost.A}, B ${m.trialsByHost.B}); ` +
      `builds ${m.builds} (A ${m.buildsByHost.A}, B ${m.buildsByHost.B}; new image ids on the daemons ${m.daemonBuilds}) for ${m.images} images = ${(m.builds / m.images).toFixed(2)} per image ` +
      `(hosts that ran each task: ${m.hostsPerImage.toFixed(2)} per image); pulls A ${m.pullsByHost.A}, B ${m.pullsByHost.B}; build time ${s(m.buildMs)}; ` +
      `images on A ${m.imagesOnHost.A} (${mb(m.bytesOnHost.A)}), on B ${m.imagesOnHost.B} (${mb(m.bytesOnHost.B)}) beyond the base; ` +
      `environment phase ${(m.environmentShare * 100).toFixed(1)}% of trial time` +
      (m.afterBuildMs.length > 0 ? `; builder's environment phase beyond its build: first ${s(m.afterBuildMs[0] ?? 0)}, median ${s(median(m.afterBuildMs))}` : "") +
      (m.registryTags === null ? "" : `; registry holds ${m.registryTags} of them, ${mb(m.registryBytes ?? Number.NaN)} in all`) +
      `; load ${load()}`,
  );
}

async function main(): Promise<void> {
  for (const binary of ["dockerd", "ip", "redis-server", "docker-registry"]) {
    await exec("sh", ["-c", `command -v ${binary}`]).catch(() => {
      throw new Error(`images: ${binary} is not installed (Debian: ${binary === "ip" ? "iproute2" : binary === "dockerd" ? "docker.io" : binary})`);
    });
  }
  if (!(await dockerAvailable(undefined, 15_000))) throw new Error("images: no Docker engine answers (bash tools/docker/ensure-engine.sh)");
  const baseSize = Number((await docker(undefined, ["image", "inspect", "--format", "{{.Size}}", BASE]).catch(() => "")).trim());
  if (!(baseSize > 0)) throw new Error(`images: ${BASE} is missing on the Docker daemon (pnpm images)`);
  const storageDriver = (await docker(undefined, ["info", "--format", "{{.Driver}}"])).trim();

  const nonceOf = () => `${Date.now().toString(36)}${Math.random().toString(36).slice(2, 6)}`;
  const work = await mkdtemp(join(tmpdir(), "proctor-bench-images-"));
  cleanups.push({
    what: "work dir",
    run: async () => {
      if (values.keep) {
        await rm(join(work, "daemon-b"), { recursive: true, force: true });
        console.log(`images: kept ${work} (runs, logs)`);
      } else {
        await rm(work, { recursive: true, force: true });
      }
    },
  });
  console.log(`images: ${taskCount} Dockerfile tasks x ${attempts} attempts, oracle agent, 2 workers x ${perWorker} (host A: this Docker daemon, host B: a second dockerd), ${dataMb} MB of data per image; load ${load()}`);

  // Host B: a second daemon with the base image.
  const tag = Math.random().toString(16).slice(2, 8);
  const t0 = performance.now();
  const daemonB = secondDaemon(join(work, "daemon-b"), { storageDriver, tag });
  cleanups.push({ what: "second dockerd", run: () => daemonB.stop() });
  await daemonB.start();
  await exec("sh", ["-c", `docker save ${BASE} | DOCKER_HOST='${daemonB.host}' docker load -q`], { maxBuffer: 16 * MB });
  console.log(`host B: dockerd on ${daemonB.host} (${storageDriver}, bridge ${daemonB.bridge}), ${BASE} loaded, in ${((performance.now() - t0) / 1000).toFixed(1)} s`);

  const redis = await startRedisServer({ dir: join(work, "redis") });
  cleanups.push({ what: "redis", run: () => redis.stop() });

  // Every tag this bench makes, to remove them from host A at the end (host B goes with its data root).
  const allTags: string[] = [];
  let registry: RegistryServer | null = null;
  let registryHost: string | null = null;
  cleanups.push({ what: "registry", run: async () => void (await registry?.close()) });
  const runIds: string[] = [];
  const workers: WorkerProc[] = [];
  // Every worker process started (also those not ready yet), for the cleanup.
  const spawned: ChildProcess[] = [];
  const current: { run: ChildProcess | null } = { run: null };
  cleanups.push({
    what: "task images and containers on host A",
    run: async () => {
      for (const id of runIds) {
        const left = (await docker(undefined, ["ps", "-aq", "--filter", `label=proctor.run=${id}`]).catch(() => "")).split("\n").filter(Boolean);
        if (left.length > 0) await docker(undefined, ["rm", "-f", ...left]).catch(() => undefined);
      }
      const refs = [...allTags, ...(registryHost ? allTags.map((t) => `${registryHost}/proctor-build:${t.slice("proctor-build/".length)}`) : [])];
      for (let i = 0; i < refs.length; i += 50) await docker(undefined, ["rmi", ...refs.slice(i, i + 50)]).catch(() => undefined);
    },
  });
  cleanups.push({
    what: "workers and the run",
    run: async () => {
      if (current.run) await stopChild(current.run, 30_000);
      await Promise.all(spawned.map((child) => stopChild(child, 90_000)));
    },
  });

  const scenarios: Scenario[] = [
    { key: "nr-cold", label: "without registry, cold", registry: false, warm: false },
    { key: "nr-warm", label: "without registry, warm", registry: false, warm: true },
    { key: "reg-cold", label: "with registry, cold", registry: true, warm: false },
    { key: "reg-warm", label: "with registry, warm", registry: true, warm: true },
  ];
  const measured = new Map<string, Measured>();
  for (const shared of [false, true]) {
    // A new nonce per pair: new images, so the cold run is cold on both daemons and in the registry.
    const nonce = nonceOf();
    const tasksDir = join(work, `tasks-${nonce}`);
    const taskDirs = await writeTasks(tasksDir, { count: taskCount, nonce, dataMb });
    const tags = await Promise.all(taskDirs.map((dir) => ImageResolver.buildTag(join(dir, "environment"))));
    allTags.push(...tags);
    if (shared) {
      registry = await startRegistryServer();
      registryHost = registry.host;
      console.log(`registry: docker-registry on ${registry.host}`);
    }
    const pairKey = shared ? "reg" : "nr";
    for (const host of HOSTS) workers.push(await startWorkerProc(host, pairKey, { redisUrl: redis.url, registry: shared ? registryHost : null, daemonB, work, spawned }));
    for (const scenario of scenarios.filter((s) => s.registry === shared)) {
      runIds.push(`images-${nonce}-${scenario.key}`);
      const m = await runScenario(scenario, { tasksDir, tags, redisUrl: redis.url, registry: shared ? registryHost : null, registryStorage: shared ? (registry?.storage ?? null) : null, daemonB, work, nonce, workers, baseSize, current });
      measured.set(scenario.key, m);
      printMeasured(m);
    }
    // The pair's workers go; its images too (the next pair's are new, and the disk stays small).
    await Promise.all(workers.splice(0).map((w) => stopChild(w.child, 90_000)));
    for (const host of HOSTS) await docker(host === "B" ? daemonB.host : undefined, ["rmi", ...tags]).catch(() => undefined);
  }

  const get = (key: string) => {
    const m = measured.get(key);
    if (!m) throw new Error(`no measurement for ${key}`);
    return m;
  };
  const [nrCold, nrWarm, regCold, regWarm] = [get("nr-cold"), get("nr-warm"), get("reg-cold"), get("reg-warm")];
  const size = `${taskCount} tasks x ${attempts}, 2 hosts`;
  const perImage = (m: Measured) => m.builds / m.images;
  const ratio = (a: number, b: number) => (b > 0 ? a / b : null);

  console.log("\n| run | wall | builds / image | hosts per image | pulls A / B | images on A / B | MB on A / B (beyond base) | environment phase share |");
  console.log("| --- | --- | --- | --- | --- | --- | --- | --- |");
  for (const m of [nrCold, nrWarm, regCold, regWarm]) {
    console.log(
      `| ${m.scenario.label} | ${(m.wallMs / 1000).toFixed(1)} s | ${perImage(m).toFixed(2)} (${m.builds}) | ${m.hostsPerImage.toFixed(2)} | ${m.pullsByHost.A} / ${m.pullsByHost.B} | ${m.imagesOnHost.A} / ${m.imagesOnHost.B} | ${(m.bytesOnHost.A / MB).toFixed(1)} / ${(m.bytesOnHost.B / MB).toFixed(1)} | ${(m.environmentShare * 100).toFixed(1)}% |`,
    );
  }
  if (problems.length > 0) {
    console.log(`\n${problems.length} problem(s) seen:`);
    for (const p of problems) console.log(`  PROBLEM: ${p}`);
  }

  reportFigure({
    bench: "images",
    figure: `builds per image, cold run (${size}): with registry vs without`,
    proctor: { value: perImage(regCold), unit: "" },
    baseline: { value: perImage(nrCold), unit: "", label: "without registry" },
    ratio: ratio(perImage(regCold), perImage(nrCold)),
    ratioMeaning: "builds per image with registry / without",
    target: { on: "proctor", op: "<=", value: 1 },
  });
  reportFigure({
    bench: "images",
    figure: `builds per image, warm run (${size}): with registry vs without`,
    proctor: { value: perImage(regWarm), unit: "" },
    baseline: { value: perImage(nrWarm), unit: "", label: "without registry" },
    ratio: ratio(perImage(regWarm), perImage(nrWarm)),
    ratioMeaning: "builds per image with registry / without",
    target: { on: "proctor", op: "<=", value: 0 },
  });
  reportFigure({
    bench: "images",
    figure: `cold run wall time (${size}): with registry vs without`,
    proctor: { value: regCold.wallMs / 1000, unit: "s" },
    baseline: { value: nrCold.wallMs / 1000, unit: "s", label: "without registry" },
    ratio: ratio(regCold.wallMs, nrCold.wallMs),
    ratioMeaning: "wall with registry / without",
    target: null,
  });
  for (const [label, cold, warm] of [["without registry", nrCold, nrWarm], ["with registry", regCold, regWarm]] as const) {
    reportFigure({
      bench: "images",
      figure: `warm vs cold run wall time, ${label} (${size})`,
      proctor: { value: warm.wallMs / 1000, unit: "s" },
      baseline: { value: cold.wallMs / 1000, unit: "s", label: "cold run" },
      ratio: ratio(warm.wallMs, cold.wallMs),
      ratioMeaning: "warm wall / cold wall",
      target: null,
    });
  }
  reportFigure({
    bench: "images",
    figure: `image build time summed over builds, cold run (${size}): with registry vs without`,
    proctor: { value: regCold.buildMs / 1000, unit: "s" },
    baseline: { value: nrCold.buildMs / 1000, unit: "s", label: "without registry" },
    ratio: ratio(regCold.buildMs, nrCold.buildMs),
    ratioMeaning: "build time with registry / without",
    target: null,
  });
  for (const host of HOSTS) {
    reportFigure({
      bench: "images",
      figure: `task image MB on host ${host} (beyond the base image) after cold + warm runs: with registry vs without`,
      proctor: { value: regWarm.bytesOnHost[host] / MB, unit: "MB" },
      baseline: { value: nrWarm.bytesOnHost[host] / MB, unit: "MB", label: `without registry (${nrWarm.imagesOnHost[host]} images; ${regWarm.imagesOnHost[host]} with)` },
      ratio: ratio(regWarm.bytesOnHost[host], nrWarm.bytesOnHost[host]),
      ratioMeaning: "bytes with registry / without",
      target: null,
    });
  }
  reportFigure({
    bench: "images",
    figure: `registry storage after the cold run with registry (${size}; the base image's layers included, pushed with the first image)`,
    proctor: { value: (regCold.registryBytes ?? Number.NaN) / MB, unit: "MB" },
    baseline: null,
    ratio: null,
    ratioMeaning: "",
    target: null,
  });
  reportFigure({
    bench: "images",
    figure: `cold run, share of trial time getting the image (environment phase) (${size}): with registry vs without`,
    proctor: { value: regCold.environmentShare * 100, unit: "%" },
    baseline: { value: nrCold.environmentShare * 100, unit: "%", label: "without registry" },
    ratio: ratio(regCold.environmentShare, nrCold.environmentShare),
    ratioMeaning: "share with registry / without",
    target: null,
  });
  console.log(`load average at end: ${load()}`);
}

try {
  await main();
} catch (error) {
  if (!interrupted) {
    console.error(error instanceof Error ? error.message : String(error));
    process.exitCode = 1;
  }
} finally {
  await cleanup();
}
if (interrupted) await new Promise(() => undefined); // the signal handler exits once cleanup is done
