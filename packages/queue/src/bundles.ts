import { createHash, randomBytes } from "node:crypto";
import { createReadStream, existsSync } from "node:fs";
import { cp, mkdir, mkdtemp, readdir, readFile, rename, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { basename, isAbsolute, join, relative, resolve, sep } from "node:path";
import { Readable } from "node:stream";
import { extractArchive } from "@proctor/archive";
import { repoUrl } from "@proctor/engine";
import type { TaskSpec } from "@proctor/schema";
import * as tar from "tar";
import { BundleError, DispatchError } from "./errors";

export const SHA256_PATTERN = /^[0-9a-f]{64}$/;

/**
 * Where a worker gets a bundle: a directory it shares with the dispatcher, or `GET /v1/bundles/:sha`
 * of a server (with the worker's own token) or of a `proctor run --queue` (with the run's `token`).
 */
export type BundleSource = { kind: "dir"; dir: string } | { kind: "http"; baseUrl: string; token?: string };

/** A content-addressed bundle: the sha256 of its tar.gz bytes and where to fetch them. */
export interface BundleRef {
  sha256: string;
  source: BundleSource;
}

export interface PackedBundle {
  sha256: string;
  bytes: Buffer;
  /** The bundle-relative path a host path was packed under. */
  relativeOf(hostPath: string): string;
}

/**
 * Packs host paths (directories or files) into one deterministic tar.gz: each path that is not
 * inside an earlier one becomes `p<N>/` (a file keeps its name under it); file times are zeroed, so
 * the same content always hashes the same.
 */
export async function packBundle(paths: readonly string[]): Promise<PackedBundle> {
  const unique = [...new Set(paths.map((p) => resolve(p)))].sort((a, b) => a.length - b.length);
  const roots: { host: string; slot: string; dir: boolean }[] = [];
  for (const host of unique) {
    if (roots.some((r) => r.dir && (host === r.host || host.startsWith(r.host + sep)))) continue;
    const info = await stat(host).catch((error: unknown) => {
      throw new DispatchError(`cannot bundle ${host} for the workers: ${(error as Error).message}`);
    });
    roots.push({ host, slot: `p${roots.length}`, dir: info.isDirectory() });
  }
  const options = { gzip: true, portable: true, mtime: new Date(0) };
  let bytes: Buffer;
  const only = roots.length === 1 && roots[0]?.dir ? roots[0] : null;
  const entries = only ? (await readdir(only.host)).sort() : [];
  if (only && entries.length > 0) {
    // The usual task: one directory, packed in place under p0/ (no staging copy).
    bytes = await collect(tar.c({ ...options, cwd: only.host, prefix: only.slot }, entries));
  } else {
    const stage = await mkdtemp(join(tmpdir(), "proctor-bundle-"));
    try {
      for (const root of roots) {
        await mkdir(join(stage, root.slot), { recursive: true });
        await cp(root.host, root.dir ? join(stage, root.slot) : join(stage, root.slot, basename(root.host)), { recursive: true, verbatimSymlinks: true });
      }
      bytes = await collect(tar.c({ ...options, cwd: stage }, ["."]));
    } finally {
      await rm(stage, { recursive: true, force: true });
    }
  }
  const sha256 = createHash("sha256").update(bytes).digest("hex");
  const relativeOf = (hostPath: string): string => {
    const host = resolve(hostPath);
    for (const root of roots) {
      if (root.dir && (host === root.host || host.startsWith(root.host + sep))) return join(root.slot, relative(root.host, host));
      if (!root.dir && host === root.host) return join(root.slot, basename(host));
    }
    throw new DispatchError(`internal: ${hostPath} is not in the bundle`);
  };
  return { sha256, bytes, relativeOf };
}

async function collect(stream: AsyncIterable<Buffer | string>): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of stream) chunks.push(typeof chunk === "string" ? Buffer.from(chunk) : chunk);
  return Buffer.concat(chunks);
}

