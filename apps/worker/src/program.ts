import { Command, InvalidArgumentError, Option } from "commander";
import type { RunWorkerOptions, WorkerConfig } from "./worker";
import { WorkerError } from "./errors";

const whole = (flag: string, min: number, max = Number.MAX_SAFE_INTEGER) => (value: string) => {
  const n = Number(value);
  if (value.trim() === "" || !Number.isInteger(n) || n < min || n > max) {
    throw new InvalidArgumentError(`${flag} must be a whole number${max === Number.MAX_SAFE_INTEGER ? ` >= ${min}` : ` from ${min} to ${max}`}, got "${value}"`);
  }
  return n;
};
const positive = (flag: string) => (value: string) => {
  const n = Number(value);
  if (value.trim() === "" || !Number.isFinite(n) || n <= 0) throw new InvalidArgumentError(`${flag} must be a positive number, got "${value}"`);
  return n;
};

/** Runs a worker until it is told to stop; its exit code. The queue, engine and runtime load on the first call, not for --help. */
export async function runWorker(config: WorkerConfig, options: RunWorkerOptions = {}): Promise<number> {
  return (await import("./worker")).runWorker(config, options);
}

/**
 * The worker's command: flags, each also read from its environment variable (the flag wins).
 * `proctor-worker` runs it as the program, `proctor worker` as a subcommand (`label` starts its
 * error lines); the exit code goes
 * to `setExitCode` (0 after a drain, 2 bad configuration, 3 no runtime or no Redis answering, 130 a
 * second signal); the process exits once the worker stopped.
 */
export function workerCommand(setExitCode: (code: number) => void, name = "proctor-worker", label = name): Command {
  return new Command(name)
    .description("run trials from a Redis queue (proctor serve --queue / proctor run --queue) until SIGTERM, which drains: running trials finish, then it exits")
    .addOption(new Option("--queue <url>", "Redis queue URL, redis://[:PASSWORD@]HOST:PORT/DB").env("PROCTOR_QUEUE_URL"))
    .addOption(new Option("--name <name>", "name shown by GET /v1/workers and in the logs (default <host>-<pid>)").env("PROCTOR_WORKER_NAME"))
    .addOption(new Option("-n, --concurrency <n>", "trials at once").env("PROCTOR_WORKER_CONCURRENCY").argParser(whole("--concurrency", 1)).default(1))
    .addOption(new Option("--runtime <runtime>", "sandbox runtime (must match the runs' runtime)").env("PROCTOR_RUNTIME").choices(["auto", "docker", "local"]).default("auto"))
    .addOption(new Option("--worker-token <token>", "token for the server's GET /v1/bundles/:sha").env("PROCTOR_WORKER_TOKEN"))
    .addOption(new Option("--work-dir <dir>", "bundle cache and scratch trial dirs (default <tmp>/proctor-worker)").env("PROCTOR_WORKER_DIR"))
    .addOption(new Option("--port <port>", "serve GET /health and GET /metrics (Prometheus) on this port (0: any free one; default: none)").env("PROCTOR_WORKER_PORT").argParser(whole("--port", 0, 65535)))
    .addOption(new Option("--host <host>", "--port: address to listen on").env("PROCTOR_WORKER_HOST").default("127.0.0.1"))
    .addOption(new Option("--memory-mb <mb>", "memory a trial gets when neither its task nor its run sets any").env("PROCTOR_WORKER_MEMORY_MB").argParser(whole("--memory-mb", 1)))
    .addOption(new Option("--cpus <n>", "CPUs a trial gets when neither its task nor its run sets any").env("PROCTOR_WORKER_CPUS").argParser(positive("--cpus")))
    .addOption(new Option("--pids-limit <n>", "processes a trial may have when its run sets no limit").env("PROCTOR_WORKER_PIDS_LIMIT").argParser(whole("--pids-limit", 1)))
    .addOption(new Option("--lock-ms <ms>", "a trial whose worker stops renewing its lock this long runs again elsewhere").env("PROCTOR_WORKER_LOCK_MS").argParser(whole("--lock-ms", 1000)).default(30_000))
    .addOption(new Option("--image-registry <host:port[/prefix]>", "share task images through this registry: pull before a build, push after one; one build per image across workers").env("PROCTOR_IMAGE_REGISTRY"))
    .addOption(new Option("--image-cache-gb <n>", "keep task images under N GB, least recently used removed first (default: a quarter of the Docker data root's disk)").env("PROCTOR_IMAGE_CACHE_GB").argParser((v) => (v.trim() === "" ? undefined : positive("--image-cache-gb")(v))))
    .addOption(new Option("--heartbeat-ms <ms>", "heartbeat interval; a worker is gone after three missed beats").env("PROCTOR_WORKER_HEARTBEAT_MS").argParser(whole("--heartbeat-ms", 100)).default(5000))
    .action(async (o: Record<string, unknown>) => {
      let code: number;
      try {
        code = await runWorker(configFrom(o));
      } catch (error) {
        if (!(error instanceof WorkerError)) throw error;
        process.stderr.write(`${label}: ${error.message}\n`);
        setExitCode(error.exitCode);
        return;
      }
      setExitCode(code);
      // The worker stopped, so the process ends now: after a drain while Redis was away, BullMQ
      // keeps a timer for the job fetch it abandoned (up to 6 s) that would hold the process up.
      process.exit(code);
    });
}

function configFrom(o: Record<string, unknown>): WorkerConfig {
  if (typeof o.queue !== "string" || o.queue === "") {
    throw new WorkerError("no queue: pass --queue redis://HOST:PORT/DB or set PROCTOR_QUEUE_URL", 2);
  }
  const limits = {
    ...(o.memoryMb !== undefined ? { memoryMb: o.memoryMb as number } : {}),
    ...(o.cpus !== undefined ? { cpus: o.cpus as number } : {}),
    ...(o.pidsLimit !== undefined ? { pidsLimit: o.pidsLimit as number } : {}),
  };
  return {
    queue: o.queue,
    concurrency: o.concurrency as number,
    runtime: o.runtime as WorkerConfig["runtime"],
    ...(typeof o.name === "string" && o.name !== "" ? { name: o.name } : {}),
    ...(typeof o.workerToken === "string" && o.workerToken !== "" ? { workerToken: o.workerToken } : {}),
    ...(typeof o.workDir === "string" && o.workDir !== "" ? { workDir: o.workDir } : {}),
    ...(o.port !== undefined ? { port: o.port as number, host: o.host as string } : {}),
    defaultLimits: limits,
    lockMs: o.lockMs as number,
    heartbeatMs: o.heartbeatMs as number,
    ...(typeof o.imageRegistry === "string" && o.imageRegistry !== "" ? { imageRegistry: o.imageRegistry } : {}),
    // An empty PROCTOR_IMAGE_CACHE_GB (compose passes it through unset as "") is no budget given.
    ...(typeof o.imageCacheGb === "number" ? { imageCacheGb: o.imageCacheGb } : {}),
  };
}
