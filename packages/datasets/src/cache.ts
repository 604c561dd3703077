import { createHash, randomBytes } from "node:crypto";
import { cp, mkdir, readdir, readFile, rename, rm, rmdir, stat } from "node:fs/promises";
import { homedir } from "node:os";
import { basename, dirname, join } from "node:path";
import { DatasetError, FetchError } from "./errors";
import { digestTree, removeDir, writeFileAtomic } from "./fs";
import { fetchCommit, type GitOptions } from "./git";
import { alive, withLock } from "./lock";

/** A task directory pinned in git: the repository URL, a full commit id, the directory in it (`""`: the root). */
export interface Pin {
  repository: string;
  commit: string;
  path: string;
}

/** What a cache entry records beside its files (entry.json). */
export interface CacheEntry extends Pin {
  /** sha256 of the files' tree, checked every time the entry is used. */
  digest: string;
  bytes: number;
  fetchedAt: string;
  /** The directory holding the task's files (its name is the path's last part). */
  dir: string;
  /** From ensure: whether the entry was in the cache already (false: fetched now). */
  fromCache?: boolean;
}

/**
 * The cache root: `$PROCTOR_CACHE_DIR`, else `$XDG_CACHE_HOME/proctor`, else `~/.cache/proctor`.
 */
export function defaultCacheDir(env: NodeJS.ProcessEnv = process.env): string {
  if (env.PROCTOR_CACHE_DIR) return env.PROCTOR_CACHE_DIR;
  if (env.XDG_CACHE_HOME) return join(env.XDG_CACHE_HOME, "proctor");
  return join(homedir(), ".cache", "proctor");
}

