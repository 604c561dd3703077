import { createHash } from "node:crypto";
import { once } from "node:events";
import { readFile, readdir } from "node:fs/promises";
import { connect } from "node:net";
import { join } from "node:path";
import { Readable } from "node:stream";
import { Keypair, contentDigestHeader, signRequest } from "@proctor/auth";
import { request } from "undici";
import { describe, expect, test } from "vitest";
import { authHeaders, uploadArchive } from "@proctor/client";
import type { ClientError } from "@proctor/client";
import { ALICE, BOB, EMPTY_SHA, call, makeArchive, startTestServer } from "./test-support";
import { useGitFixture } from "./test-fixture";

const fixture = useGitFixture();

const MiB = 1024 * 1024;

/** A generated body of `total` bytes (never held in memory); `sent()` says how much was pulled. */
function generatedBody(total: number): { body: Readable; sent: () => number } {
  const chunk = Buffer.alloc(64 * 1024, 0x61);
  let sent = 0;
  const body = new Readable({
    read() {
      if (sent >= total) {
        this.push(null);
        return;
      }
      sent += chunk.length;
      this.push(chunk);
    },
  });
  return { body, sent: () => sent };
}

describe("uploads: signature checked from the headers (Content-Digest) before the body", () => {
  test("a forged 500 MB upload by an allowlisted hotkey is refused with 401 after < 1 MB was read", async () => {
    const server = await startTestServer(join(fixture.root, "forged"));
    const reads: number[] = [];
    server.httpServer.on("connection", (socket) => socket.once("close", () => reads.push(socket.bytesRead)));
    try {
      const total = 500 * 1024 * 1024;
      const digest = createHash("sha256").update("the attacker cannot hash 500 MB he has not sent").digest("hex");
      // Bob signs, claiming to be Alice (allowlisted): the signature cannot verify for Alice's key.
      const headers = { ...signRequest({ keypair: BOB, body: { sha256Hex: digest } }), "Epistula-Signed-By": ALICE.address };
      const { body, sent } = generatedBody(total);
      const started = Date.now();
      const response = await request(new URL("/submit", server.url), {
        method: "POST",
        headers: { ...headers, "content-digest": contentDigestHeader(digest), "content-type": "multipart/form-data; boundary=x", "content-length": String(total) },
        body,
      });
      const answer = await response.body.json();
      const elapsedMs = Date.now() - started;
      expect(response.statusCode).toBe(401);
      expect(answer).toMatchObject({ error: "bad_signature", message: expect.stringContaining("Epistula-Request-Signature") });
      body.destroy();
      for (let i = 0; i < 100 && reads.length === 0; i++) await new Promise((r) => setTimeout(r, 20));
      expect(reads).toHaveLength(1);
      const bytesRead = reads[0] ?? Number.NaN;
      console.log(`forged 500 MB upload: server read ${bytesRead} bytes (headers included), client generated ${sent()} bytes, 401 after ${elapsedMs} ms`);
      expect(bytesRead).toBeLessThan(MiB);
      expect(await readdir(join(fixture.root, "forged", "staging"))).toEqual([]);
    } finally {
      await server.close();
    }
  });

  test("a body that does not match its Content-Digest is a 400 naming the header; nothing is kept", async () => {
    const dataDir = join(fixture.root, "mismatch");
    const server = await startTestServer(dataDir);
    try {
      const meant = Buffer.from("--x\r\nContent-Disposition: form-data; name=\"archive\"; filename=\"a.tar.gz\"\r\n\r\nmeant\r\n--x--\r\n");
      const sent = Buffer.from(meant.toString().replace("meant", "other"));
      const digest = createHash("sha256").update(meant).digest("hex");
      const response = await request(new URL("/submit", server.url), {
        method: "POST",
        headers: { ...signRequest({ keypair: ALICE, body: meant }), "content-digest": contentDigestHeader(digest), "content-type": "multipart/form-data; boundary=x" },
        body: sent,
      });
      expect(response.statusCode).toBe(400);
      const answer = (await response.body.json()) as { error: string; message: string };
      expect(answer).toMatchObject({ error: "content_digest_mismatch", message: expect.stringContaining("Content-Digest") });
      expect(await readdir(join(dataDir, "staging"))).toEqual([]);
      expect(await readdir(join(dataDir, "batches"))).toEqual([]);

      const malformed = await request(new URL("/submit", server.url), {
        method: "POST",
        headers: { ...signRequest({ keypair: ALICE, body: meant }), "content-digest": "sha-256=:nope:", "content-type": "multipart/form-data; boundary=x" },
        body: meant,
      });
      expect(malformed.statusCode).toBe(400);
      expect(await malformed.body.json()).toMatchObject({ error: "bad_content_digest", message: expect.stringContaining("Content-Digest") });
    } finally {
      await server.close();
    }
  });

  test("an upload without Content-Digest is a 400 asking for it, unless the staged mode is enabled", async () => {
    const archive = await makeArchive(fixture.root, { ...fixture, tasks: [{ id: "t" }] });
    const body = Buffer.from(`--x\r\nContent-Disposition: form-data; name="archive"; filename="a.tar.gz"\r\nContent-Type: application/octet-stream\r\n\r\n`);
    const { readFile } = await import("node:fs/promises");
    const full = Buffer.concat([body, await readFile(archive), Buffer.from("\r\n--x--\r\n")]);
    const send = (url: string, keypair = ALICE) =>
      request(new URL("/submit", url), { method: "POST", headers: { ...signRequest({ keypair, body: full }), "content-type": "multipart/form-data; boundary=x" }, body: full });

    const strict = await startTestServer(join(fixture.root, "strict"));
    try {
      const response = await send(strict.url);
      expect(response.statusCode).toBe(400);
      const answer = (await response.body.json()) as { error: string; message: string };
      expect(answer.error).toBe("missing_content_digest");
      expect(answer.message).toMatch(/Content-Digest: sha-256=:/);
      // The current client sends it.
      expect((await uploadArchive({ server: strict.url, archivePath: archive, keypair: ALICE })).total_tasks).toBe(1);
    } finally {
      await strict.close();
    }

    const staged = await startTestServer(join(fixture.root, "staged"), { allowUndigestedUploads: true, hotkeys: [ALICE.address, BOB.address] });
    try {
      const ok = await send(staged.url);
      expect(ok.statusCode).toBe(202);
      await ok.body.dump();
      const forged = await request(new URL("/submit", staged.url), {
        method: "POST",
        headers: { ...signRequest({ keypair: BOB, body: "something else" }), "Epistula-Signed-By": ALICE.address, "content-type": "multipart/form-data; boundary=x" },
        body: full,
      });
      expect(forged.statusCode).toBe(401);
      expect(await forged.body.json()).toMatchObject({ error: "bad_signature" });
      expect(staged.logger.lines.join("\n")).toMatch(/without Content-Digest are accepted/);
    } finally {
      await staged.close();
    }
  });
});

