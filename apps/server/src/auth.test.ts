import { readdir, rm } from "node:fs/promises";
import { join } from "node:path";
import { Readable } from "node:stream";
import { contentDigestHeader, sha256Hex, signRequest } from "@proctor/auth";
import { LocalRuntime } from "@proctor/sandbox";
import { request } from "undici";
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { uploadArchive } from "@proctor/client";
import { ClientError } from "@proctor/client";
import { startServer } from "./server";
import type { RunningServer } from "./server";
import { ALICE, BOB, EMPTY_SHA, call, collectWs, makeArchive, makeGitRepo, startTestServer } from "./test-support";
import { tempDir } from "./test-fixture";

let root: string;
let server: RunningServer;
let archive: string;

beforeAll(async () => {
  root = await tempDir();
  const fixture = await makeGitRepo(root);
  archive = await makeArchive(root, { ...fixture, tasks: [{ id: "t" }] });
  server = await startTestServer(join(root, "data"));
});
afterAll(async () => {
  await server.close();
  await rm(root, { recursive: true, force: true });
});

async function get(path: string, headers: Record<string, string>, base = server.url): Promise<{ status: number; body: any }> {
  const response = await request(new URL(path, base), { headers });
  return { status: response.statusCode, body: await response.body.json() };
}

describe("epistula auth", () => {
  test("/health is public; every other route needs a valid signature", async () => {
    expect((await get("/health", {})).status).toBe(200);
    for (const path of ["/batches", "/status", "/metrics", "/batch/x"]) {
      const response = await get(path, {});
      expect(response.status, path).toBe(401);
      expect(response.body).toMatchObject({ error: "missing_header", message: expect.stringContaining("Epistula") });
    }
    expect((await call(server.url, "GET", "/batches")).status).toBe(200);
  });

  test("missing, forged, stale and replayed signatures are 401; an unlisted hotkey is 403", async () => {
    const forged = { ...signRequest({ keypair: ALICE, body: "" }) };
    forged["Epistula-Request-Signature"] = signRequest({ keypair: ALICE, body: "something else" })["Epistula-Request-Signature"]!;
    expect(await get("/batches", forged)).toMatchObject({ status: 401, body: { error: "bad_signature" } });

    const signedByBobClaimingAlice = { ...signRequest({ keypair: BOB, body: "" }), "Epistula-Signed-By": ALICE.address };
    expect(await get("/batches", signedByBobClaimingAlice)).toMatchObject({ status: 401, body: { error: "bad_signature" } });

    const stale = signRequest({ keypair: ALICE, body: "", now: Date.now() - 10 * 60_000 });
    expect(await get("/batches", stale)).toMatchObject({ status: 401, body: { error: "timestamp_out_of_window" } });

    const once = signRequest({ keypair: ALICE, body: "" });
    expect((await get("/batches", once)).status).toBe(200);
    expect(await get("/batches", once)).toMatchObject({ status: 401, body: { error: "replayed_request" } });

    expect(await get("/batches", signRequest({ keypair: BOB, body: "" }))).toMatchObject({ status: 403, body: { error: "not_allowed" } });
  });

  test("an unlisted hotkey is refused before its upload is read; a body that does not match its signature is 401", async () => {
    const bob = await uploadArchive({ server: server.url, archivePath: archive, keypair: BOB }).catch((e: unknown) => e);
    expect((bob as ClientError).statusCode).toBe(403);

    // 64 MiB that would take a while to stage: the 403 arrives from the headers alone.
    let sent = 0;
    const body = new Readable({
      read() {
        if (sent >= 64 * 1024 * 1024) return this.push(null);
        sent += 1024 * 1024;
        this.push(Buffer.alloc(1024 * 1024));
      },
    });
    const response = await request(new URL("/submit", server.url), {
      method: "POST",
      headers: { ...signRequest({ keypair: BOB, body: "" }), "content-type": "multipart/form-data; boundary=x" },
      body,
    }).catch((e: unknown) => e);
    if (!(response instanceof Error)) {
      expect((response as { statusCode: number }).statusCode).toBe(403);
      await (response as { body: { dump(): Promise<void> } }).body.dump();
    }
    expect(sent).toBeLessThan(64 * 1024 * 1024);

    // Alice signs one body (and declares its digest) and sends another: the staged upload is dropped, no batch is created.
    const tampered = await request(new URL("/submit", server.url), {
      method: "POST",
      headers: {
        ...signRequest({ keypair: ALICE, body: "the body she meant" }),
        "content-digest": contentDigestHeader(sha256Hex("the body she meant")),
        "content-type": "multipart/form-data; boundary=x",
      },
      body: "--x\r\nContent-Disposition: form-data; name=\"archive\"; filename=\"a.tar.gz\"\r\n\r\nnot it\r\n--x--\r\n",
    });
    expect(tampered.statusCode).toBe(400);
    expect(await tampered.body.json()).toMatchObject({ error: "content_digest_mismatch" });
    // Signed over a digest that is then swapped for another: the signature does not verify (before the body).
    const swapped = await request(new URL("/submit", server.url), {
      method: "POST",
      headers: {
        ...signRequest({ keypair: ALICE, body: "the body she meant" }),
        "content-digest": contentDigestHeader(sha256Hex("another body")),
        "content-type": "multipart/form-data; boundary=x",
      },
      body: "another body",
    });
    expect(swapped.statusCode).toBe(401);
    expect(await swapped.body.json()).toMatchObject({ error: "bad_signature" });
    expect(await readdir(join(root, "data", "staging"))).toEqual([]);
    expect(await readdir(join(root, "data", "batches"))).toEqual([]);
    expect((await call(server.url, "GET", "/batches")).body).toEqual([]);
  });

  test("the WebSocket upgrade is authenticated too", async () => {
    const batch = await uploadArchive({ server: server.url, archivePath: archive, keypair: ALICE });
    for (const [auth, status] of [
      [{}, 401],
      [{ keypair: BOB }, 403],
    ] as const) {
      const client = collectWs(server.url, batch.batch_id, { auth });
      const error = await client.opened.catch((e: unknown) => e);
      expect(String(error)).toContain(`Unexpected server response: ${status}`);
    }
    const ok = collectWs(server.url, batch.batch_id);
    await ok.opened;
    await ok.closed;
    expect(ok.messages.at(-1)?.event).toBe("snapshot");
    expect(ok.messages.at(-1)?.data.status).toBe("completed");
    const unknown = collectWs(server.url, "no-such-batch");
    expect(String(await unknown.opened.catch((e: unknown) => e))).toContain("404");
  });
});

