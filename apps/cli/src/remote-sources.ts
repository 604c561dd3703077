import { existsSync } from "node:fs";
import { relative, resolve, sep } from "node:path";
import type { TaskOrigin, TaskSpec } from "@proctor/schema";
import { DatasetError, DEFAULT_REGISTRY_URL, datasetVersion, defaultCacheDir, parseDatasetName, parseSourceSpec, resolveSources, type ResolvedDir, type SourceSpec } from "@proctor/datasets";
import { CliError } from "./errors";

/** The registry to read: `--registry`, else $PROCTOR_REGISTRY, else Harbor's public registry. */
export function registryLocation(flag: string | undefined, env: NodeJS.ProcessEnv = process.env): string {
  return flag ?? (env.PROCTOR_REGISTRY || DEFAULT_REGISTRY_URL);
}

/** A dataset error as the CLI's one line and exit code (2: wrong input; 1: something unreachable). */
export function asCliError(error: unknown): unknown {
  return error instanceof DatasetError ? new CliError(error.message, error.exitCode, { cause: error }) : error;
}

/** `-d, --dataset NAME[@VERSION]` values as sources: NAME alone is the registry's only version of it. */
export async function datasetSources(values: readonly string[], registry: string | undefined): Promise<string[]> {
  const out: string[] = [];
  try {
    for (const value of values) {
      const { name, version } = parseDatasetName(value);
      out.push(`${name}@${version ?? (await datasetVersion(name, { registry: registryLocation(registry), cacheDir: defaultCacheDir() }))}`);
    }
  } catch (error) {
    throw asCliError(error);
  }
  return out;
}

export interface RemoteSources {
  /** Every source as local paths for prepareSources: a dataset or git source becomes its cached directories. */
  localPaths: string[];
  /** Every source as run.json records it: a local path made absolute, a dataset or git source as given. */
  recorded: string[];
  /** The cached directories the remote sources resolved to, with their pins. */
  dirs: ResolvedDir[];
}

/**
 * Sources that name a dataset (`NAME@VERSION`, `org/name@ref`) or a git repository
 * (`git+URL@COMMIT#PATH`) and are not existing paths: pinned, fetched into the cache (or found
 * there), and replaced by their directories. `pins` (a resumed run's origins) are fetched as they
 * are, without asking the registry.
 */
export async function resolveRemoteSources(sources: readonly string[], options: { registry?: string; pins?: readonly TaskOrigin[]; err: NodeJS.WritableStream }): Promise<RemoteSources> {
  let specs: (SourceSpec | null)[] = [];
  let dirs: ResolvedDir[] = [];
  try {
    specs = sources.map((source) => (source.startsWith("git+") || !existsSync(source) ? parseSourceSpec(source) : null));
    const remote = specs.filter((s): s is SourceSpec => s !== null);
    if (remote.length > 0) {
      dirs = await resolveSources(remote, {
        registry: registryLocation(options.registry),
        cacheDir: defaultCacheDir(),
        ...(options.pins ? { pins: options.pins } : {}),
        onProgress: (line) => options.err.write(`${line}\n`),
      });
    }
  } catch (error) {
    throw asCliError(error);
  }
  return {
    localPaths: sources.flatMap((source, i) => (specs[i] ? dirs.filter((d) => d.source === source).map((d) => d.dir) : [resolve(source)])),
    recorded: sources.map((source, i) => (specs[i] ? source : resolve(source))),
    dirs,
  };
}

/** Each loaded task's origin, when it came from a cached directory (a task dir, or one inside a directory of tasks). */
export function originsOf(tasks: readonly TaskSpec[], dirs: readonly ResolvedDir[]): TaskOrigin[] {
  const out: TaskOrigin[] = [];
  for (const task of tasks) {
    const path = resolve(task.sourcePath);
    const from = dirs.find((d) => path === d.dir || path.startsWith(`${d.dir}${sep}`));
    if (!from) continue;
    const inside = relative(from.dir, path).split(sep).filter(Boolean).join("/");
    out.push({ taskId: task.id, ...from.origin, path: [from.origin.path, inside].filter(Boolean).join("/") });
  }
  return out;
}
