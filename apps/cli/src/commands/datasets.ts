import { DatasetCache, defaultCacheDir, findDataset, formatBytes, isCommitId, loadRegistry, parseDatasetName, parseSourceSpec, resolveSources, SourceSpecError, type Pin, type RegistryDataset } from "@proctor/datasets";
import { UsageError } from "../errors";
import { asCliError, registryLocation } from "../remote-sources";

export interface DatasetsCommandOptions {
  action: "list" | "info" | "pull" | "rm";
  /** info: NAME[@VERSION]; pull, rm: NAME@VERSION (pull also takes git+URL@COMMIT#PATH). */
  name?: string;
  registry?: string;
  json: boolean;
  stdout?: NodeJS.WritableStream;
  stderr?: NodeJS.WritableStream;
}

/** A registry task's pin, when its commit is a full id (a branch would need the network to pin). */
function pinOf(task: RegistryDataset["tasks"][number]): Pin | null {
  if (task.git_commit_id === null || !isCommitId(task.git_commit_id)) return null;
  return { repository: task.git_url, commit: task.git_commit_id, path: task.path.split("/").filter((p) => p !== "" && p !== ".").join("/") };
}

/** How much of a dataset the cache holds (by entry.json; `pull` and runs verify the digests). */
async function cachedOf(cache: DatasetCache, dataset: RegistryDataset): Promise<{ cached: number; bytes: number; perTask: boolean[] }> {
  let bytes = 0;
  const perTask: boolean[] = [];
  const entries = new Map((await cache.entries()).map((e) => [cache.entryDir(e), e]));
  for (const task of dataset.tasks) {
    const pin = pinOf(task);
    const entry = pin ? entries.get(cache.entryDir(pin)) : undefined;
    perTask.push(entry !== undefined);
    bytes += entry?.bytes ?? 0;
  }
  return { cached: perTask.filter(Boolean).length, bytes, perTask };
}

/** `proctor datasets list|info|pull|rm`. Returns the exit code. */
export async function datasetsCommand(options: DatasetsCommandOptions): Promise<number> {
  try {
    return await datasets(options);
  } catch (error) {
    throw asCliError(error);
  }
}

