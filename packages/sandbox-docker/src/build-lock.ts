import { mkdir, open, readFile, readdir, rm, stat } from "node:fs/promises";
import { join } from "node:path";
import { currentOwnerLabel, ownerIsGone, parseOwner } from "./owner";

/**
 * Makes concurrent builds of one image wait for a single build: whoever holds `key` builds (or
 * pulls), the others wait and then find the image. A file lock serves one host; with workers on
 * several hosts sharing a registry, a Redis lock (@proctor/queue) serves the cluster.
 */
export interface BuildLock {
  /** Resolves once this caller holds `key`; call the returned function to let it go (safe twice). */
  acquire(key: string, signal?: AbortSignal): Promise<() => Promise<void>>;
  /** Keys held now by any holder this lock can see (images a pending build will write), for the disk budget. */
  held?(): Promise<string[]>;
}

const POLL_MS = 250;
const EMPTY_STALE_MS = 10_000;

/**
 * A lock file per key in `dir`, created exclusively and holding its owner (`host:pid:start`).
 * A holder that died (kill -9 included) does not keep it: the next caller sees the process gone
 * and takes the lock over.
 */
export class FileBuildLock implements BuildLock {
  constructor(readonly dir: string, private readonly pollMs = POLL_MS) {}

  async acquire(key: string, signal?: AbortSignal): Promise<() => Promise<void>> {
    await mkdir(this.dir, { recursive: true });
    const path = join(this.dir, `${key}.lock`);
    const owner = currentOwnerLabel();
    for (;;) {
      signal?.throwIfAborted();
      try {
        const handle = await open(path, "wx");
        await handle.writeFile(owner);
        await handle.close();
        let released = false;
        return async () => {
          if (released) return;
          released = true;
          await rm(path, { force: true });
        };
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code !== "EEXIST") throw error;
      }
      const holder = parseOwner(await readFile(path, "utf8").catch(() => ""));
      // A file still empty is being written by its creator (unless it has been for long: the
      // creator died between creating and writing it); one whose owner is gone is stale.
      const emptyAndOld = holder === null && Date.now() - ((await stat(path).catch(() => null))?.mtimeMs ?? Date.now()) > EMPTY_STALE_MS;
      if ((holder !== null && ownerIsGone(holder)) || emptyAndOld) {
        await rm(path, { force: true });
        continue;
      }
      await new Promise((resolve) => setTimeout(resolve, this.pollMs));
    }
  }

  async held(): Promise<string[]> {
    const names = await readdir(this.dir).catch(() => [] as string[]);
    return names.filter((name) => name.endsWith(".lock")).map((name) => name.slice(0, -".lock".length));
  }
}
