import { mkdir, readFile, rename, statfs, writeFile } from "node:fs/promises";
import { homedir } from "node:os";
import { dirname, join } from "node:path";
import type Dockerode from "dockerode";
import { silentLogger, type Logger } from "@proctor/schema";
import type { BuildLock } from "./build-lock";
import { daemonMessage, statusCode } from "./docker-errors";

/** Repository of images built from task contexts (the tag is the context's content hash). Also in image.ts. */
const BUILD_REPOSITORY = "proctor-build";
/** The default disk budget: this fraction of the disk holding the Docker data root. */
export const DEFAULT_IMAGE_CACHE_FRACTION = 0.25;
/** An image used this recently (by any process on this host) counts as in use: its trial may be about to start. */
const DEFAULT_IN_USE_GRACE_MS = 10 * 60_000;

/** `$PROCTOR_CACHE_DIR/images`, else `$XDG_CACHE_HOME/proctor/images`, else `~/.cache/proctor/images`: the image index and build locks. */
export function imageDataDir(env: NodeJS.ProcessEnv = process.env): string {
  if (env.PROCTOR_CACHE_DIR) return join(env.PROCTOR_CACHE_DIR, "images");
  return join(env.XDG_CACHE_HOME || join(homedir(), ".cache"), "proctor", "images");
}

/** What the index knows of one image: when a trial last used it and the tasks that did. */
export interface ImageUse {
  lastUsedAt: string;
  tasks: string[];
}

/**
 * `index.json` in the image data dir: `{ "images": { "proctor-build/<hash>": ImageUse } }`.
 * Written whole through a rename, so a reader never sees half a file; two processes writing at
 * once may lose one's update of a last-use time, never the file.
 */
export class ImageIndex {
  private chain: Promise<unknown> = Promise.resolve();

  constructor(readonly path: string) {}

  async read(): Promise<Record<string, ImageUse>> {
    try {
      const parsed = JSON.parse(await readFile(this.path, "utf8")) as { images?: Record<string, ImageUse> };
      return parsed.images ?? {};
    } catch {
      return {};
    }
  }

  /** Records a use of `tag` now (by `taskId`, when known). */
  touch(tag: string, taskId?: string): Promise<void> {
    return this.update((images) => {
      const use = images[tag] ?? { lastUsedAt: "", tasks: [] };
      use.lastUsedAt = new Date().toISOString();
      if (taskId && !use.tasks.includes(taskId)) use.tasks = [...use.tasks, taskId].slice(-50);
      images[tag] = use;
    });
  }

  forget(tags: string[]): Promise<void> {
    return this.update((images) => {
      for (const tag of tags) delete images[tag];
    });
  }

  private update(change: (images: Record<string, ImageUse>) => void): Promise<void> {
    const next = this.chain.then(async () => {
      const images = await this.read();
      change(images);
      await mkdir(dirname(this.path), { recursive: true });
      const temp = `${this.path}.${process.pid}.tmp`;
      await writeFile(temp, `${JSON.stringify({ images }, null, 1)}\n`);
      await rename(temp, this.path);
    });
    this.chain = next.catch(() => undefined);
    return next;
  }
}

/** One of Proctor's task images as the cache sees it. */
export interface CachedImage {
  tag: string;
  id: string;
  /** Bytes removing it would free: its size less the layers it shares with other images. */
  bytes: number;
  /** Its whole size, shared layers included (what `docker images` shows). */
  totalBytes: number;
  createdAt: Date;
  lastUsedAt: Date | null;
  tasks: string[];
  /** Why it must stay (a container of it, a pending build, a use within the grace period), or null. */
  inUse: string | null;
}

export interface ImageCacheOptions {
  index: ImageIndex;
  /** Budget in bytes; null: no budget (prune then removes nothing); "default": defaultImageBudgetBytes. */
  budgetBytes: number | null | "default";
  /** Pending builds' locks (their keys are image hashes). */
  lock?: BuildLock;
  /** Tags this process is resolving now. */
  pending?: () => Iterable<string>;
  inUseGraceMs?: number;
  logger?: Logger;
  /** The repository whose images this cache keeps; default proctor-build (another keeps a test's images apart). */
  repository?: string;
}

export interface PruneResult {
  budgetBytes: number | null;
  usageBytes: number;
  /** Removed (or, dry run, would be removed), least recently used first. */
  removed: CachedImage[];
  /** Still over the budget after removing what may go (everything left is in use). */
  overBudget: boolean;
}

/** Proctor's task images (`proctor-build/*`) under a disk budget, evicted least recently used first, never one in use. */
export class ImageCache {
  private readonly logger: Logger;
  private running: Promise<PruneResult> | null = null;
  private defaultBudget: Promise<number | null> | undefined;

  constructor(private readonly docker: Dockerode, readonly options: ImageCacheOptions) {
    this.logger = options.logger ?? silentLogger;
  }

