import { spawn, type ChildProcess } from "node:child_process";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";

/** Debian's build of the CNCF distribution registry (apt-get install docker-registry). */
export const REGISTRY_BINARY = "docker-registry";

/**
 * A distribution registry of its own on loopback (plain HTTP, which Docker allows there), storing
 * blobs in `storage`: for tests and trying out --image-registry on one machine (docs/images.md).
 */
export interface RegistryServer {
  /** HOST:PORT, as --image-registry takes it. */
  host: string;
  storage: string;
  stop(): Promise<void>;
  /** Starts it again on the same port and storage. */
  start(): Promise<void>;
  close(): Promise<void>;
}

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      server.close(() => (typeof address === "object" && address ? resolve(address.port) : reject(new Error("no port"))));
    });
  });
}

export async function startRegistryServer(): Promise<RegistryServer> {
  const dir = await mkdtemp(join(tmpdir(), "proctor-registry-"));
  const storage = join(dir, "storage");
  const port = await freePort();
  const host = `127.0.0.1:${port}`;
  const config = join(dir, "config.yml");
  await writeFile(config, `version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: ${storage}\n  delete:\n    enabled: true\nhttp:\n  addr: ${host}\n`);
  let child: ChildProcess | null = null;
  const start = async () => {
    const started = spawn(REGISTRY_BINARY, ["serve", config], { stdio: ["ignore", "ignore", "pipe"] });
    child = started;
    let stderr = "";
    started.stderr?.on("data", (chunk: Buffer) => (stderr += chunk.toString()));
    const deadline = Date.now() + 15_000;
    while (Date.now() < deadline) {
      if (started.exitCode !== null) throw new Error(`${REGISTRY_BINARY} exited ${started.exitCode}: ${stderr}`);
      const up = await fetch(`http://${host}/v2/`).then((r) => r.ok, () => false);
      if (up) return;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    throw new Error(`${REGISTRY_BINARY} did not answer on ${host} within 15 s: ${stderr}`);
  };
  const stop = async () => {
    const running = child;
    child = null;
    if (!running || running.exitCode !== null) return;
    await new Promise<void>((resolve) => {
      running.once("exit", () => resolve());
      running.kill("SIGTERM");
    });
  };
  await start();
  return {
    host,
    storage,
    start,
    stop,
    async close() {
      await stop();
      await rm(dir, { recursive: true, force: true });
    },
  };
}
