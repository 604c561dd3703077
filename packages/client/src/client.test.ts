import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { createServer, type Server } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { AddressInfo } from "node:net";
import { afterAll, afterEach, describe, expect, test } from "vitest";
import { WebSocketServer } from "ws";
import { ProctorClient, followBatch, uploadArchive } from "./client";
import { ClientError } from "./errors";
import type { WireEnvelope } from "./wire";

const servers: { close(): void }[] = [];
afterEach(() => {
  for (const s of servers.splice(0)) s.close();
});

/** A real HTTP server answering with `handler`; returns its base URL. */
async function serve(handler: Parameters<typeof createServer>[1], onServer?: (server: Server) => void): Promise<string> {
  const server = createServer(handler);
  onServer?.(server);
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  servers.push({ close: () => server.close() });
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

const envelope = (seq: number, event: WireEnvelope["event"], data: Record<string, unknown> = {}): WireEnvelope => ({ seq, event, batch_id: "b1", ts: new Date(0).toISOString(), data });

describe("upload dropped before its answer was read", () => {
  const dirs: string[] = [];
  afterAll(async () => {
    await Promise.all(dirs.map((dir) => rm(dir, { recursive: true, force: true })));
  });
  /** A server that resets the connection of POST /submit at once (as a refusal from the headers can look to a client still writing) and answers GET /batches with `probe`. */
  async function resettingServer(probe: { status: number; body: unknown }): Promise<{ url: string; archive: string }> {
    const url = await serve((req, res) => {
      if (req.method === "POST") {
        req.socket.resetAndDestroy();
        return;
      }
      res.writeHead(probe.status, { "content-type": "application/json" }).end(JSON.stringify(probe.body));
    });
    const dir = await mkdtemp(join(tmpdir(), "proctor-client-upload-"));
    dirs.push(dir);
    const archive = join(dir, "batch.tar.gz");
    await writeFile(archive, Buffer.alloc(16 * 1024 * 1024, 1));
    return { url, archive };
  }

  test("the refusal the server gives the same credentials is what the caller sees, not the socket error", async () => {
    const { url, archive } = await resettingServer({ status: 403, body: { error: "not_allowed", message: "hotkey 5Bob (request header Epistula-Signed-By) is not on this server's allowlist" } });
    const error = await uploadArchive({ server: url, archivePath: archive, token: "t" }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ClientError);
    expect(error).toMatchObject({ statusCode: 403, code: "not_allowed" });
    expect((error as Error).message).toMatch(/^POST \/submit .*: 403 hotkey 5Bob .*not on this server's allowlist$/);
  });

  test("when the credentials are fine the error says the connection dropped mid-upload and where to look", async () => {
    const { url, archive } = await resettingServer({ status: 200, body: [] });
    const error = await uploadArchive({ server: url, archivePath: archive, token: "t" }).catch((e: unknown) => e);
    expect(error).toMatchObject({ statusCode: 0, code: "upload_dropped" });
    expect((error as Error).message).toMatch(/closed the connection while the archive was being sent \((EPIPE|ECONNRESET|UND_ERR_SOCKET)\).*its log says why/);
  });
});

describe("typed client", () => {
  test("an error answer becomes a ClientError with the server's code, message and Retry-After", async () => {
    const url = await serve((_req, res) => {
      res.writeHead(429, { "content-type": "application/json", "retry-after": "7" }).end(JSON.stringify({ error: "queue_full", message: "the batch queue is full" }));
    });
    const error = await new ProctorClient({ server: url }).status("b1").catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ClientError);
    expect(error).toMatchObject({ statusCode: 429, code: "queue_full", retryAfterSec: 7 });
    expect((error as Error).message).toContain("the batch queue is full");
  });

  test("an answer that breaks the wire schema is refused, naming the field", async () => {
    const url = await serve((_req, res) => {
      res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ batch_id: "b1", status: "exploded", tasks: [] }));
    });
    const error = await new ProctorClient({ server: url }).tasks("b1").catch((e: unknown) => e);
    expect(error).toMatchObject({ code: "bad_response" });
    expect((error as Error).message).toMatch(/GET \/batch\/b1\/tasks: .* at status/);
  });

  test("a bearer token goes in Authorization on every request", async () => {
    let seen: string | undefined;
    const url = await serve((req, res) => {
      seen = req.headers.authorization;
      res.writeHead(200, { "content-type": "application/json" }).end("[]");
    });
    expect(await new ProctorClient({ server: url, token: "s3cret" }).batches()).toEqual([]);
    expect(seen).toBe("Bearer s3cret");
  });
});

describe("followBatch", () => {
  test("a dropped WebSocket is reopened with since = the last seq seen, and no event is delivered twice", async () => {
    const connects: (string | null)[] = [];
    let wss: WebSocketServer | null = null;
    const url = await serve(
      (_req, res) => res.writeHead(404).end(),
      (server) => {
        wss = new WebSocketServer({ server });
        wss.on("connection", (ws, req) => {
          const since = new URL(req.url ?? "/", "http://x").searchParams.get("since");
          connects.push(since);
          if (since === null) {
            // First connection: a snapshot, two events, then the connection drops.
            for (const e of [envelope(0, "snapshot", { status: "running", tasks: [] }), envelope(1, "batch_started"), envelope(2, "task_started")]) ws.send(JSON.stringify(e));
            setImmediate(() => ws.terminate());
          } else {
            // A resumed client gets a snapshot (already at seq 3) and then the replay from since (a
            // repeat of seq 2 must be skipped; 3 and 4 must not be, though the snapshot is at 3).
            for (const e of [envelope(3, "snapshot", { status: "running", tasks: [] }), envelope(2, "task_started"), envelope(3, "task_complete"), envelope(4, "batch_complete")]) ws.send(JSON.stringify(e));
            ws.close(1000);
          }
        });
      },
    );
    servers.push({ close: () => wss?.close() });
    const seen: string[] = [];
    await followBatch({ server: url, batchId: "b1", onEvent: (e) => seen.push(`${e.seq}:${e.event}`) });
    expect(connects).toEqual([null, "2"]);
    expect(seen).toEqual(["0:snapshot", "1:batch_started", "2:task_started", "3:snapshot", "3:task_complete", "4:batch_complete"]);
  });

  test("a message outside the protocol fails the follow with a ClientError instead of being skipped", async () => {
    let wss: WebSocketServer | null = null;
    const url = await serve(
      (_req, res) => res.writeHead(404).end(),
      (server) => {
        wss = new WebSocketServer({ server });
        wss.on("connection", (ws) => ws.send(JSON.stringify({ hello: "world" })));
      },
    );
    servers.push({ close: () => wss?.close() });
    await expect(followBatch({ server: url, batchId: "b1" })).rejects.toMatchObject({ code: "bad_response" });
  });
});
