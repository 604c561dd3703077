import { readFile, readdir } from "node:fs/promises";
import type { IncomingMessage } from "node:http";
import { basename, join } from "node:path";
import type { Duplex } from "node:stream";
import { RequestAuthError, UiSessions, sessionCookie, sessionIdFrom, type RequestAuthenticator } from "@proctor/auth";
import type { Logger } from "@proctor/schema";
import { answerApi, readViewerAsset, RunDir, type RunSource } from "@proctor/viewer";
import type { FastifyInstance, FastifyReply } from "fastify";
import { WebSocket, WebSocketServer } from "ws";
import type { QueuedBatch, RunQueue } from "@proctor/engine";
import { AGENT_IMAGE_DIR } from "./agent-image";
import { UPLOAD_DIR } from "./store";

declare module "fastify" {
  interface FastifyContextConfig {
    /** Routes of the browser app at /ui: authenticated by the session cookie, not by request headers. */
    uiSession?: boolean;
  }
}

export interface UiOptions {
  queue: RunQueue;
  auth: RequestAuthenticator;
  logger: Logger;
  /** How often new batches are looked for in memory while a browser is connected (default 1 s). */
  syncMs?: number;
}

/** Failed sign-ins per client address per minute before 429. */
const MAX_LOGIN_FAILURES = 20;
/** Changes are announced at most this often: each refetch of a big run recomputes its report. */
const LIVE_FLUSH_MS = 500;
const PING_MS = 30_000;
const WS_BUFFER_CAP = 1024 * 1024;
const INSTRUCTION_MAX = 256 * 1024;

const browser = { config: { uiSession: true } } as const;

/** JSON error as every other route answers it. */
function fail(reply: FastifyReply, status: number, error: string, message: string): FastifyReply {
  return reply.code(status).header("cache-control", "no-store").send({ error, message });
}

/** A cross-site page must not drive the session (SameSite=Strict already keeps the cookie home; this is the second lock). */
function sameOrigin(headers: IncomingMessage["headers"]): boolean {
  const origin = headers.origin;
  if (origin === undefined || origin === "null") return origin === undefined;
  try {
    return new URL(origin).host === headers.host;
  } catch {
    return false;
  }
}

/** prompt.md / instruction.md of a task in the batch's upload (tasks/ at its root or one directory down); never from agent_code/ or agent_image/. */
async function uploadInstruction(run: RunDir, taskId: string): Promise<string | null> {
  if (taskId.includes("/") || taskId.includes("\\") || taskId === ".." || taskId === ".") return null;
  const upload = join(run.dir, UPLOAD_DIR);
  const roots = [upload];
  for (const entry of await readdir(upload, { withFileTypes: true }).catch(() => [])) {
    if (entry.isDirectory() && !["agent_code", AGENT_IMAGE_DIR, "tasks"].includes(entry.name)) roots.push(join(upload, entry.name));
  }
  for (const root of roots) {
    for (const name of ["prompt.md", "instruction.md"]) {
      const text = await readFile(join(root, "tasks", taskId, name), "utf8").catch(() => null);
      if (text !== null) return text.length > INSTRUCTION_MAX ? `${text.slice(0, INSTRUCTION_MAX)}\n[... cut]` : text;
    }
  }
  return null;
}

interface LiveClient {
  ws: WebSocket;
  identity: string | null;
  sessionId: string | null;
  alive: boolean;
}

/**
 * The viewer app (@proctor/viewer: the same assets and API handlers as `proctor view`) at /ui,
 * over the server's batches (each batch dir is a run dir), behind a browser session:
 *
 * - `POST /ui/api/login {token}` takes a bearer token of the server (auth token) or a one-time
 *   login token from `POST /ui/login-token` (any auth: minted for whoever signed that request)
 *   and sets an HttpOnly, SameSite=Strict session cookie; the token never travels in a URL;
 * - `GET /ui/api/...` answers only with the caller's batches (admins: all), 401 JSON without a
 *   session; `/ui/ws` pushes `{type:"changed", runIds}` from the batches' live event streams
 *   (the listeners the WebSocket hub uses), coalesced, only for batches the client may see.
 */
