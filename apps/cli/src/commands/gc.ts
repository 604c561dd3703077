import { tmpdir } from "node:os";
import { CHECKOUT_TEMP_PREFIX } from "@proctor/engine";
import type { Logger } from "@proctor/schema";
import { LocalRuntime, removeOrphanTempDirs } from "@proctor/sandbox";
import { CHANNEL_TEMP_PREFIX, DockerRuntime, dockerAvailable } from "@proctor/sandbox-docker";

/**
 * `proctor gc`: remove what processes that are gone left behind: sandboxes (containers, local
 * roots) and temp dirs (exec-channel FIFO dirs, repo checkouts). Exit 1 when something could not be removed.
 */
export async function gcCommand(options: { logger: Logger }): Promise<number> {
  let removed = 0;
  let failed = 0;
  // Temp dirs first: reap() would otherwise take the exec-channel dirs silently.
  for (const [prefix, what] of [
    [CHANNEL_TEMP_PREFIX, "exec-channel dir(s)"],
    [CHECKOUT_TEMP_PREFIX, "repo checkout(s)"],
  ] as const) {
    const swept = await removeOrphanTempDirs(prefix);
    process.stdout.write(`temp: removed ${swept.removed.length} ${what} left by dead processes in ${tmpdir()}\n`);
    for (const { path, error } of swept.failed) process.stderr.write(`temp: could not remove ${path}: ${error}\n`);
    removed += swept.removed.length;
    failed += swept.failed.length;
  }
  if (await dockerAvailable()) {
    const n = await new DockerRuntime({ logger: options.logger }).reap();
    process.stdout.write(`docker: removed ${n} container(s) left by dead runs\n`);
    removed += n;
  } else {
    process.stdout.write("docker: no engine answers; skipped\n");
  }
  const n = await new LocalRuntime({ logger: options.logger }).reap();
  process.stdout.write(`local: removed ${n} sandbox root(s) left by dead runs\n`);
  removed += n;
  process.stdout.write(`removed ${removed} in all\n`);
  return failed > 0 ? 1 : 0;
}