const sha = (text: string) => createHash("sha256").update(text).digest("hex");
const slug = (text: string, max: number) => text.replace(/^[a-z+]+:\/\//i, "").replace(/[^A-Za-z0-9._-]+/g, "_").replace(/^[._]+/, "").slice(0, max) || "x";

export const pinKey = (pin: Pin): string => `${pin.repository}\0${pin.commit}\0${pin.path}`;


/** Run `work` over `items`, at most `limit` at once. */
async function pool<T>(items: readonly T[], limit: number, work: (item: T) => Promise<void>): Promise<void> {
  let next = 0;
  let failed: unknown = null;
  await Promise.all(
    Array.from({ length: Math.min(limit, items.length) }, async () => {
      while (next < items.length && failed === null) {
        const item = items[next++] as T;
        await work(item).catch((error: unknown) => {
          failed ??= error;
        });
      }
    }),
  );
  if (failed !== null) throw failed;
}

export interface EnsureOptions extends GitOptions {
  /** Repositories fetched at once. Default 4. */
  concurrency?: number;
  /** One line per repository fetched, per entry refetched, and while waiting for another process's fetch. */
  onProgress?: (line: string) => void;
}

/**
 * Task directories fetched from git, keyed by repository and commit:
 * `<root>/git/<repo>/<commit>/<path>/` holds `entry.json` (the pin, a digest of the files) and
 * `files/<name>/`. An entry is built in `<root>/tmp/` and renamed into place, so a kill at any
 * moment leaves a whole entry or none; it is checked against its digest on every use, and one that
 * does not match is fetched again, never used. Fetches of one repository and commit are locked
 * across processes.
 */
export class DatasetCache {
  constructor(readonly root: string) {}

  /** The entry directory of a pin. */
  entryDir(pin: Pin): string {
    const repo = `${slug(pin.repository, 48)}-${sha(pin.repository).slice(0, 12)}`;
    const path = pin.path === "" ? "_root" : `${slug(pin.path, 60)}-${sha(pin.path).slice(0, 8)}`;
    return join(this.root, "git", repo, pin.commit, path);
  }

  /** The lock directory of a pin's repository and commit (held while they are fetched). */
  lockDir(pin: Pin): string {
    return join(this.root, "locks", `${basename(dirname(dirname(this.entryDir(pin))))}-${pin.commit}.lock`);
  }

  /** The task directory's name inside an entry: the path's last part (the task id), or the repository's name for its root. */
  private leaf(pin: Pin): string {
    return pin.path === "" ? slug(basename(pin.repository).replace(/\.git$/, ""), 64) : (pin.path.split("/").at(-1) as string);
  }

  /** The entry of `pin` when it is cached and its files match its digest; "mismatch" when they do not; null when absent. */
  async lookup(pin: Pin): Promise<CacheEntry | "mismatch" | null> {
    const dir = this.entryDir(pin);
    const recorded = await readEntry(dir);
    if (recorded === null) return null;
    const files = join(dir, "files", this.leaf(pin));
    const actual = await digestTree(files).catch(() => null);
    if (actual?.digest !== recorded.digest) return "mismatch";
    return { ...recorded, dir: files };
  }

  /**
   * The task directory of every pin, fetching what is missing (one shallow, sparse fetch per
   * repository and commit, `concurrency` at once). Throws FetchError naming what could not be fetched.
   */
  async ensure(pins: readonly Pin[], options: EnsureOptions = {}): Promise<Map<string, CacheEntry>> {
    const say = options.onProgress ?? (() => undefined);
    const found = new Map<string, CacheEntry>();
    const missing = new Map<string, Pin[]>();
    const unique = [...new Map(pins.map((p) => [pinKey(p), p])).values()];
    // Digests are checked a few entries at once: reading files overlaps with hashing them.
    const looked = new Map<string, CacheEntry | "mismatch" | null>();
    await pool(unique, 8, async (pin) => void looked.set(pinKey(pin), await this.lookup(pin)));
    for (const pin of unique) {
      const entry = looked.get(pinKey(pin)) ?? null;
      if (entry !== null && entry !== "mismatch") {
        found.set(pinKey(pin), { ...entry, fromCache: true });
        continue;
      }
      if (entry === "mismatch") say(`cache: ${this.entryDir(pin)} does not match its digest: fetching it again`);
      const group = `${pin.repository}\0${pin.commit}`;
      missing.set(group, [...(missing.get(group) ?? []), pin]);
    }
    if (missing.size === 0) return found;
    await this.sweepTemp();
    await pool([...missing.values()], options.concurrency ?? 4, async (group) => {
      const entries = await this.fetchGroup(group, options, say).catch((error: unknown) => {
        if (!diskFull(error)) throw error;
        const { repository, commit } = group[0] as Pin;
        throw new DatasetError(`the dataset cache ${this.root} has no space left while fetching ${repository} at ${commit.slice(0, 12)}: free space there or set PROCTOR_CACHE_DIR to a disk with room (nothing was kept)`, 1, { cause: error });
      });
      for (const entry of entries) found.set(pinKey(entry), { ...entry, fromCache: false });
    });
    return found;
  }

  /** Fetch one repository at one commit and install an entry per path, under the lock of that repository and commit. */
  private async fetchGroup(pins: Pin[], options: GitOptions, say: (line: string) => void): Promise<CacheEntry[]> {
    const { repository, commit } = pins[0] as Pin;
    return withLock(
      this.lockDir(pins[0] as Pin),
      async () => {
        // Another process may have fetched them while this one waited for the lock.
        const done: CacheEntry[] = [];
        const todo: Pin[] = [];
        for (const pin of pins) {
          const entry = await this.lookup(pin);
          if (entry !== null && entry !== "mismatch") done.push(entry);
          else todo.push(pin);
        }
        if (todo.length === 0) return done;
        const started = Date.now();
        const tmp = join(this.root, "tmp", `${process.pid}-${randomBytes(6).toString("hex")}`);
        try {
          const checkout = join(tmp, "repo");
          await fetchCommit(repository, commit, todo.map((p) => p.path), checkout, options);
          const root = todo.some((p) => p.path === "");
          let bytes = 0;
          for (const [i, pin] of todo.entries()) {
            const source = pin.path === "" ? checkout : join(checkout, ...pin.path.split("/"));
            if (!(await stat(source).catch(() => null))?.isDirectory()) {
              throw new FetchError(`${repository} at ${commit.slice(0, 12)} has no directory "${pin.path}": the registry (or the source's #path) names a path the commit does not hold`, "path", repository);
            }
            const staging = join(tmp, `entry-${i}`);
            const files = join(staging, "files", this.leaf(pin));
            await mkdir(dirname(files), { recursive: true });
            if (pin.path === "") {
              await rm(join(checkout, ".git"), { recursive: true, force: true });
              await rename(checkout, files);
            } else if (root) {
              await cp(source, files, { recursive: true, verbatimSymlinks: true });
            } else {
              await rename(source, files);
            }
            const tree = await digestTree(files);
            bytes += tree.bytes;
            const recorded = { repository, commit, path: pin.path, digest: tree.digest, bytes: tree.bytes, fetchedAt: new Date().toISOString() };
            await writeFileAtomic(join(staging, "entry.json"), `${JSON.stringify(recorded, null, 2)}\n`);
            const final = this.entryDir(pin);
            await mkdir(dirname(final), { recursive: true });
            // Under the lock, whatever is there was found wanting above (absent or not matching its digest).
            await removeDir(final);
            await rename(staging, final);
            done.push({ ...recorded, dir: join(final, "files", this.leaf(pin)) });
          }
          say(`fetched ${repository} at ${commit.slice(0, 12)}: ${todo.length} director${todo.length === 1 ? "y" : "ies"}, ${formatBytes(bytes)} in ${((Date.now() - started) / 1000).toFixed(1)} s`);
          return done;
        } finally {
          await rm(tmp, { recursive: true, force: true });
        }
      },
      { onWait: (owner) => say(`waiting for ${owner ? `pid ${owner.pid}` : "another process"} fetching ${repository} at ${commit.slice(0, 12)}`) },
    );
  }

  /** Remove temp directories left by processes that died (a kill -9 mid-fetch). */
  private async sweepTemp(): Promise<void> {
    const dir = join(this.root, "tmp");
    for (const name of await readdir(dir).catch(() => [] as string[])) {
      const pid = Number(name.split("-")[0]);
      if (Number.isInteger(pid) && pid > 0 && !alive(pid)) await rm(join(dir, name), { recursive: true, force: true });
    }
  }

  /** Every entry in the cache (not verified: see lookup). */
  async entries(): Promise<CacheEntry[]> {
    const out: CacheEntry[] = [];
    const gitDir = join(this.root, "git");
    for (const repo of await readdir(gitDir).catch(() => [] as string[])) {
      for (const commit of await readdir(join(gitDir, repo)).catch(() => [] as string[])) {
        for (const path of await readdir(join(gitDir, repo, commit)).catch(() => [] as string[])) {
          if (path.includes(".rm-")) continue; // being removed
          const dir = join(gitDir, repo, commit, path);
          const entry = await readEntry(dir);
          if (entry) out.push({ ...entry, dir: join(dir, "files", this.leaf(entry)) });
        }
      }
    }
    return out;
  }

  /** Remove the entries of these pins; returns how many there were. Empty parent directories go too. */
  async remove(pins: readonly Pin[]): Promise<number> {
    let removed = 0;
    for (const pin of pins) {
      const dir = this.entryDir(pin);
      if ((await readEntry(dir)) === null && !(await stat(dir).catch(() => null))) continue;
      await removeDir(dir);
      removed++;
      await rmdir(dirname(dir)).catch(() => undefined);
      await rmdir(dirname(dirname(dir))).catch(() => undefined);
    }
    return removed;
  }
}

/** A write that failed because the disk (or the user's quota) is full, as node or git reports it. */
function diskFull(error: unknown): boolean {
  const code = (error as NodeJS.ErrnoException | null)?.code;
  return code === "ENOSPC" || code === "EDQUOT" || /No space left on device|Disk quota exceeded/i.test(error instanceof Error ? error.message : String(error));
}

async function readEntry(dir: string): Promise<Omit<CacheEntry, "dir"> | null> {
  try {
    const json = JSON.parse(await readFile(join(dir, "entry.json"), "utf8")) as Omit<CacheEntry, "dir">;
    return typeof json.digest === "string" && typeof json.repository === "string" && typeof json.commit === "string" && typeof json.path === "string" ? json : null;
  } catch {
    return null;
  }
}

/** 1234567 -> "1.2 MB". */
export function formatBytes(bytes: number): string {
  if (bytes < 1024) return `${bytes} B`;
  const units = ["KB", "MB", "GB", "TB"];
  let value = bytes / 1024;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit++;
  }
  return `${value.toFixed(value < 10 ? 1 : 0)} ${units[unit]}`;
}