export class ServerUi {
  readonly sessions = new UiSessions();
  private readonly runDirs = new Map<string, RunDir>();
  private readonly wss = new WebSocketServer({ noServer: true, maxPayload: 4096 });
  private readonly clients = new Set<LiveClient>();
  private readonly attached = new Map<QueuedBatch, () => void>();
  private readonly changed = new Set<string>();
  private readonly failures = new Map<string, { count: number; resetAtMs: number }>();
  private flushTimer: NodeJS.Timeout | null = null;
  private syncTimer: NodeJS.Timeout | null = null;
  private readonly pingTimer: NodeJS.Timeout;

  constructor(private readonly options: UiOptions) {
    this.wss.on("error", (error) => options.logger.error("ui websocket server error", { error: String(error) }));
    this.pingTimer = setInterval(() => this.beat(), PING_MS);
    this.pingTimer.unref();
  }

  private get loginRequired(): boolean {
    return this.options.auth.mode !== "none";
  }

  /** The caller's identity from the session cookie; undefined when not signed in (auth none: everyone is). */
  private identityOf(headers: IncomingMessage["headers"]): { identity: string | null } | undefined {
    if (!this.loginRequired) return { identity: null };
    return this.sessions.lookup(sessionIdFrom(headers.cookie)) ?? undefined;
  }

  private runDirOf(batch: QueuedBatch): RunDir {
    let run = this.runDirs.get(batch.id);
    if (!run) {
      run = new RunDir(batch.dir, { plannedTrials: batch.tasks.size, startedAt: batch.record.createdAt });
      this.runDirs.set(batch.id, run);
    }
    return run;
  }

  /** The batches `identity` may see, as run dirs. */
  private sourceFor(identity: string | null): RunSource {
    const { queue, auth } = this.options;
    return {
      runs: async () => {
        const batches = queue.list();
        // Batches deleted by retention leave the cache.
        const live = new Set(batches.map((b) => b.id));
        for (const id of this.runDirs.keys()) if (!live.has(id)) this.runDirs.delete(id);
        return batches.filter((b) => auth.canAccess(identity, b.record.submittedBy)).map((b) => this.runDirOf(b));
      },
      run: async (runId) => {
        const batch = queue.find(runId);
        return batch && auth.canAccess(identity, batch.record.submittedBy) ? this.runDirOf(batch) : null;
      },
    };
  }

