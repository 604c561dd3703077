import { randomBytes } from "node:crypto";
import type Dockerode from "dockerode";
import { SandboxError } from "@proctor/sandbox";
import type { Logger } from "@proctor/schema";
import { daemonMessage, statusCode } from "./docker-errors";

/** Image of the forwarder container: Proctor's base image (it needs python3). */
export const DEFAULT_FORWARDER_IMAGE = "proctor/base:bookworm";
const READY = "proctor-forwarder-ready";
const READY_TIMEOUT_MS = 30_000;
const SOCKET_IN_FORWARDER = "/run/proctor/host.sock";

/**
 * Accepts TCP on 127.0.0.1:<port> (in the sandbox's network namespace, which the forwarder
 * shares) and pipes each connection to the host's Unix socket, bind-mounted as argv[2].
 */
const FORWARDER_PY = `
import socket, sys, threading
port, path = int(sys.argv[1]), sys.argv[2]
srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("127.0.0.1", port))
srv.listen(64)
print("${READY}", flush=True)
def pump(a, b):
    try:
        while True:
            d = a.recv(65536)
            if not d:
                break
            b.sendall(d)
    except OSError:
        pass
    try:
        b.shutdown(socket.SHUT_WR)
    except OSError:
        pass
def serve(c):
    u = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        u.connect(path)
    except OSError:
        c.close()
        return
    t = threading.Thread(target=pump, args=(u, c), daemon=True)
    t.start()
    pump(c, u)
    t.join()
    c.close()
    u.close()
while True:
    c, _ = srv.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
`;

/**
 * Makes a host Unix socket reachable inside a sandbox as TCP 127.0.0.1:`port`, and nothing
 * else: a small forwarder container joins the sandbox's network namespace (`NetworkMode:
 * container:<id>`, so a sandbox with network "none" stays without any route) and holds the
 * socket, bind-mounted; the sandbox's own filesystem never sees it. The forwarder drops every
 * capability, has a read-only root and carries the sandbox's labels (reaped with it).
 */
export async function startHostSocketForwarder(
  docker: Dockerode,
  sandbox: Dockerode.Container,
  hostSocketPath: string,
  port: number,
  options: { image: string; logger: Logger },
): Promise<{ close(): Promise<void> }> {
  if (!(Number.isInteger(port) && port > 0 && port < 65536)) throw new RangeError(`port must be 1-65535, got ${port}`);
  let labels: Record<string, string>;
  let name: string;
  try {
    const info = await sandbox.inspect();
    labels = { ...info.Config.Labels, "proctor.role": "host-socket-forwarder" };
    name = `${info.Name.replace(/^\//, "").slice(0, 48)}-fwd-${randomBytes(3).toString("hex")}`;
  } catch (error) {
    throw new SandboxError(`forwarding a host socket into ${sandbox.id}: inspecting the sandbox failed: ${daemonMessage(error)}`, { cause: error });
  }
  let container: Dockerode.Container;
  try {
    container = await docker.createContainer({
      name,
      Image: options.image,
      Entrypoint: ["python3", "-u", "-c", FORWARDER_PY, String(port), SOCKET_IN_FORWARDER],
      Cmd: [],
      User: "0",
      Labels: labels,
      HostConfig: {
        NetworkMode: `container:${sandbox.id}`,
        Binds: [`${hostSocketPath}:${SOCKET_IN_FORWARDER}`],
        CapDrop: ["ALL"],
        SecurityOpt: ["no-new-privileges"],
        ReadonlyRootfs: true,
        PidsLimit: 256,
        Memory: 128 * 1024 * 1024,
        MemorySwap: 128 * 1024 * 1024,
      },
    });
  } catch (error) {
    const hint = statusCode(error) === 404 ? ` (the forwarder needs image ${options.image} with python3: \`pnpm images\` builds it)` : "";
    throw new SandboxError(`forwarding a host socket into ${sandbox.id}: creating the forwarder failed: ${daemonMessage(error)}${hint}`, { cause: error });
  }
  let removing: Promise<void> | undefined;
  const close = () =>
    (removing ??= container.remove({ force: true }).then(
      () => undefined,
      (error: unknown) => {
        if (statusCode(error) === 404 || statusCode(error) === 409) return;
        options.logger.warn("removing a host-socket forwarder failed", { id: container.id, error: daemonMessage(error) });
      },
    ));
  try {
    await container.start();
    const deadline = Date.now() + READY_TIMEOUT_MS;
    for (let wait = 20; ; wait = Math.min(wait * 2, 250)) {
      const logs = (await container.logs({ stdout: true, stderr: true, follow: false })) as unknown as Buffer;
      if (logs.includes(READY)) break;
      const state = (await container.inspect()).State;
      if (!state.Running) throw new Error(`it exited with ${state.ExitCode}: ${logs.toString("utf8").replace(/[^ -~\n]/g, "").trim().slice(-300)}`);
      if (Date.now() > deadline) throw new Error(`it did not listen within ${READY_TIMEOUT_MS / 1000} s`);
      await new Promise((resolve) => setTimeout(resolve, wait));
    }
  } catch (error) {
    await close();
    throw new SandboxError(`forwarding a host socket into ${sandbox.id} on 127.0.0.1:${port} failed: ${error instanceof Error ? daemonMessage(error) : String(error)}`, { cause: error });
  }
  return { close };
}
