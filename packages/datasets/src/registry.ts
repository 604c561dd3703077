import { createHash } from "node:crypto";
import { readFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { nearestName } from "@proctor/tasks";
import { RegistryError, UnknownDatasetError } from "./errors";
import { writeFileAtomic } from "./fs";

/** Harbor's public registry: what `--registry` defaults to. */
export const DEFAULT_REGISTRY_URL = "https://raw.githubusercontent.com/laude-institute/harbor/main/registry.json";

/** One task of a registry dataset, with Harbor's field names: a directory of a git repository at a commit. */
export interface RegistryTask {
  name: string;
  git_url: string;
  /** A full commit id, a ref name, or null (the repository's default branch, resolved when fetched). */
  git_commit_id: string | null;
  path: string;
}

/** One dataset version of a registry (Harbor's registry.json: an array of these). */
export interface RegistryDataset {
  name: string;
  version: string;
  description: string;
  tasks: RegistryTask[];
}

export interface Registry {
  /** The file path or URL it was read from. */
  location: string;
  datasets: RegistryDataset[];
  /** Set when the URL could not be fetched and the copy cached by an earlier fetch was read instead: why. */
  staleReason?: string;
}

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

function describe(value: unknown): string {
  if (value === undefined) return "nothing (the field is missing)";
  if (value === null) return "null";
  if (Array.isArray(value)) return "a list";
  if (typeof value === "object") return "an object";
  return JSON.stringify(value);
}

/**
 * Harbor's registry JSON, read unchanged: an array of `{name, version, description, tasks:
 * [{name, git_url, git_commit_id, path}], metrics?}` (other fields are ignored). Every problem
 * throws RegistryError naming the dataset, the task and the field.
 */
export function parseRegistry(text: string, location: string): RegistryDataset[] {
  let json: Json;
  try {
    json = JSON.parse(text) as Json;
  } catch (error) {
    throw new RegistryError(`registry ${location} is not JSON (${(error as Error).message}): point --registry at a registry.json in Harbor's format`, location, 2, { cause: error });
  }
  const list = Array.isArray(json) ? json : json !== null && typeof json === "object" && Array.isArray(json.datasets) ? json.datasets : null;
  if (list === null) throw new RegistryError(`registry ${location}: expected a JSON array of datasets (Harbor's registry.json), got ${describe(json)}`, location);
  return list.map((entry, i) => {
    const where = (field: string, what: string, got: unknown, label?: string) =>
      new RegistryError(`registry ${location}: dataset #${i + 1}${label ? ` (${label})` : ""}: "${field}" must be ${what}, got ${describe(got)}`, location);
    if (entry === null || typeof entry !== "object" || Array.isArray(entry)) throw new RegistryError(`registry ${location}: dataset #${i + 1} must be an object with name, version, description and tasks, got ${describe(entry)}`, location);
    const { name, version, description, tasks } = entry;
    if (typeof name !== "string" || name === "") throw where("name", "a non-empty string", name);
    if (typeof version !== "string" || version === "") throw where("version", "a non-empty string (e.g. \"2.0\")", version, name);
    const label = `${name}@${version}`;
    if (description !== undefined && description !== null && typeof description !== "string") throw where("description", "a string", description, label);
    if (!Array.isArray(tasks)) throw where("tasks", "a list of {name, git_url, git_commit_id, path}", tasks, label);
    return {
      name,
      version,
      description: typeof description === "string" ? description : "",
      tasks: tasks.map((task, j) => parseTask(task, `registry ${location}: dataset #${i + 1} (${label}), task #${j + 1}`, location)),
    };
  });
}

function parseTask(task: Json, where: string, location: string): RegistryTask {
  if (task === null || typeof task !== "object" || Array.isArray(task)) throw new RegistryError(`${where} must be an object with name, git_url, git_commit_id and path, got ${describe(task)}`, location);
  const named = typeof task.name === "string" ? `${where} ("${task.name}")` : where;
  const bad = (field: string, what: string) => new RegistryError(`${named}: "${field}" must be ${what}, got ${describe(task[field])}`, location);
  if (typeof task.name !== "string" || task.name === "") throw bad("name", "a non-empty string");
  if (task.git_url === null || task.git_url === undefined) throw bad("git_url", "a git repository URL (tasks that live beside a local registry file are not supported: put them in a git repository)");
  if (typeof task.git_url !== "string" || task.git_url === "") throw bad("git_url", "a git repository URL");
  if (task.git_commit_id !== null && task.git_commit_id !== undefined && (typeof task.git_commit_id !== "string" || task.git_commit_id === "")) throw bad("git_commit_id", "a commit id (40 hex digits) or null");
  if (typeof task.path !== "string") throw bad("path", "the task's directory in the repository (a string)");
  return { name: task.name, git_url: task.git_url, git_commit_id: typeof task.git_commit_id === "string" ? task.git_commit_id : null, path: task.path };
}

export interface LoadRegistryOptions {
  /** The cache root: a URL's registry is kept under `<cacheDir>/registries/` for offline use. */
  cacheDir: string;
  /** How long a URL's fetch may take. Default 15 s. */
  timeoutMs?: number;
}

/** The cached copy of a URL's registry. */
function cachedRegistryPath(cacheDir: string, url: string): string {
  return join(cacheDir, "registries", `${createHash("sha256").update(url).digest("hex").slice(0, 16)}.json`);
}

/**
 * Read a registry from a file path, a file:// URL or an http(s) URL. A URL's body is cached; when
 * the URL cannot be fetched the cached copy is read (and `staleReason` says why), else it throws
 * RegistryError (exit 1) saying how to give a local file.
 */
export async function loadRegistry(location: string, options: LoadRegistryOptions): Promise<Registry> {
  if (/^https?:\/\//i.test(location)) return loadRegistryUrl(location, options);
  const path = location.startsWith("file://") ? fileURLToPath(location) : resolve(location);
  let text: string;
  try {
    text = await readFile(path, "utf8");
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    throw new RegistryError(`registry ${location}: ${code === "ENOENT" ? "no such file" : (error as Error).message}: pass --registry FILE|URL (or set PROCTOR_REGISTRY) to a registry.json in Harbor's format`, location, 2, { cause: error });
  }
  return { location, datasets: parseRegistry(text, location) };
}

async function loadRegistryUrl(url: string, options: LoadRegistryOptions): Promise<Registry> {
  const cached = cachedRegistryPath(options.cacheDir, url);
  let reason: string;
  try {
    const response = await fetch(url, { signal: AbortSignal.timeout(options.timeoutMs ?? 15_000) });
    if (response.ok) {
      const text = await response.text();
      const datasets = parseRegistry(text, url);
      await writeFileAtomic(cached, text);
      return { location: url, datasets };
    }
    reason = `HTTP ${response.status}`;
  } catch (error) {
    if (error instanceof RegistryError) throw error;
    const cause = (error as { cause?: { code?: string; message?: string } }).cause;
    reason = cause?.code ?? cause?.message ?? (error as Error).message;
  }
  const text = await readFile(cached, "utf8").catch(() => null);
  if (text === null) {
    throw new RegistryError(`registry ${url} cannot be fetched (${reason}) and no copy of it is cached: pass --registry FILE (or set PROCTOR_REGISTRY) to a local registry.json`, url, 1);
  }
  return { location: url, datasets: parseRegistry(text, `${url} (cached copy)`), staleReason: reason };
}

/**
 * The dataset `name` at `version` (null: its only version). Throws UnknownDatasetError naming the
 * nearest name, or listing the versions the registry has.
 */
export function findDataset(registry: Registry, name: string, version: string | null): RegistryDataset {
  const versions = registry.datasets.filter((d) => d.name === name);
  if (versions.length === 0) {
    const near = nearestName(name, [...new Set(registry.datasets.map((d) => d.name))]);
    throw new UnknownDatasetError(`unknown dataset "${name}" in registry ${registry.location}${near ? `: did you mean ${near}?` : ""} (proctor datasets list shows the registry's datasets)`, name);
  }
  const known = versions.map((d) => d.version);
  if (version === null) {
    if (versions.length === 1) return versions[0] as RegistryDataset;
    throw new UnknownDatasetError(`dataset "${name}" has ${versions.length} versions in registry ${registry.location}: name one, e.g. ${name}@${known.at(-1)} (versions: ${known.join(", ")})`, name);
  }
  const found = versions.find((d) => d.version === version);
  if (!found) throw new UnknownDatasetError(`dataset "${name}" has no version "${version}" in registry ${registry.location}; its versions: ${known.join(", ")}`, `${name}@${version}`);
  return found;
}
