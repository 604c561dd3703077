import { execFile } from "node:child_process";
import { constants } from "node:fs";
import { access, stat } from "node:fs/promises";
import { homedir } from "node:os";
import { delimiter, join, relative, resolve } from "node:path";
import { DockerRuntime, ImageRegistry, dockerHostReport, type DockerHostReport } from "@proctor/sandbox-docker";
import { defaultCacheDir } from "@proctor/tasks";
import { DEFAULT_DOCKER_IMAGE } from "../runtime";

/**
 * `proctor doctor`: what Proctor found on this host, one line per finding, with what to do about
 * each gap. Changes nothing. Exit 0 when every finding is ok or an optional tool is absent
 * (`note`), 1 when something makes runs slower (`slow`) or unable to use a part (`missing`).
 */
type FindingStatus = "ok" | "note" | "slow" | "missing";

export interface Finding {
  status: FindingStatus;
  /** What was looked at, e.g. "docker engine". */
  what: string;
  found: string;
  /** What to do, for every status but ok. */
  fix?: string;
}

const BUSYBOX_IMAGE = "proctor/busybox:latest";
const NODE_MIN = [20, 19] as const;
/** What one listing of a container's changes costs through Docker 20.10's walk of a Debian image. */
const DAEMON_WALK = "about 0.7 s of daemon time per listing, up to two per trial (trials about twice as slow at -n 8)";

export async function doctorCommand(options: { out: string; json: boolean }): Promise<number> {
  const findings = await diagnose(resolve(options.out));
  if (options.json) process.stdout.write(`${JSON.stringify({ findings }, null, 2)}\n`);
  else {
    const width = Math.max(...findings.map((f) => f.status.length));
    for (const f of findings) process.stdout.write(`${f.status.padEnd(width)}  ${f.what}: ${f.found}${f.fix ? `; fix: ${f.fix}` : ""}\n`);
  }
  return findings.some((f) => f.status === "slow" || f.status === "missing") ? 1 : 0;
}

async function diagnose(runsRoot: string): Promise<Finding[]> {
  const findings: Finding[] = [node()];
  const docker = await dockerHostReport({ images: [DEFAULT_DOCKER_IMAGE, BUSYBOX_IMAGE] });
  findings.push(...dockerFindings(docker));
  if (!("error" in docker.engine)) findings.push(await taskImages(), await imageRegistry());
  findings.push(await redis(), await chromium());
  findings.push(await directory("runs root", runsRoot, "where proctor run writes (-o)"));
  findings.push(await directory("cache: task files", defaultCacheDir(), "imported tasks' files by content hash"));
  // The engine's default for a run's bare-repo mirrors: beside the runs root.
  findings.push(await directory("cache: repo mirrors", resolve(runsRoot, "..", ".cache", "repos"), "bare clones for SWE-style workspaces"));
  const slots = join(process.env.XDG_CACHE_HOME ?? join(homedir(), ".cache"), "proctor", "slots");
  findings.push(await directory("cache: slots", slots, "the slot library's default (proctor serve --slots keeps them in its data dir)"));
  return findings;
}

function node(): Finding {
  const [major = 0, minor = 0] = process.versions.node.split(".").map(Number);
  const fine = major > NODE_MIN[0] || (major === NODE_MIN[0] && minor >= NODE_MIN[1]);
  return fine
    ? { status: "ok", what: "node", found: `${process.versions.node}` }
    : { status: "missing", what: "node", found: `${process.versions.node}, older than ${NODE_MIN.join(".")}`, fix: `install Node.js ${NODE_MIN.join(".")} or newer` };
}