  /** Routes under /ui (see the class comment); `POST /ui/login-token` uses the server's usual auth. */
  register(app: FastifyInstance): void {
    const { auth, queue, logger } = this.options;
    app.get("/ui", browser, async (_request, reply) => reply.redirect("/ui/", 308));
    const asset = async (name: string, reply: FastifyReply) => {
      const file = await readViewerAsset(name);
      if (!file) return fail(reply, 404, "not_found", `no file /ui/${name}`);
      return reply.headers(file.headers).send(file.body);
    };
    app.get("/ui/", browser, async (_request, reply) => asset("", reply));
    app.get<{ Params: { file: string } }>("/ui/:file", browser, async (request, reply) => asset(request.params.file, reply));

    app.post("/ui/login-token", async (request, reply) => {
      const { token, expiresAtMs } = this.sessions.mint(request.proctorIdentity);
      logger.info("ui login token issued", { identity: request.proctorIdentity });
      return reply.code(201).header("cache-control", "no-store").send({ token, expires_at: new Date(expiresAtMs).toISOString(), login_url: "/ui/" });
    });

    app.get("/ui/api/session", browser, async (request, reply) => {
      const who = this.identityOf(request.headers);
      return reply.header("cache-control", "no-store").send({ login: this.loginRequired, signedIn: who !== undefined, identity: who?.identity ?? null, admin: auth.isAdmin(who?.identity ?? null) });
    });

    app.post("/ui/api/login", browser, async (request, reply) => {
      if (!sameOrigin(request.headers)) return fail(reply, 403, "forbidden", "sign-in from another origin is refused");
      if (!/^application\/json\b/i.test(request.headers["content-type"] ?? "")) return fail(reply, 415, "bad_request", "POST /ui/api/login takes a JSON body {\"token\": \"...\"}");
      const key = `ip:${request.ip}`;
      const now = Date.now();
      const seen = this.failures.get(key);
      if (seen && seen.resetAtMs > now && seen.count >= MAX_LOGIN_FAILURES) {
        reply.header("retry-after", String(Math.ceil((seen.resetAtMs - now) / 1000)));
        return fail(reply, 429, "too_many_attempts", "too many failed sign-ins from this address; wait a minute");
      }
      let token = "";
      try {
        const body = JSON.parse(Buffer.isBuffer(request.body) ? request.body.toString("utf8") : "null") as { token?: unknown } | null;
        token = typeof body?.token === "string" ? body.token.trim() : "";
      } catch {
        return fail(reply, 400, "bad_request", "the body is not JSON; send {\"token\": \"...\"}");
      }
      const identity = this.redeem(token);
      if (identity === undefined) {
        const entry = seen && seen.resetAtMs > now ? seen : { count: 0, resetAtMs: now + 60_000 };
        entry.count += 1;
        this.failures.set(key, entry);
        return fail(reply, 401, "unauthorized", "that token is not valid here: use a bearer token of this server, or a fresh login token from POST /ui/login-token");
      }
      this.failures.delete(key);
      const { sessionId, maxAgeSec } = this.sessions.open(identity.identity);
      logger.info("ui sign-in", { identity: identity.identity });
      return reply
        .header("set-cookie", sessionCookie(sessionId, maxAgeSec, request.protocol === "https"))
        .header("cache-control", "no-store")
        .send({ identity: identity.identity, admin: auth.isAdmin(identity.identity) });
    });

    app.post("/ui/api/logout", browser, async (request, reply) => {
      if (!sameOrigin(request.headers)) return fail(reply, 403, "forbidden", "sign-out from another origin is refused");
      this.sessions.close(sessionIdFrom(request.headers.cookie));
      return reply.code(204).header("set-cookie", sessionCookie("", 0, request.protocol === "https")).send();
    });

    app.get<{ Params: { "*": string } }>("/ui/api/*", browser, async (request, reply) => {
      const who = this.identityOf(request.headers);
      if (who === undefined) return fail(reply, 401, "unauthorized", "sign in at /ui/ first (POST /ui/api/login)");
      const url = new URL(request.url, "http://localhost");
      const path = request.params["*"].split("/").filter(Boolean).map(decodeURIComponent);
      const answer = await answerApi(this.sourceFor(who.identity), path, url.searchParams, {
        showPaths: false,
        instruction: uploadInstruction,
        describe: (run) => {
          const batch = queue.find(basename(run.dir));
          return batch ? { status: batch.status, owner: batch.record.submittedBy } : {};
        },
      });
      return reply.code(answer.status).header("cache-control", "no-store").send(answer.body);
    });

    app.addHook("onClose", async () => this.close());
  }

  /** The identity a sign-in token stands for, or undefined: a minted login token, else (auth token) a bearer token. */
  private redeem(token: string): { identity: string | null } | undefined {
    if (token === "") return undefined;
    const minted = this.sessions.redeem(token);
    if (minted) return minted;
    if (this.options.auth.mode !== "token") return undefined;
    try {
      return { identity: this.options.auth.checkHeaders({ authorization: `Bearer ${token}` }).identity };
    } catch (error) {
      if (error instanceof RequestAuthError) return undefined;
      throw error;
    }
  }

  /** True for the upgrade requests this class answers (`/ui/ws`). */
  handles(request: IncomingMessage): boolean {
    return new URL(request.url ?? "/", "http://localhost").pathname === "/ui/ws";
  }

