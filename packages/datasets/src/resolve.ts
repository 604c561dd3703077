import type { TaskOrigin } from "@proctor/schema";
import { DatasetCache, pinKey, type Pin } from "./cache";
import { resolveRef, type GitOptions } from "./git";
import { findDataset, loadRegistry, type Registry, type RegistryDataset } from "./registry";
import { checkRef, checkRepository, isCommitId, normalizePath, type SourceSpec } from "./spec";
import { DatasetError, SourceSpecError } from "./errors";

/** One task directory (or directory of tasks) a source resolved to, in the cache. */
export interface ResolvedDir {
  /** The source as given (`terminal-bench@2.0`, `git+...`). */
  source: string;
  /** The directory to load tasks from. */
  dir: string;
  /** Its pin, and the dataset it was named through (TaskOrigin without the task id). */
  origin: Omit<TaskOrigin, "taskId">;
}

export interface ResolveOptions extends GitOptions {
  /** The registry's file path or URL; read only when a dataset is named that `pins` do not cover. */
  registry: string;
  /** The cache root (defaultCacheDir()). */
  cacheDir: string;
  /** A resumed run's origins: a dataset or git source they cover is fetched at these pins, not looked up again. */
  pins?: readonly TaskOrigin[];
  /** Repositories fetched at once. Default 4. */
  concurrency?: number;
  /** Progress lines: one per repository fetched, one per dataset resolved. */
  onProgress?: (line: string) => void;
}

/** GitHub, where `org/name@ref` goes when the registry has no dataset `org/name`. */
const GITHUB = "https://github.com/";

/**
 * Pin every source (a dataset through the registry, a git source's ref to a commit), fetch what
 * the cache lacks, and return the cached directories in source order. Throws DatasetError
 * subclasses, each one line naming what failed.
 */
export async function resolveSources(specs: readonly SourceSpec[], options: ResolveOptions): Promise<ResolvedDir[]> {
  const say = options.onProgress ?? (() => undefined);
  let registry: Promise<Registry> | null = null;
  const readRegistry = () => {
    registry ??= loadRegistry(options.registry, { cacheDir: options.cacheDir }).then((r) => {
      if (r.staleReason) say(`registry ${r.location} cannot be fetched (${r.staleReason}): using the copy cached earlier`);
      return r;
    });
    return registry;
  };
  const refs = new Map<string, Promise<string>>();
  const commitOf = (repository: string, ref: string | null) => {
    const key = `${repository}\0${ref ?? ""}`;
    if (!refs.has(key)) refs.set(key, resolveRef(repository, ref, options));
    return refs.get(key) as Promise<string>;
  };

  const wanted: { source: string; pin: Pin; dataset?: { name: string; version: string } }[] = [];
  for (const spec of specs) {
    if (spec.kind === "dataset") {
      const dataset = { name: spec.name, version: spec.version };
      const pinned = (options.pins ?? []).filter((o) => o.dataset?.name === spec.name && o.dataset.version === spec.version);
      if (pinned.length > 0) {
        for (const o of pinned) wanted.push({ source: spec.text, pin: { repository: o.repository, commit: o.commit, path: o.path }, dataset });
        continue;
      }
      const found = await lookupDataset(await readRegistry(), spec);
      if (found === "github") {
        const repository = `${GITHUB}${spec.name}.git`;
        checkRef(spec.version, spec.text);
        const commit = pinnedCommit(options.pins, repository, "") ?? (await commitOf(repository, spec.version));
        wanted.push({ source: spec.text, pin: { repository, commit, path: "" } });
        continue;
      }
      const pins = await Promise.all(
        found.tasks.map(async (task, i) => {
          const where = `${spec.text} task #${i + 1} ("${task.name}")`;
          const path = normalizePath(task.path, where);
          checkRepository(task.git_url, where);
          const ref = task.git_commit_id === null || /^head$/i.test(task.git_commit_id) ? null : task.git_commit_id;
          if (ref !== null) checkRef(ref, where);
          return { repository: task.git_url, commit: await commitOf(task.git_url, ref), path };
        }),
      );
      const unpinned = found.tasks.filter((t) => t.git_commit_id === null || /^head$/i.test(t.git_commit_id)).length;
      if (unpinned > 0) say(`${spec.text}: ${unpinned} task(s) name no commit: pinned to their repository's current default branch (run.json records the commits)`);
      for (const pin of pins) wanted.push({ source: spec.text, pin, dataset });
      continue;
    }
    // A branch or tag is pinned by a resumed run to the commit it fetched then.
    const commit = (spec.ref !== null && isCommitId(spec.ref) ? spec.ref : pinnedCommit(options.pins, spec.repository, spec.path)) ?? (await commitOf(spec.repository, spec.ref));
    wanted.push({ source: spec.text, pin: { repository: spec.repository, commit, path: spec.path } });
  }

  const cache = new DatasetCache(options.cacheDir);
  const entries = await cache.ensure(
    wanted.map((w) => w.pin),
    { ...options, onProgress: say },
  );
  for (const spec of specs) {
    const mine = wanted.filter((w) => w.source === spec.text);
    const cached = mine.filter((w) => entries.get(pinKey(w.pin))?.fromCache).length;
    say(`${spec.text}: ${mine.length} task director${mine.length === 1 ? "y" : "ies"} (${cached} from the cache, ${mine.length - cached} fetched) in ${options.cacheDir}`);
  }
  return wanted.map((w) => {
    const entry = entries.get(pinKey(w.pin));
    if (!entry) throw new DatasetError(`${w.source}: ${w.pin.repository} at ${w.pin.commit.slice(0, 12)} path "${w.pin.path}" was not fetched`, 1);
    return { source: w.source, dir: entry.dir, origin: { ...(w.dataset ? { dataset: w.dataset } : {}), repository: w.pin.repository, commit: w.pin.commit, path: w.pin.path } };
  });
}

/** The commit a resumed run fetched `repository`'s `path` at, if it did. */
function pinnedCommit(pins: readonly TaskOrigin[] | undefined, repository: string, path: string): string | undefined {
  const mine = (pins ?? []).filter((o) => o.repository === repository && !o.dataset && (path === "" || o.path === path || o.path.startsWith(`${path}/`)));
  return mine[0]?.commit;
}

/** The registry's dataset; for `org/name@ref` that it lacks, "github" (the repository github.com/org/name at ref). */
async function lookupDataset(registry: Registry, spec: Extract<SourceSpec, { kind: "dataset" }>): Promise<RegistryDataset | "github"> {
  try {
    return findDataset(registry, spec.name, spec.version);
  } catch (error) {
    const named = registry.datasets.some((d) => d.name === spec.name);
    if (!named && spec.name.includes("/")) return "github";
    throw error;
  }
}

/** `--dataset NAME` without a version: the registry's only version of it (else an error listing them). */
export async function datasetVersion(name: string, options: Pick<ResolveOptions, "registry" | "cacheDir">): Promise<string> {
  const registry = await loadRegistry(options.registry, { cacheDir: options.cacheDir });
  if (name.includes("@")) throw new SourceSpecError(`"${name}": give NAME or NAME@VERSION`);
  return findDataset(registry, name, null).version;
}