/** A task with its host paths made bundle-relative (what a job carries), plus the bundle's bytes. */
export async function bundleTask(task: TaskSpec): Promise<{ spec: TaskSpec; bundle: PackedBundle }> {
  const sourceIsDir = await stat(task.sourcePath).then((s) => s.isDirectory(), () => false);
  // A workspace repo on this disk travels in the bundle; a remote one is cloned by the worker.
  const repo = task.workspace ? repoUrl(task.workspace.repo, task.sourcePath) : null;
  const localRepo = repo !== null && isAbsolute(repo) ? repo : null;
  if (repo !== null && localRepo === null && !/^(https?|ssh|git):\/\//i.test(repo) && !/^[^/]+@[^:]+:/.test(repo)) {
    throw new DispatchError(`task ${task.id}: workspace repo "${task.workspace?.repo}" is neither a directory here nor a URL a worker could clone`);
  }
  const paths = [
    ...(sourceIsDir ? [task.sourcePath] : []),
    ...(localRepo ? [localRepo] : []),
    ...[task.environment.buildContext, task.verifier.testsDir, task.solution?.dir].filter((p): p is string => typeof p === "string"),
  ];
  const bundle = await packBundle(paths);
  const rel = (p: string) => bundle.relativeOf(p);
  const spec: TaskSpec = {
    ...task,
    sourcePath: sourceIsDir ? rel(task.sourcePath) : ".",
    environment: { ...task.environment, buildContext: task.environment.buildContext === null ? null : rel(task.environment.buildContext) },
    verifier: { ...task.verifier, testsDir: task.verifier.testsDir === null ? null : rel(task.verifier.testsDir) },
    solution: task.solution ? { ...task.solution, dir: rel(task.solution.dir) } : null,
    workspace: task.workspace && repo !== null ? { ...task.workspace, repo: localRepo ? rel(localRepo) : repo } : task.workspace,
  };
  return { spec, bundle };
}

/** The task with its bundle-relative paths placed under `root` (where the worker extracted the bundle). */
export function localizeTask(spec: TaskSpec, root: string): TaskSpec {
  const at = (p: string) => {
    if (isAbsolute(p) || p.split(/[\\/]/).includes("..")) throw new BundleError(`job's task ${spec.id}: path "${p}" leaves its bundle`, "");
    return join(root, p);
  };
  return {
    ...spec,
    sourcePath: at(spec.sourcePath),
    environment: { ...spec.environment, buildContext: spec.environment.buildContext === null ? null : at(spec.environment.buildContext) },
    verifier: { ...spec.verifier, testsDir: spec.verifier.testsDir === null ? null : at(spec.verifier.testsDir) },
    solution: spec.solution ? { ...spec.solution, dir: at(spec.solution.dir) } : null,
    // A remote repo (URL) stays as it is; a bundled one is a path inside the bundle.
    workspace: spec.workspace && !/^[a-z][a-z0-9+.-]*:\/\//i.test(spec.workspace.repo) && !/^[^/]+@[^:]+:/.test(spec.workspace.repo) ? { ...spec.workspace, repo: at(spec.workspace.repo) } : spec.workspace,
  };
}

/** Bundles kept as `<dir>/<sha256>.tar.gz`: what a dispatcher publishes to and what `GET /v1/bundles/:sha` serves. */
export class DirBundleStore {
  readonly dir: string;

  constructor(dir: string) {
    this.dir = resolve(dir);
  }

  pathOf(sha256: string): string {
    if (!SHA256_PATTERN.test(sha256)) throw new BundleError(`bundle id must be 64 lowercase hex digits (a sha256), got "${sha256.slice(0, 80)}"`, sha256, 400);
    return join(this.dir, `${sha256}.tar.gz`);
  }

  has(sha256: string): boolean {
    return existsSync(this.pathOf(sha256));
  }

  async put(bundle: { sha256: string; bytes: Buffer }): Promise<void> {
    const path = this.pathOf(bundle.sha256);
    if (existsSync(path)) return;
    await mkdir(this.dir, { recursive: true });
    const temp = `${path}.${randomBytes(4).toString("hex")}.tmp`;
    await writeFile(temp, bundle.bytes);
    await rename(temp, path);
  }

  /** A read stream of a stored bundle, or null when there is none. */
  open(sha256: string): Readable | null {
    const path = this.pathOf(sha256);
    return existsSync(path) ? createReadStream(path) : null;
  }
}

export interface BundleCacheOptions {
  /** Bearer token for `GET /v1/bundles/:sha` (never logged). */
  token?: string;
  /** Largest bundle accepted, bytes. Default 1 GiB. */
  maxBytes?: number;
}