async function datasets(options: DatasetsCommandOptions): Promise<number> {
  const out = options.stdout ?? process.stdout;
  const err = options.stderr ?? process.stderr;
  const cacheDir = defaultCacheDir();
  const cache = new DatasetCache(cacheDir);
  const location = registryLocation(options.registry);
  const registry = async () => {
    const r = await loadRegistry(location, { cacheDir });
    if (r.staleReason) err.write(`registry ${r.location} cannot be fetched (${r.staleReason}): using the copy cached earlier\n`);
    return r;
  };

  if (options.action === "list") {
    const r = await registry();
    const rows = await Promise.all(r.datasets.map(async (d) => ({ name: d.name, version: d.version, description: d.description, tasks: d.tasks.length, ...(await cachedOf(cache, d)) })));
    if (options.json) {
      out.write(`${JSON.stringify({ registry: r.location, cacheDir, datasets: rows.map(({ perTask: _p, ...row }) => row) }, null, 2)}\n`);
      return 0;
    }
    const label = (row: (typeof rows)[number]) => `${row.name}@${row.version}`;
    const width = Math.max(7, ...rows.map((row) => label(row).length));
    out.write(`${"DATASET".padEnd(width)}  TASKS  CACHED\n`);
    for (const row of rows) {
      const cached = row.cached === 0 ? "-" : `${row.cached === row.tasks ? "all" : row.cached} (${formatBytes(row.bytes)})`;
      out.write(`${label(row).padEnd(width)}  ${String(row.tasks).padStart(5)}  ${cached.padEnd(14)}  ${row.description.split("\n")[0]?.slice(0, 60) ?? ""}\n`);
    }
    out.write(`${rows.length} dataset version(s) in registry ${r.location}; cache: ${cacheDir}\n`);
    return 0;
  }

  if (!options.name) throw new UsageError(`proctor datasets ${options.action} needs a dataset: NAME@VERSION (proctor datasets list shows them)`);

  if (options.action === "info") {
    const r = await registry();
    const { name, version } = parseDatasetName(options.name);
    if (version === null) {
      const versions = r.datasets.filter((d) => d.name === name);
      if (versions.length !== 1) {
        if (versions.length === 0) findDataset(r, name, null); // throws: unknown dataset, with the nearest name
        const rows = await Promise.all(versions.map(async (d) => ({ version: d.version, tasks: d.tasks.length, description: d.description, ...(await cachedOf(cache, d)) })));
        if (options.json) out.write(`${JSON.stringify({ name, versions: rows.map(({ perTask: _p, ...row }) => row) }, null, 2)}\n`);
        else for (const row of rows) out.write(`${name}@${row.version}  ${row.tasks} tasks, ${row.cached} cached  ${row.description.split("\n")[0] ?? ""}\n`);
        return 0;
      }
    }
    const dataset = findDataset(r, name, version);
    const { perTask } = await cachedOf(cache, dataset);
    if (options.json) {
      out.write(`${JSON.stringify({ ...dataset, tasks: dataset.tasks.map((t, i) => ({ ...t, cached: perTask[i] })) }, null, 2)}\n`);
      return 0;
    }
    out.write(`${dataset.name}@${dataset.version}: ${dataset.description || "(no description)"}\n`);
    out.write(`versions: ${r.datasets.filter((d) => d.name === dataset.name).map((d) => d.version).join(", ")}\n`);
    const width = Math.max(0, ...dataset.tasks.map((t) => t.name.length));
    for (const [i, task] of dataset.tasks.entries()) {
      out.write(`  ${task.name.padEnd(width)}  ${task.git_url}@${task.git_commit_id?.slice(0, 12) ?? "HEAD"}#${task.path}${perTask[i] ? "  cached" : ""}\n`);
    }
    out.write(`${dataset.tasks.length} tasks, ${perTask.filter(Boolean).length} cached in ${cacheDir}\n`);
    return 0;
  }

  const spec = parseSourceSpec(options.name);
  if (options.action === "pull") {
    if (spec === null) throw new SourceSpecError(`"${options.name}" is not a dataset: write NAME@VERSION (e.g. terminal-bench@2.0) or git+URL@COMMIT#PATH`);
    const dirs = await resolveSources([spec], { registry: location, cacheDir, onProgress: (line) => err.write(`${line}\n`) });
    out.write(`${options.name}: ${dirs.length} task director${dirs.length === 1 ? "y" : "ies"} cached in ${cacheDir}\n`);
    return 0;
  }

  // rm: the dataset's entries, but not those another dataset of the registry pins too.
  if (spec?.kind !== "dataset") throw new SourceSpecError(`"${options.name}" is not a dataset: write NAME@VERSION (proctor datasets list shows the cached ones)`);
  const r = await registry();
  const dataset = findDataset(r, spec.name, spec.version);
  const mine = dataset.tasks.map(pinOf).filter((p): p is Pin => p !== null);
  const others = new Set(r.datasets.filter((d) => d !== dataset).flatMap((d) => d.tasks.map(pinOf).filter((p): p is Pin => p !== null).map((p) => cache.entryDir(p))));
  const shared = mine.filter((p) => others.has(cache.entryDir(p)));
  const before = new Map((await cache.entries()).map((e) => [cache.entryDir(e), e.bytes]));
  const gone = mine.filter((p) => !others.has(cache.entryDir(p)));
  const bytes = gone.reduce((sum, p) => sum + (before.get(cache.entryDir(p)) ?? 0), 0);
  const removed = await cache.remove(gone);
  out.write(`${options.name}: removed ${removed} cached task director${removed === 1 ? "y" : "ies"} (${formatBytes(bytes)})${shared.length > 0 ? `; kept ${shared.length} that other datasets of the registry use` : ""}\n`);
  return 0;
}