function dockerFindings(report: DockerHostReport): Finding[] {
  const findings: Finding[] = [];
  const { engine } = report;
  if ("error" in engine) {
    findings.push({
      status: "missing",
      what: "docker engine",
      found: `none answers at ${report.endpoint} (${engine.error}); runs use the local runtime (host processes, no isolation)`,
      fix: "bash tools/docker/ensure-engine.sh (installs and starts Debian's docker.io), then pnpm images",
    });
  } else {
    findings.push({ status: "ok", what: "docker engine", found: `${engine.version} at ${report.endpoint}, storage driver ${engine.storageDriver}, data in ${engine.rootDir}` });
    for (const image of report.images) {
      findings.push(
        image.present
          ? { status: "ok", what: `image ${image.name}`, found: `present${image.sizeBytes ? ` (${megabytes(image.sizeBytes)})` : ""}` }
          : { status: "missing", what: `image ${image.name}`, found: "absent (no registry is needed: it is built locally)", fix: "pnpm images" },
      );
    }
    findings.push(
      report.busybox === null || "missing" in report.busybox
        ? { status: "missing", what: "trusted busybox", found: report.busybox?.missing ?? "not looked for", fix: "pnpm images (or apt-get install busybox-static)" }
        : { status: "ok", what: "trusted busybox", found: `${report.busybox.source}; the verifier's tools, mounted read-only into sandboxes` },
    );
  }
  findings.push(changesFastPath(report));
  findings.push(
    report.overlayStandsAlone
      ? { status: "ok", what: "log copy fast path", found: "overlay redirect_dir and metacopy are off: a halted container's /logs are copied from its layer on this host" }
      : { status: "note", what: "log copy fast path", found: "overlay redirect_dir or metacopy is on (or unknown) here: /logs come through the daemon's archive API (~70 ms more per trial)", fix: "none needed; the overlay module's defaults give the fast path" },
  );
  return findings;
}

/** What task images (proctor-build/*) take against their budget, and what the Docker data root's disk has free. */
async function taskImages(): Promise<Finding> {
  const what = "task images";
  try {
    const { formatBytes, imagesDiskReport } = await import("./images");
    const budgetGb = Number(process.env.PROCTOR_IMAGE_CACHE_GB);
    const runtime = new DockerRuntime({ warmPool: 0, imageCacheBytes: Number.isFinite(budgetGb) && budgetGb > 0 ? Math.floor(budgetGb * 1024 ** 3) : "default" });
    const report = await imagesDiskReport(runtime);
    const budget = report.budgetBytes === null ? "no budget (the data root's disk is not visible here)" : `budget ${formatBytes(report.budgetBytes)}${process.env.PROCTOR_IMAGE_CACHE_GB ? " (PROCTOR_IMAGE_CACHE_GB)" : ""}`;
    const disk = report.disk ? `; ${formatBytes(report.disk.freeBytes)} free of ${formatBytes(report.disk.totalBytes)} on ${report.disk.root}` : "";
    const found = `${report.count} image(s), ${formatBytes(report.usageBytes)} of their own, ${budget}${disk}`;
    if (report.budgetBytes !== null && report.usageBytes > report.budgetBytes) return { status: "note", what, found, fix: "proctor images prune (least recently used first; images in use stay)" };
    if (report.disk && report.disk.freeBytes < report.disk.totalBytes * 0.1) return { status: "note", what, found, fix: "free space on the Docker data root: proctor images prune --image-cache-gb N, docker system prune" };
    return { status: "ok", what, found };
  } catch (error) {
    return { status: "note", what, found: `could not be listed (${error instanceof Error ? error.message : String(error)})`, fix: "check that the Docker engine answers: docker system df" };
  }
}

/** PROCTOR_IMAGE_REGISTRY, checked as a run checks it (through the Docker daemon). */
async function imageRegistry(): Promise<Finding> {
  const what = "image registry";
  const spec = process.env.PROCTOR_IMAGE_REGISTRY;
  if (!spec) return { status: "ok", what, found: "none set (PROCTOR_IMAGE_REGISTRY): each Docker host builds the task images it needs" };
  try {
    const registry = new ImageRegistry(spec);
    await registry.check();
    return { status: "ok", what, found: `${registry.host} answers the Docker daemon (PROCTOR_IMAGE_REGISTRY): task images are pulled from and pushed to it` };
  } catch (error) {
    return { status: "missing", what, found: `PROCTOR_IMAGE_REGISTRY=${spec}: ${error instanceof Error ? error.message : String(error)}`, fix: "docs/images.md (a cluster: share images through a registry)" };
  }
}

