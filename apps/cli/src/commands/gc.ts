import type { Logger } from "@proctor/schema";
import { LocalRuntime } from "@proctor/sandbox";
import { DockerRuntime, dockerAvailable } from "@proctor/sandbox-docker";

/** `proctor gc`: remove sandboxes (containers, local roots) whose owner process is gone. */
export async function gcCommand(options: { logger: Logger }): Promise<number> {
  let removed = 0;
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
  return 0;
}
