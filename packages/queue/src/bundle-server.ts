import { createHash, randomBytes, timingSafeEqual } from "node:crypto";
import { createServer } from "node:http";
import { networkInterfaces } from "node:os";
import { pipeline } from "node:stream/promises";
import { SHA256_PATTERN, type BundleSource, type DirBundleStore } from "./bundles";

export interface BundleServerOptions {
  /** Address to listen on and to give workers; default: every interface, given as this host's first non-loopback IPv4. */
  host?: string;
  /** Default 0: a free port. */
  port?: number;
}

export interface BundleServer {
  /** What jobs name: this server's URL and the token it takes. */
  source: BundleSource & { kind: "http" };
  close(): Promise<void>;
}

/** This host's first non-loopback IPv4 address (what other machines most likely reach it at), else 127.0.0.1. */
function reachableAddress(): string {
  for (const list of Object.values(networkInterfaces())) {
    for (const a of list ?? []) if (a.family === "IPv4" && !a.internal) return a.address;
  }
  return "127.0.0.1";
}

/**
 * Serves a store's bundles as `GET /v1/bundles/:sha` (what workers fetch from `proctor serve
 * --queue`) for a `proctor run --queue`, so its workers need no shared mount. Every request needs
 * `Authorization: Bearer <token>`, a random token of this server's that the jobs carry (anyone who
 * can read the queue's jobs may fetch their tasks, as a worker does).
 */
export async function startBundleServer(store: DirBundleStore, options: BundleServerOptions = {}): Promise<BundleServer> {
  const token = randomBytes(32).toString("hex");
  const expected = createHash("sha256").update(token).digest();
  const server = createServer((request, response) => {
    const match = /^\/v1\/bundles\/([^/?]+)$/.exec(request.url ?? "");
    const header = request.headers.authorization ?? "";
    const given = createHash("sha256").update(header.startsWith("Bearer ") ? header.slice(7) : "").digest();
    const end = (status: number, message: string) => response.writeHead(status, { "content-type": "text/plain" }).end(`${message}\n`);
    if (request.method !== "GET" || !match) return end(404, "not found: GET /v1/bundles/:sha");
    if (!timingSafeEqual(given, expected)) return end(401, "this route needs the run's bundle token: Authorization: Bearer <token>");
    const sha = match[1] as string;
    if (!SHA256_PATTERN.test(sha)) return end(400, "the bundle id must be 64 lowercase hex digits (a sha256)");
    const stream = store.open(sha);
    if (!stream) return end(404, `no bundle ${sha}`);
    response.writeHead(200, { "content-type": "application/gzip", "x-content-sha256": sha });
    pipeline(stream, response).catch(() => response.destroy());
  });
  const bind = options.host ?? "0.0.0.0";
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(options.port ?? 0, bind, () => {
      server.off("error", reject);
      resolve();
    });
  });
  const address = server.address();
  const port = typeof address === "object" && address !== null ? address.port : 0;
  const advertised = bind === "0.0.0.0" || bind === "::" ? reachableAddress() : bind;
  const host = advertised.includes(":") ? `[${advertised}]` : advertised;
  return {
    source: { kind: "http", baseUrl: `http://${host}:${port}`, token },
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