describe("other auth modes", () => {
  test("token mode takes a bearer token; none mode refuses a public bind without insecure", async () => {
    const dataDir = join(root, "token");
    const token = "a-long-random-test-token-0123456789";
    const tokenServer = await startTestServer(dataDir, { auth: "token", tokens: [token] });
    try {
      expect((await call(tokenServer.url, "GET", "/batches", { token })).status).toBe(200);
      expect(await call(tokenServer.url, "GET", "/batches", { token: "a-long-but-wrong-token-0123456789" })).toMatchObject({ status: 401, body: { error: "invalid_token" } });
      expect((await call(tokenServer.url, "GET", "/batches", {})).status).toBe(401);
    } finally {
      await tokenServer.close();
    }
    await expect(
      startServer({ host: "0.0.0.0", port: 0, dataDir, auth: "none", runtime: new LocalRuntime(), defaultImage: null }),
    ).rejects.toThrow(/loopback/);
  });

  test("hotkey-header-insecure accepts an allowlisted X-Hotkey and says it is insecure", async () => {
    const legacy = await startTestServer(join(root, "legacy"), { auth: "hotkey-header-insecure" });
    try {
      expect((await get("/batches", { "X-Hotkey": ALICE.address }, legacy.url)).status).toBe(200);
      expect((await get("/batches", { "X-Hotkey": BOB.address }, legacy.url)).status).toBe(403);
      expect((await get("/batches", {}, legacy.url)).status).toBe(401);
      expect(legacy.logger.lines.join("\n")).toMatch(/INSECURE/);
    } finally {
      await legacy.close();
    }
  });
});

test("EMPTY_SHA is the sha256 of nothing", async () => {
  const { createHash } = await import("node:crypto");
  expect(createHash("sha256").digest("hex")).toBe(EMPTY_SHA);
});
