import { tmpdir } from "node:os";
import { CHECKOUT_TEMP_PREFIX } from "@proctor/engine";
import type { Logger } from "@proctor/schema";
import { findOrphanTempDirs, LABELS, LocalRuntime, removeOrphanTempDirs } from "@proctor/sandbox";
import { CHANNEL_TEMP_PREFIX, DockerRuntime, dockerAvailable } from "@proctor/sandbox-docker";

/**
 * `proctor gc`: remove what processes that are gone left behind: sandboxes (containers, local
 * roots) and temp dirs (exec-channel FIFO dirs, repo checkouts). Exit 1 when something could not be removed.
 * With `dryRun`, list each of them instead and remove nothing.
 */
export async function gcCommand(options: { logger: Logger; dryRun?: boolean }): Promise<number> {
  const dryRun = options.dryRun ?? false;
  const out = (line: string) => process.stdout.write(`${line}\n`);
  const verb = dryRun ? "would remove" : "removed";
  /** A dry run names each thing it would remove, indented under its count. */
  const list = (items: string[]) => {
    if (dryRun) for (const item of items) out(`  ${item}`);
  };
  let removed = 0;
  let failed = 0;
  // Temp dirs first: reap() would otherwise take the exec-channel dirs silently.
  for (const [prefix, what] of [
    [CHANNEL_TEMP_PREFIX, "exec-channel dir(s)"],
    [CHECKOUT_TEMP_PREFIX, "repo checkout(s)"],
  ] as const) {
    const swept = dryRun ? await findOrphanTempDirs(prefix).then(({ found, failed }) => ({ removed: found, failed })) : await removeOrphanTempDirs(prefix);
    out(`temp: ${verb} ${swept.removed.length} ${what} left by dead processes in ${tmpdir()}`);
    list(swept.removed);
    for (const { path, error } of swept.failed) process.stderr.write(`temp: could not ${dryRun ? "check" : "remove"} ${path}: ${error}\n`);
    removed += swept.removed.length;
    failed += swept.failed.length;
  }
  if (await dockerAvailable()) {
    const docker = new DockerRuntime({ logger: options.logger });
    if (dryRun) {
      const orphans = await docker.orphans();
      out(`docker: ${verb} ${orphans.length} container(s) left by dead runs`);
      list(orphans.map((c) => `container ${c.Id.slice(0, 12)} ${(c.Names[0] ?? "").replace(/^\//, "")} (owner ${c.Labels[LABELS.owner] ?? "?"})`));
      removed += orphans.length;
    } else {
      const n = await docker.reap();
      out(`docker: ${verb} ${n} container(s) left by dead runs`);
      removed += n;
    }
  } else {
    out("docker: no engine answers; skipped");
  }
  const local = new LocalRuntime({ logger: options.logger });
  if (dryRun) {
    const orphans = await local.orphans();
    out(`local: ${verb} ${orphans.length} sandbox root(s) left by dead runs`);
    list(orphans.map((o) => `${o.root} (sandbox ${o.id}, owner pid ${o.ownerPid})`));
    removed += orphans.length;
  } else {
    const n = await local.reap();
    out(`local: ${verb} ${n} sandbox root(s) left by dead runs`);
    removed += n;
  }
  out(dryRun ? `would remove ${removed} in all (--dry-run: nothing was removed; run proctor gc to remove them)` : `removed ${removed} in all`);
  return failed > 0 ? 1 : 0;
}