  /** Every proctor-build image on the daemon with its size, last use, tasks and whether it is in use. */
  async list(): Promise<CachedImage[]> {
    const df = (await this.docker.df()) as { Images?: { Id: string; RepoTags?: string[] | null; Size: number; SharedSize: number; Containers: number; Created: number }[] };
    const index = await this.options.index.read();
    const grace = this.options.inUseGraceMs ?? DEFAULT_IN_USE_GRACE_MS;
    const held = new Set((await this.options.lock?.held?.().catch(() => [])) ?? []);
    const pending = new Set(this.options.pending?.() ?? []);
    const images: CachedImage[] = [];
    const prefix = `${this.options.repository ?? BUILD_REPOSITORY}/`;
    for (const image of df.Images ?? []) {
      for (const repoTag of image.RepoTags ?? []) {
        if (!repoTag.startsWith(prefix)) continue;
        const tag = repoTag.replace(/:latest$/, "");
        const use = index[tag];
        const lastUsedAt = use ? new Date(use.lastUsedAt) : null;
        const hash = tag.slice(prefix.length);
        const inUse =
          image.Containers > 0 ? `${image.Containers} container(s)` :
          pending.has(tag) || held.has(hash) ? "a build or pull of it is pending" :
          lastUsedAt !== null && Date.now() - lastUsedAt.getTime() < grace ? `used ${Math.round((Date.now() - lastUsedAt.getTime()) / 1000)} s ago` :
          null;
        const shared = image.SharedSize > 0 ? image.SharedSize : 0;
        images.push({ tag, id: image.Id, bytes: Math.max(0, image.Size - shared), totalBytes: image.Size, createdAt: new Date(image.Created * 1000), lastUsedAt, tasks: use?.tasks ?? [], inUse });
      }
    }
    return images.sort((a, b) => lastUse(a) - lastUse(b));
  }

  /** Removes (dry run: lists) the least recently used images not in use until the rest fit the budget. One at a time per cache. */
  prune(options: { dryRun?: boolean } = {}): Promise<PruneResult> {
    if (this.running && !options.dryRun) return this.running;
    const run = this.evict(options.dryRun === true);
    if (options.dryRun) return run;
    this.running = run.finally(() => (this.running = null));
    return this.running;
  }

  /** The budget in bytes (the default one worked out on first use), or null for none. */
  async budget(): Promise<number | null> {
    if (this.options.budgetBytes === "default") this.defaultBudget ??= defaultImageBudgetBytes(this.docker);
    return this.options.budgetBytes === "default" ? ((await this.defaultBudget) ?? null) : this.options.budgetBytes;
  }

  private async taggedRecently(tag: string): Promise<boolean> {
    const grace = this.options.inUseGraceMs ?? DEFAULT_IN_USE_GRACE_MS;
    if (grace <= 0) return false;
    const info = (await this.docker.getImage(tag).inspect().catch(() => null)) as { Metadata?: { LastTagTime?: string } } | null;
    const tagged = Date.parse(info?.Metadata?.LastTagTime ?? "");
    return Number.isFinite(tagged) && Date.now() - tagged < grace;
  }

  private async evict(dryRun: boolean): Promise<PruneResult> {
    const images = await this.list();
    let usageBytes = images.reduce((sum, image) => sum + image.bytes, 0);
    const budget = await this.budget();
    const removed: CachedImage[] = [];
    if (budget === null) return { budgetBytes: null, usageBytes, removed, overBudget: false };
    for (const image of images) {
      if (usageBytes <= budget) break;
      if (image.inUse !== null) continue;
      // Built or pulled here within the grace period (by a process whose index this is not, e.g.
      // another worker container on this daemon): its trial may be about to start.
      if (await this.taggedRecently(image.tag)) continue;
      if (!dryRun) {
        try {
          await this.docker.getImage(image.tag).remove();
        } catch (error) {
          // 409: a container started from it since we looked; 404: someone removed it first.
          if (statusCode(error) !== 404) {
            this.logger.debug("kept an image the budget would evict", { image: image.tag, reason: daemonMessage(error) });
            continue;
          }
        }
        this.logger.info("removed a task image over the disk budget", { image: image.tag, bytes: image.bytes });
      }
      removed.push(image);
      usageBytes -= image.bytes;
    }
    if (!dryRun && removed.length > 0) await this.options.index.forget(removed.map((image) => image.tag)).catch(() => undefined);
    return { budgetBytes: budget, usageBytes, removed, overBudget: usageBytes > budget };
  }
}

function lastUse(image: CachedImage): number {
  return (image.lastUsedAt ?? image.createdAt).getTime();
}

/** The disk holding the daemon's data root, when this process can see it (same host): its size and free bytes. */
export async function dockerDisk(docker: Dockerode): Promise<{ root: string; totalBytes: number; freeBytes: number } | null> {
  const info = (await docker.info()) as { DockerRootDir?: string };
  const root = info.DockerRootDir;
  if (!root) return null;
  try {
    const fs = await statfs(root);
    return { root, totalBytes: fs.blocks * fs.bsize, freeBytes: fs.bavail * fs.bsize };
  } catch {
    return null;
  }
}

/** The default budget: DEFAULT_IMAGE_CACHE_FRACTION of the Docker data root's disk; null where that disk is not visible from here. */
async function defaultImageBudgetBytes(docker: Dockerode): Promise<number | null> {
  const disk = await dockerDisk(docker).catch(() => null);
  return disk ? Math.floor(disk.totalBytes * DEFAULT_IMAGE_CACHE_FRACTION) : null;
}
