// Helpers for this package's tests (not exported from index.ts).
import { execFileSync } from "node:child_process";
import { chmod, mkdir, readdir, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { Keypair } from "@proctor/auth";
import { LocalRuntime } from "@proctor/sandbox";
import type { Logger } from "@proctor/schema";
import * as tar from "tar";
import { request } from "undici";
import WebSocket from "ws";
import { authHeaders } from "@proctor/client";
import type { ClientAuth } from "@proctor/client";
import { startServer } from "./server";
import type { RunningServer, StartServerOptions } from "./server";
import type { WireEnvelope } from "@proctor/client";

export const ALICE = Keypair.fromUri("//Alice");
export const BOB = Keypair.fromUri("//Bob");
export const EMPTY_SHA = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

/** Collects log lines so a test can show them when it fails. */
export function memoryLogger(): Logger & { lines: string[] } {
  const lines: string[] = [];
  const log = (level: string) => (message: string, fields?: Record<string, unknown>) => lines.push(`${level} ${message} ${fields ? JSON.stringify(fields) : ""}`);
  return { lines, debug: log("debug"), info: log("info"), warn: log("warn"), error: log("error") };
}

/** A local git repository with one commit; returns its path and the commit sha. */
export async function makeGitRepo(root: string): Promise<{ repo: string; commit: string }> {
  const repo = join(root, "repo");
  await mkdir(repo, { recursive: true });
  await writeFile(join(repo, "README.md"), "fixture repo\n");
  const git = (...args: string[]) =>
    execFileSync("git", ["-c", "user.email=t@example.com", "-c", "user.name=t", "-c", "init.defaultBranch=main", ...args], { cwd: repo, encoding: "utf8" }).trim();
  git("init", "-q");
  git("add", ".");
  git("commit", "-q", "-m", "init");
  return { repo, commit: git("rev-parse", "HEAD") };
}

export interface FixtureTask {
  id: string;
  /** Body of tests/check.sh; default: the agent's output file exists. */
  check?: string;
  /** Extra check scripts: name -> body. */
  moreChecks?: Record<string, string>;
}

/**
 * Write a term-executor archive (tasks/<id>/workspace.yaml + prompt.md + tests/*.sh, and
 * agent_code/run.sh) and pack it as .tar.gz with the `tar` package. Returns the archive path.
 */
export async function makeArchive(
  root: string,
  options: { repo: string; commit: string; tasks: FixtureTask[]; agentScript?: string; name?: string; layout?: "root" | "nested"; withoutAgent?: boolean },
): Promise<string> {
  const tree = join(root, `tree-${Math.random().toString(36).slice(2)}`);
  const base = options.layout === "nested" ? join(tree, "submission") : tree;
  for (const task of options.tasks) {
    const dir = join(base, "tasks", task.id);
    await mkdir(join(dir, "tests"), { recursive: true });
    await writeFile(join(dir, "workspace.yaml"), `repo: "${options.repo}"\nbase_commit: "${options.commit}"\nlanguage: shell\n`);
    await writeFile(join(dir, "prompt.md"), `Create done.txt for ${task.id}.\n`);
    await writeFile(join(dir, "tests", "check.sh"), task.check ?? "#!/bin/bash\ntest -f done.txt\n");
    for (const [name, body] of Object.entries(task.moreChecks ?? {})) await writeFile(join(dir, "tests", name), body);
  }
  if (!options.withoutAgent) {
    await mkdir(join(base, "agent_code"), { recursive: true });
    const run = join(base, "agent_code", "run.sh");
    await writeFile(run, options.agentScript ?? "#!/bin/bash\necho agent ran > done.txt\n");
    await chmod(run, 0o755);
  }
  const archive = join(root, options.name ?? `upload-${Math.random().toString(36).slice(2)}.tar.gz`);
  await tar.create({ gzip: true, file: archive, cwd: tree }, await readdir(tree));
  await rm(tree, { recursive: true, force: true });
  return archive;
}

/** A server on 127.0.0.1:0 with the local runtime, local repos allowed, quick heartbeats. */
export async function startTestServer(dataDir: string, overrides: Partial<StartServerOptions> = {}): Promise<RunningServer & { logger: ReturnType<typeof memoryLogger> }> {
  const logger = memoryLogger();
  const server = await startServer({
    host: "127.0.0.1",
    port: 0,
    dataDir,
    auth: "epistula",
    hotkeys: [ALICE.address],
    runtime: new LocalRuntime({ rootDir: join(dataDir, "..", "sandboxes") }),
    defaultImage: null,
    allowLocalRepos: true,
    // The local runtime cannot isolate the verifier; the tests' agents are trusted.
    isolateVerifier: false,
    shutdownGraceMs: 10_000,
    logger,
    ...overrides,
  });
  return Object.assign(server, { logger });
}

/** A signed JSON request; returns status and parsed body. */
export async function call(
  server: string,
  method: "GET" | "POST",
  path: string,
  auth: ClientAuth = { keypair: ALICE },
  headers: Record<string, string> = {},
): Promise<{ status: number; body: any }> {
  const response = await request(new URL(path, server), { method, headers: { ...authHeaders(auth, EMPTY_SHA), ...headers } });
  const text = await response.body.text();
  return { status: response.statusCode, body: text === "" ? null : JSON.parse(text) };
}

/** Open a signed WebSocket and collect every message until it closes. */
export function collectWs(server: string, batchId: string, options: { since?: number; auth?: ClientAuth } = {}): {
  messages: WireEnvelope[];
  opened: Promise<void>;
  closed: Promise<{ code: number }>;
  ws: WebSocket;
} {
  const url = new URL("/ws", server);
  url.protocol = "ws:";
  url.searchParams.set("batch_id", batchId);
  if (options.since !== undefined) url.searchParams.set("since", String(options.since));
  const ws = new WebSocket(url, { headers: authHeaders(options.auth ?? { keypair: ALICE }, EMPTY_SHA) });
  const messages: WireEnvelope[] = [];
  ws.on("message", (data) => messages.push(JSON.parse(String(data)) as WireEnvelope));
  const opened = new Promise<void>((resolve, reject) => {
    ws.once("open", () => resolve());
    ws.once("error", reject);
  });
  const closed = new Promise<{ code: number }>((resolve) => ws.once("close", (code) => resolve({ code })));
  return { messages, opened, closed, ws };
}

/**
 * Poll GET /batch/:id until its status is one of `statuses`. timeoutMs is a hang guard, not a
 * speed assertion: at a load of 20+ on 2 cores a 3-task batch took ~30 s.
 */
export async function waitForStatus(server: string, batchId: string, statuses: string[], timeoutMs = 240_000): Promise<any> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const { status, body } = await call(server, "GET", `/batch/${batchId}`);
    if (status === 200 && statuses.includes(body.status)) return body;
    if (Date.now() > deadline) throw new Error(`batch ${batchId} still ${JSON.stringify(body)} after ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 50));
  }
}