  /** Authenticate by the session cookie before the upgrade (401 and close otherwise), then join the live feed. */
  upgrade(request: IncomingMessage, socket: Duplex, head: Buffer): void {
    socket.on("error", () => undefined);
    const who = this.identityOf(request.headers);
    if (!sameOrigin(request.headers) || who === undefined) {
      const body = JSON.stringify({ error: "unauthorized", message: "sign in at /ui/ first" });
      socket.end(`HTTP/1.1 401 Unauthorized\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`);
      socket.destroy();
      return;
    }
    this.wss.handleUpgrade(request, socket, head, (ws) => {
      const client: LiveClient = { ws, identity: who.identity, sessionId: sessionIdFrom(request.headers.cookie), alive: true };
      ws.on("error", (error) => this.options.logger.debug("ui websocket error", { error: String(error) }));
      ws.on("pong", () => {
        client.alive = true;
      });
      ws.on("close", () => this.drop(client));
      this.clients.add(client);
      this.sync();
      this.syncTimer ??= setInterval(() => this.sync(), this.options.syncMs ?? 1000);
      ws.send(JSON.stringify({ type: "hello" }));
    });
  }

  /** Listen to every batch's live events (the hub's per-batch channel); new batches show up within syncMs. */
  private sync(): void {
    const batches = new Set(this.options.queue.list());
    for (const batch of batches) {
      if (this.attached.has(batch)) continue;
      this.attached.set(batch, batch.subscribe(() => this.mark(batch.id)));
      // Not the first sync: a batch submitted since the last one is news to the runs list.
      if (this.syncTimer !== null) this.mark(batch.id);
    }
    for (const [batch, unsubscribe] of this.attached) {
      if (batches.has(batch)) continue;
      unsubscribe();
      this.attached.delete(batch);
      this.mark(batch.id);
    }
  }

  private mark(batchId: string): void {
    this.changed.add(batchId);
    this.flushTimer ??= setTimeout(() => this.flush(), LIVE_FLUSH_MS);
  }

  /** One message per client per LIVE_FLUSH_MS at most, naming only the batches it may see. */
  private flush(): void {
    this.flushTimer = null;
    const ids = [...this.changed];
    this.changed.clear();
    const { queue, auth } = this.options;
    for (const client of this.clients) {
      const visible = ids.filter((id) => {
        const batch = queue.find(id);
        // A deleted batch is announced to everyone (it says nothing but "gone").
        return batch === undefined || auth.canAccess(client.identity, batch.record.submittedBy);
      });
      // A slow client skips a message (it refetches on the next one anyway).
      if (visible.length === 0 || client.ws.readyState !== WebSocket.OPEN || client.ws.bufferedAmount > WS_BUFFER_CAP) continue;
      client.ws.send(JSON.stringify({ type: "changed", runIds: visible }));
    }
  }

  private beat(): void {
    for (const client of this.clients) {
      // A signed-out or expired session ends its live feed too.
      const expired = this.loginRequired && this.sessions.lookup(client.sessionId) === null;
      if (!client.alive || expired) {
        if (expired) client.ws.close(4401, "session ended");
        else client.ws.terminate();
        this.drop(client);
        continue;
      }
      client.alive = false;
      client.ws.ping();
    }
  }

  private drop(client: LiveClient): void {
    if (!this.clients.delete(client)) return;
    if (this.clients.size > 0) return;
    // Nobody watches: stop listening.
    if (this.syncTimer) clearInterval(this.syncTimer);
    this.syncTimer = null;
    for (const unsubscribe of this.attached.values()) unsubscribe();
    this.attached.clear();
  }

  close(): void {
    clearInterval(this.pingTimer);
    if (this.flushTimer) clearTimeout(this.flushTimer);
    this.flushTimer = null;
    for (const client of [...this.clients]) {
      client.ws.terminate();
      this.drop(client);
    }
    this.wss.close();
  }
}
