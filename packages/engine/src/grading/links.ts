import type { Sandbox } from "@proctor/sandbox";
import { HOUSEKEEPING_MS, tail } from "../trial/context";
import { forbiddenPath, resolveThrough } from "./repo-diff";
import { adminOptions, argumentChunks, trusted } from "./sandbox-tools";

/**
 * The links of a sandbox as its kernel sees them: `linkAt(path)` is the target of the link at
 * `path` (null when it is no link or absent), read with the sandbox's trusted tools. Questions
 * asked in the same turn go in one exec; with `prefetch` (every prefix of a path at once),
 * resolving many links costs about as many execs as the longest chain of links.
 */
export function sandboxLinks(sandbox: Sandbox, signal?: AbortSignal): { linkAt: (path: string) => Promise<string | null>; prefetch: (paths: string[]) => Promise<void> } {
  const known = new Map<string, string | null>();
  let pending: { path: string; resolve: (target: string | null) => void; reject: (error: unknown) => void }[] = [];
  let scheduled = false;

  async function ask(batch: typeof pending): Promise<void> {
    try {
      const paths = new Set<string>();
      for (const { path } of batch) if (!known.has(path)) paths.add(path);
      for (const chunk of argumentChunks([...paths])) {
        // One line per link: its path, a tab, its target as written.
        const result = await sandbox.exec(trusted(sandbox, 'for p in "$@"; do if [ -L "$p" ]; then printf "%s\\t%s\\n" "$p" "$(readlink "$p")"; fi; done; exit 0', chunk), { ...adminOptions(sandbox), cwd: "/", timeoutMs: HOUSEKEEPING_MS, ...(signal ? { signal } : {}) });
        if (result.exitCode !== 0) throw new Error(`reading the sandbox's links failed (exit ${result.exitCode}): ${tail(result.stderr)}`);
        for (const p of chunk) known.set(p, null);
        for (const line of result.stdout.split("\n").filter(Boolean)) {
          const at = line.indexOf("\t");
          known.set(line.slice(0, at), line.slice(at + 1));
        }
      }
      for (const { path, resolve } of batch) resolve(known.get(path) ?? null);
    } catch (error) {
      for (const { reject } of batch) reject(error);
    }
  }

  const linkAt = (path: string): Promise<string | null> => {
    if (path === "/" || known.has(path)) return Promise.resolve(known.get(path) ?? null);
    return new Promise((resolve, reject) => {
      pending.push({ path, resolve, reject });
      if (scheduled) return;
      scheduled = true;
      setImmediate(() => {
        scheduled = false;
        const batch = pending;
        pending = [];
        void ask(batch);
      });
    });
  };
  return { linkAt, prefetch: async (paths) => void (await Promise.all(paths.map(linkAt))) };
}

/**
 * Each of `links` (sandbox paths) that reaches one of `roots` (or loops) when the kernel follows
 * it in `sandbox`: through the agent's links and the image's own (`/var/run -> /run`, then `..`),
 * with the why. A path that does not exist yet (/tests before the tests come) is followed by name.
 */
export async function linksInto(sandbox: Sandbox, links: readonly string[], roots: readonly string[], signal?: AbortSignal): Promise<string[]> {
  if (links.length === 0) return [];
  const { linkAt, prefetch } = sandboxLinks(sandbox, signal);
  const found = await Promise.all(links.map(async (path) => ({ path, why: forbiddenPath(await resolveThrough(path, linkAt, prefetch), roots) })));
  return found.filter((f) => f.why !== null).map((f) => `${f.path} (${f.why as string})`);
}