describe("upload caps", () => {
  const CHARLIE = Keypair.fromUri("//Charlie");

  /** An upload that sends 64 KiB and then waits; resolves with the server's answer if it refuses early. */
  /** Waits until the server counts `n` uploads in progress (its /metrics gauge); fails after 30 s. */
  async function uploadsInProgress(url: string, n: number): Promise<void> {
    const deadline = Date.now() + 30_000;
    let seen = "";
    while (Date.now() < deadline) {
      const response = await request(new URL("/metrics", url), { headers: authHeaders({ keypair: ALICE }, EMPTY_SHA) });
      const text = await response.body.text();
      seen = /^proctor_uploads_in_progress (\d+)$/m.exec(text)?.[1] ?? `no gauge (${response.statusCode})`;
      if (seen === String(n)) return;
      await new Promise((r) => setTimeout(r, 20));
    }
    expect(seen, "uploads in progress").toBe(String(n));
  }

  function slowUpload(url: string, keypair: Keypair): { answer: Promise<{ status: number; retryAfter: string | undefined; body: any }>; body: Readable } {
    const digest = createHash("sha256").update("slow").digest("hex");
    let pushed = false;
    const body = new Readable({
      read() {
        if (!pushed) {
          pushed = true;
          this.push(Buffer.alloc(64 * 1024));
        }
      },
    });
    const answer = request(new URL("/submit", url), {
      method: "POST",
      headers: { ...signRequest({ keypair, body: { sha256Hex: digest } }), "content-digest": contentDigestHeader(digest), "content-type": "multipart/form-data; boundary=x", "content-length": String(10 * MiB) },
      body,
    }).then(async (r) => ({ status: r.statusCode, retryAfter: r.headers["retry-after"] as string | undefined, body: await r.body.json() }));
    return { answer, body };
  }

  test("per hotkey (429) and in total (503), with Retry-After; a finished upload frees its slot", async () => {
    const server = await startTestServer(join(fixture.root, "caps"), { hotkeys: [ALICE.address, BOB.address, CHARLIE.address], maxConcurrentUploads: 2, maxConcurrentUploadsPerKey: 1 });
    try {
      const first = slowUpload(server.url, ALICE);
      first.answer.catch(() => undefined);
      await uploadsInProgress(server.url, 1);
      const again = await slowUpload(server.url, ALICE).answer;
      expect(again.status).toBe(429);
      expect(again.retryAfter).toMatch(/^\d+$/);
      expect(again.body).toEqual({ error: "too_many_uploads", message: expect.stringMatching(/1 upload\(s\) in progress.*--max-uploads-per-key 1/) });
      // The client reports the cap (with Retry-After) when it may not retry...
      const archive = await makeArchive(fixture.root, { ...fixture, tasks: [{ id: "t" }] });
      const refused = (await uploadArchive({ server: server.url, archivePath: archive, keypair: ALICE, uploadRetries: 0 }).catch((e: unknown) => e)) as ClientError;
      expect(refused).toMatchObject({ statusCode: 429, code: "too_many_uploads", retryAfterSec: expect.any(Number) });
      // ...and otherwise waits and retries, re-signed (here the slot frees while it waits).
      const retries: number[] = [];
      const retried = await uploadArchive({
        server: server.url, archivePath: archive, keypair: ALICE, uploadRetries: 1,
        onUploadRetry: (r) => {
          retries.push(r.delaySec);
          first.body.destroy();
        },
      });
      expect(retried.total_tasks).toBe(1);
      expect(retries).toHaveLength(1);
      const held = slowUpload(server.url, ALICE);
      held.answer.catch(() => undefined);
      await uploadsInProgress(server.url, 1);

      const bob = slowUpload(server.url, BOB);
      bob.answer.catch(() => undefined);
      await uploadsInProgress(server.url, 2);
      const charlie = await slowUpload(server.url, CHARLIE).answer;
      expect(charlie.status).toBe(503);
      expect(charlie.retryAfter).toMatch(/^\d+$/);
      expect(charlie.body).toEqual({ error: "too_many_uploads", message: expect.stringMatching(/receiving 2 uploads.*--max-uploads 2/) });

      // GETs are not uploads.
      expect((await call(server.url, "GET", "/batches", { keypair: CHARLIE })).status).toBe(200);

      held.body.destroy();
      bob.body.destroy();
      const deadline = Date.now() + 5_000;
      let result: unknown;
      do {
        await new Promise((r) => setTimeout(r, 50));
        result = await uploadArchive({ server: server.url, archivePath: archive, keypair: ALICE, uploadRetries: 0 }).catch((e: unknown) => e);
      } while ((result as ClientError).statusCode !== undefined && Date.now() < deadline);
      expect(result).toMatchObject({ total_tasks: 1 });
      await uploadsInProgress(server.url, 0);
    } finally {
      await server.close();
    }
  });

  test("a stalled upload is dropped after the idle timeout and frees its slot", async () => {
    const server = await startTestServer(join(fixture.root, "idle"), { maxConcurrentUploadsPerKey: 1, uploadIdleTimeoutMs: 500 });
    try {
      const stalled = slowUpload(server.url, ALICE);
      const outcome = stalled.answer.then(
        (a) => a.status,
        (e: unknown) => (e as Error).name,
      );
      await uploadsInProgress(server.url, 1);
      expect((await slowUpload(server.url, ALICE).answer).status).toBe(429);
      expect(await outcome).not.toBe(202);
      const archive = await makeArchive(fixture.root, { ...fixture, tasks: [{ id: "t" }] });
      expect((await uploadArchive({ server: server.url, archivePath: archive, keypair: ALICE, uploadRetries: 0 })).total_tasks).toBe(1);
      expect(server.logger.lines.join("\n")).toMatch(/upload stalled/);
    } finally {
      await server.close();
    }
  });

  test("the idle timeout covers the body only, not the server's work after it (extraction, task loading)", async () => {
    // Far below the work after the body (0.8-5 s for 150 tasks on CI), far above a gap between
    // the chunks of a client reading a small archive from disk.
    const server = await startTestServer(join(fixture.root, "idle-work"), { uploadIdleTimeoutMs: 300 });
    try {
      const archive = await makeArchive(fixture.root, { ...fixture, tasks: Array.from({ length: 150 }, (_, i) => ({ id: `t${i}` })) });
      const started = Date.now();
      const result = await uploadArchive({ server: server.url, archivePath: archive, keypair: ALICE, uploadRetries: 0 });
      expect(result.total_tasks).toBe(150);
      console.log(`upload with 150 tasks took ${Date.now() - started} ms`);
    } finally {
      await server.close();
    }
  });

  test("a busy server is not a stalled client: an idle timer that fires late, with the rest of the body already arrived, drops nothing", async () => {
    const idleMs = 1000;
    const server = await startTestServer(join(fixture.root, "idle-busy"), { uploadIdleTimeoutMs: idleMs });
    try {
      const boundary = "proctor-busy-server";
      const head = Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="archive"; filename="a.tar.gz"\r\nContent-Type: application/octet-stream\r\n\r\n`);
      const tail = Buffer.from(`\r\n--${boundary}--\r\n`);
      const body = Buffer.concat([head, await readFile(await makeArchive(fixture.root, { ...fixture, tasks: [{ id: "t" }] })), tail]);
      const sha = createHash("sha256").update(body).digest("hex");
      const headers = { ...signRequest({ keypair: ALICE, body: { sha256Hex: sha } }), "content-digest": contentDigestHeader(sha), "content-type": `multipart/form-data; boundary=${boundary}`, "content-length": String(body.length), connection: "close" };
      const { hostname, port } = new URL(server.url);
      // A raw socket: each write reaches the server's receive buffer at once, with no client-side delay.
      const socket = connect(Number(port), hostname);
      await once(socket, "connect");
      let response = "";
      socket.on("data", (c: Buffer) => (response += c.toString()));
      const closed = once(socket, "close");
      socket.write(`POST /submit HTTP/1.1\r\nhost: ${hostname}:${port}\r\n${Object.entries(headers).map(([k, v]) => `${k}: ${v}`).join("\r\n")}\r\n\r\n`);
      socket.write(body.subarray(0, body.length - tail.length));
      await uploadsInProgress(server.url, 1);
      // The rest of the body arrives; then this process, the server's, is busy for longer than the
      // idle timeout before its event loop reads it: the expired timer runs before that read.
      socket.write(body.subarray(body.length - tail.length));
      setImmediate(() => {
        const until = Date.now() + 2.5 * idleMs;
        while (Date.now() < until);
      });
      await closed;
      expect(response.split("\r\n")[0], response).toBe("HTTP/1.1 202 Accepted");
      expect(server.logger.lines.join("\n")).not.toMatch(/upload stalled/);
    } finally {
      await server.close();
    }
  });
});