/**
 * A worker's bundles, fetched once and kept extracted under `<dir>/<sha256>/`. What arrives must
 * hash to the sha256 the job names, else it is refused (a tampered or swapped bundle never runs).
 */
export class BundleCache {
  private readonly dir: string;
  private readonly pending = new Map<string, Promise<string>>();

  constructor(
    dir: string,
    private readonly options: BundleCacheOptions = {},
  ) {
    this.dir = resolve(dir);
  }

  /** The extracted bundle's root directory. Throws BundleError when it cannot be fetched or does not match its hash. */
  materialize(ref: BundleRef): Promise<string> {
    if (!SHA256_PATTERN.test(ref.sha256)) return Promise.reject(new BundleError(`job names a bundle id that is not a sha256: "${ref.sha256.slice(0, 80)}"`, ref.sha256));
    const root = join(this.dir, ref.sha256);
    if (existsSync(root)) return Promise.resolve(root);
    let running = this.pending.get(ref.sha256);
    if (!running) {
      running = this.fetchAndExtract(ref, root).finally(() => this.pending.delete(ref.sha256));
      this.pending.set(ref.sha256, running);
    }
    return running;
  }

  private async fetchAndExtract(ref: BundleRef, root: string): Promise<string> {
    const bytes = await this.fetch(ref);
    const actual = createHash("sha256").update(bytes).digest("hex");
    if (actual !== ref.sha256) {
      throw new BundleError(`bundle ${ref.sha256} from ${describeSource(ref.source)} was refused: its content hashes to ${actual} (tampered or swapped)`, ref.sha256);
    }
    await mkdir(this.dir, { recursive: true });
    const temp = `${root}.${randomBytes(4).toString("hex")}.tmp`;
    await extractArchive(Readable.from([bytes]), temp);
    await rename(temp, root).catch(async (error: unknown) => {
      await rm(temp, { recursive: true, force: true });
      if (!existsSync(root)) throw error; // another process extracted the same bundle first: fine
    });
    return root;
  }

  private async fetch(ref: BundleRef): Promise<Buffer> {
    const maxBytes = this.options.maxBytes ?? 1024 ** 3;
    if (ref.source.kind === "dir") {
      const path = join(ref.source.dir, `${ref.sha256}.tar.gz`);
      return readFile(path).catch((error: unknown) => {
        throw new BundleError(`bundle ${ref.sha256} is not in the shared directory ${ref.source.kind === "dir" ? ref.source.dir : ""} (${(error as Error).message}); mount the dispatcher's --bundles-dir on this worker at the same path`, ref.sha256, null, { cause: error });
      });
    }
    const url = `${ref.source.baseUrl.replace(/\/+$/, "")}/v1/bundles/${ref.sha256}`;
    let response: Response;
    try {
      const token = ref.source.token ?? this.options.token;
      response = await fetch(url, { headers: token ? { authorization: `Bearer ${token}` } : {} });
    } catch (error) {
      throw new BundleError(`fetching bundle ${ref.sha256} from ${url} failed: ${(error as Error).message}`, ref.sha256, null, { cause: error });
    }
    if (response.status === 401) {
      await response.body?.cancel();
      if (ref.source.token) throw new BundleError(`the run serving bundles at ${ref.source.baseUrl} refused the token its job gave (401) for bundle ${ref.sha256}: is another process on that port?`, ref.sha256, 401);
      throw new BundleError(`the server at ${ref.source.baseUrl} refused this worker's token (401) for bundle ${ref.sha256}; pass the server's --worker-token (or PROCTOR_WORKER_TOKEN)`, ref.sha256, 401);
    }
    if (!response.ok) {
      await response.body?.cancel();
      throw new BundleError(`fetching bundle ${ref.sha256} from ${url} answered ${response.status}`, ref.sha256, response.status);
    }
    const bytes = Buffer.from(await response.arrayBuffer());
    if (bytes.length > maxBytes) throw new BundleError(`bundle ${ref.sha256} is ${bytes.length} bytes, above this worker's limit of ${maxBytes}`, ref.sha256);
    return bytes;
  }
}

function describeSource(source: BundleSource): string {
  return source.kind === "dir" ? `the shared directory ${source.dir}` : source.baseUrl;
}