/** Whether `changes()` reads overlay layers on this host, and if not, what it costs and what fixes it. */
function changesFastPath(report: DockerHostReport): Finding {
  const what = "changes fast path";
  const { native, getfattr } = report.xattrs;
  let reader: string;
  if (typeof native === "string") reader = `${native}${getfattr ? `, getfattr at ${getfattr} as well` : ""}`;
  else if (getfattr) reader = `getfattr at ${getfattr} (${native.unavailable})`;
  else return { status: "slow", what, found: `${native.unavailable}; no getfattr on PATH either: ${DAEMON_WALK}`, fix: native.fix };
  const { engine } = report;
  if ("error" in engine) return { status: "note", what, found: `overlay xattrs readable by ${reader}; no engine to check its layers` };
  if (engine.storageDriver !== "overlay2") return { status: "slow", what, found: `storage driver ${engine.storageDriver}, not overlay2: ${DAEMON_WALK}`, fix: "run the Docker daemon with the overlay2 storage driver" };
  if (report.layersReadable !== true) {
    return { status: "slow", what, found: `${engine.rootDir}/overlay2 is not readable here (the daemon runs elsewhere, or this process is not root): ${DAEMON_WALK}`, fix: "run Proctor as root on the machine the Docker daemon runs on" };
  }
  return { status: "ok", what, found: `container file changes are read from ${engine.rootDir}/overlay2 on this host (xattrs by ${reader})` };
}

async function redis(): Promise<Finding> {
  const path = await onPath("redis-server");
  if (path === null) return { status: "note", what: "redis", found: "no redis-server on PATH; only --queue runs, workers and their tests need Redis", fix: "apt-get install redis-server, or point --queue at a Redis elsewhere" };
  const version = /v=(\S+)/.exec((await firstLine(path, ["--version"])) ?? "")?.[1];
  return { status: "ok", what: "redis", found: `redis-server ${version ?? "(version unknown)"} at ${path}; for --queue, workers and their tests` };
}

async function chromium(): Promise<Finding> {
  const path = process.env.CHROMIUM_PATH ?? "/usr/bin/chromium";
  if (!(await executable(path))) {
    return { status: "note", what: "chromium", found: `none at ${path}${process.env.CHROMIUM_PATH ? " (CHROMIUM_PATH)" : ""}; only the viewer's browser tests and bench need it`, fix: "apt-get install chromium, or set CHROMIUM_PATH" };
  }
  const version = /\d+(\.\d+)+/.exec((await firstLine(path, ["--version"])) ?? "")?.[0];
  return { status: "ok", what: "chromium", found: `${version ?? "(version unknown)"} at ${path}; for the viewer's browser tests` };
}

/** A directory Proctor writes to: present and writable, absent (made on first use), or not writable. */
async function directory(what: string, path: string, purpose: string): Promise<Finding> {
  const shown = displayPath(path);
  const info = await stat(path).catch(() => null);
  if (info === null) {
    const parent = await nearestExisting(path);
    return (await writable(parent))
      ? { status: "ok", what, found: `${shown}, absent: made on first use; ${purpose}` }
      : { status: "missing", what, found: `${shown} is absent and ${displayPath(parent)} is not writable`, fix: `make ${shown} writable for this user` };
  }
  if (!info.isDirectory()) return { status: "missing", what, found: `${shown} is not a directory`, fix: `move ${shown} away` };
  return (await writable(path))
    ? { status: "ok", what, found: `${shown}; ${purpose}` }
    : { status: "missing", what, found: `${shown} is not writable`, fix: `make ${shown} writable for this user` };
}

async function nearestExisting(path: string): Promise<string> {
  let at = path;
  while ((await stat(at).catch(() => null)) === null) {
    const up = resolve(at, "..");
    if (up === at) break;
    at = up;
  }
  return at;
}

function displayPath(path: string): string {
  const rel = relative(process.cwd(), path);
  if (rel === "") return ".";
  if (!rel.startsWith("..")) return `./${rel}`;
  const home = homedir();
  return path.startsWith(`${home}/`) ? `~/${path.slice(home.length + 1)}` : path;
}

const writable = (path: string) => access(path, constants.W_OK | constants.X_OK).then(() => true, () => false);
const executable = (path: string) => access(path, constants.X_OK).then(() => true, () => false);

async function onPath(name: string): Promise<string | null> {
  for (const dir of (process.env.PATH ?? "").split(delimiter)) {
    if (dir !== "" && (await executable(join(dir, name)))) return join(dir, name);
  }
  return null;
}

/** The first line `path args` prints, or null when it fails within 15 s. */
function firstLine(path: string, args: string[]): Promise<string | null> {
  return new Promise((done) => {
    execFile(path, args, { timeout: 15_000 }, (error, stdout) => done(error ? null : (stdout.split("\n")[0] ?? "").trim() || null));
  });
}

function megabytes(bytes: number): string {
  return `${Math.round(bytes / 1_000_000)} MB`;
}
