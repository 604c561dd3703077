import { execFile, spawn } from "node:child_process";
import { createInterface } from "node:readline";
import { randomBytes } from "node:crypto";
import { mkdir, rm, writeFile } from "node:fs/promises";
import { hostname } from "node:os";
import { join, resolve } from "node:path";
import { promisify } from "node:util";
import { SlotsClient } from "@proctor/client";
import { DockerRuntime, dockerTestGate } from "@proctor/sandbox-docker";
import { request } from "undici";
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import type { RunningServer } from "./server";
import { startTestServer } from "./test-support";
import { tempDir } from "./test-fixture";

const run = await dockerTestGate();
const execFileAsync = promisify(execFile);
const REPO_ROOT = resolve(import.meta.dirname, "../../..");
const TOKEN_A = "slots-token-alice-0123456789";
const TOKEN_B = "slots-token-bob-0123456789abc";

async function api(server: string, method: string, path: string, options: { token?: string | null; json?: unknown; raw?: Buffer } = {}) {
  const headers: Record<string, string> = {};
  const token = options.token === undefined ? TOKEN_A : options.token;
  if (token) headers.authorization = `Bearer ${token}`;
  let body: string | Buffer | undefined;
  if (options.raw) {
    body = options.raw;
    headers["content-type"] = "application/octet-stream";
  } else if (options.json !== undefined) {
    body = JSON.stringify(options.json);
    headers["content-type"] = "application/json";
  }
  const response = await request(new URL(path, server), { method: method as "GET", headers, body });
  const bytes = Buffer.from(await response.body.arrayBuffer());
  const type = String(response.headers["content-type"] ?? "");
  return { status: response.statusCode, headers: response.headers, bytes, body: type.includes("application/json") && bytes.length > 0 ? JSON.parse(bytes.toString()) : null };
}

describe.skipIf(!run)("the /v1/slots API on Docker", () => {
  let dir: string;
  let server: RunningServer;

  beforeAll(async () => {
    dir = await tempDir("proctor-slots-api-");
    server = await startTestServer(join(dir, "data"), {
      auth: "token",
      tokens: [TOKEN_A, TOKEN_B],
      runtime: new DockerRuntime(),
      defaultImage: "proctor/base:bookworm",
      slots: { slotsPerSandbox: 2, maxSandboxes: 1, acquireTimeoutMs: 1000, tasksDir: join(REPO_ROOT, "examples/tasks") },
    });
  });
  afterAll(async () => {
    await server?.close();
    await rm(dir, { recursive: true, force: true });
  });

  test("a stdlib Python program runs the RL loop (acquire, commands, files, verify, release)", async () => {
    const { stdout } = await execFileAsync("python3", [join(REPO_ROOT, "examples/python/rl_loop.py"), "--server", server.url, "--task", "greeting-file", "--episodes", "3"], {
      env: { ...process.env, PROCTOR_TOKEN: TOKEN_A },
      timeout: 280_000,
    });
    const lines = stdout.trim().split("\n").map((l) => JSON.parse(l));
    expect(lines.slice(0, 3).map((l) => l.reward)).toEqual([1, 0, 1]);
    expect(lines[3]).toMatchObject({ episodes: 3, pool: { slots_busy: 0, waiting: 0 } });
  });

  test("the typed TS client (@proctor/client SlotsClient) drives a task slot to its reward", async () => {
    const slots = new SlotsClient(server.url, { token: TOKEN_B });
    const slot = await slots.create({ task: "greeting-file" });
    try {
      await slot.exec("printf 'Hello, Proctor!\\n' > greeting.txt && mkdir -p archive && cp greeting.txt archive/");
      await slot.exec(["chmod", "600", "archive/greeting.txt"]);
      await slot.writeFile("bin/data", new Uint8Array([0, 1, 2, 255]));
      expect([...((await slot.readFile("bin/data")) ?? [])]).toEqual([0, 1, 2, 255]);
      expect(await slot.readFile("absent")).toBeNull();
      expect(await slot.verify()).toMatchObject({ reward: 1, resolved: true });
      // verify does not end the slot
      expect((await slot.exec("cat greeting.txt")).stdout).toBe("Hello, Proctor!\n");
      expect((await slots.pool()).slots_busy).toBeGreaterThan(0);
    } finally {
      await slot.release();
    }
    await expect(slot.exec("true")).rejects.toMatchObject({ statusCode: 404 });
  });

  test("auth: no token 401, another credential's slot 403; exhausted pool 503 with Retry-After", async () => {
    expect((await api(server.url, "POST", "/v1/slots", { token: null, json: {} })).status).toBe(401);
    expect((await api(server.url, "GET", "/v1/pool", { token: "wrong" })).status).toBe(401);
    const a = await api(server.url, "POST", "/v1/slots", { json: {} });
    expect(a.status).toBe(201);
    expect(a.body).toMatchObject({ slot_id: expect.any(String), sandbox_id: expect.any(String), workdir: expect.any(String), expires_at: expect.any(String) });
    const id = a.body.slot_id as string;
    const other = await api(server.url, "POST", `/v1/slots/${id}/exec`, { token: TOKEN_B, json: { command: "id" } });
    expect(other.status).toBe(403);
    expect((await api(server.url, "GET", `/v1/slots/${id}/files?path=x`, { token: TOKEN_B })).status).toBe(403);
    expect((await api(server.url, "DELETE", `/v1/slots/${id}`, { token: TOKEN_B })).status).toBe(403);

    // Another credential's slot never shares a sandbox (slots in one sandbox share root): B cannot
    // see what A's slot wrote, even with a free slot in A's sandbox.
    expect((await api(server.url, "PUT", `/v1/slots/${id}/files?path=secret.txt`, { raw: Buffer.from("a's secret") })).status).toBe(204);
    const b = await api(server.url, "POST", "/v1/slots", { token: TOKEN_B, json: {} });
    expect(b.status).toBe(201);
    expect(b.body.sandbox_id).not.toBe(a.body.sandbox_id);
    const peek = await api(server.url, "POST", `/v1/slots/${b.body.slot_id}/exec`, { token: TOKEN_B, json: { command: ["cat", `${a.body.workdir}/secret.txt`] } });
    expect(peek.status).toBe(200);
    expect(peek.body).toMatchObject({ stdout: "" });
    expect(peek.body.exit_code).not.toBe(0);
    const a2 = await api(server.url, "POST", "/v1/slots", { json: {} });
    expect(a2.status).toBe(201);
    expect(a2.body.sandbox_id).toBe(a.body.sandbox_id);
    const full = await api(server.url, "POST", "/v1/slots", { json: {} });
    expect(full.status).toBe(503);
    expect(full.body.error).toBe("pool_exhausted");
    expect(Number(full.headers["retry-after"])).toBeGreaterThan(0);
    expect((await api(server.url, "GET", "/v1/pool")).body).toMatchObject({ sandboxes: 2, slots_total: 4, slots_busy: 3 });

    expect((await api(server.url, "DELETE", `/v1/slots/${a2.body.slot_id}`)).status).toBe(204);
    expect((await api(server.url, "DELETE", `/v1/slots/${b.body.slot_id}`, { token: TOKEN_B })).status).toBe(204);
    expect((await api(server.url, "DELETE", `/v1/slots/${id}?reset=true`)).status).toBe(204);
    expect((await api(server.url, "POST", `/v1/slots/${id}/exec`, { json: { command: "true" } })).status).toBe(404);
  });

  test("files: a 1 MB binary round trip, 404 when absent, path traversal refused; exec output capped and streamed", async () => {
    const created = await api(server.url, "POST", "/v1/slots", { json: {} });
    const id = created.body.slot_id as string;
    try {
      const data = randomBytes(1024 * 1024);
      expect((await api(server.url, "PUT", `/v1/slots/${id}/files?path=data/blob.bin`, { raw: data })).status).toBe(204);
      const back = await api(server.url, "GET", `/v1/slots/${id}/files?path=data/blob.bin`);
      expect(back.status).toBe(200);
      expect(back.bytes.equals(data)).toBe(true);
      const sum = await api(server.url, "POST", `/v1/slots/${id}/exec`, { json: { command: ["sha256sum", "data/blob.bin"] } });
      expect(sum.body.stdout.split(" ")[0]).toBe((await import("node:crypto")).createHash("sha256").update(data).digest("hex"));
      expect((await api(server.url, "GET", `/v1/slots/${id}/files?path=nothing.txt`)).status).toBe(404);
      for (const path of ["../../../etc/passwd", "a/../../x", "..%2F..%2Fetc%2Fpasswd"]) {
        const refused = await api(server.url, "GET", `/v1/slots/${id}/files?path=${path}`);
        expect(refused.status).toBe(400);
        expect(refused.body.message).toMatch(/\.\./);
        expect((await api(server.url, "PUT", `/v1/slots/${id}/files?path=${path}`, { raw: Buffer.from("x") })).status).toBe(400);
      }

      const big = await api(server.url, "POST", `/v1/slots/${id}/exec`, { json: { command: "head -c 5000000 /dev/zero | tr '\\0' y; echo end >&2", max_output_bytes: 65536 } });
      expect(big.body).toMatchObject({ exit_code: 0, truncated: true, stderr: "end\n", timed_out: false });
      expect(big.body.stdout.length).toBeLessThan(70_000);
      const slow = await api(server.url, "POST", `/v1/slots/${id}/exec`, { json: { command: "sleep 100 & sleep 100", timeout_s: 0.5 } });
      expect(slow.body).toMatchObject({ timed_out: true });

      const streamed = await api(server.url, "POST", `/v1/slots/${id}/exec?stream=1`, { json: { command: "echo one; echo two >&2; exit 4" } });
      const lines = streamed.bytes.toString().trim().split("\n").map((l) => JSON.parse(l));
      expect(lines.filter((l) => "stdout" in l).map((l) => l.stdout).join("")).toBe("one\n");
      expect(lines.filter((l) => "stderr" in l).map((l) => l.stderr).join("")).toBe("two\n");
      expect(lines.at(-1)).toMatchObject({ exit_code: 4, truncated: false });

      const batch = await api(server.url, "POST", `/v1/slots/${id}/batch`, { json: { commands: ["echo a > f", ["cat", "f"], { command: "exit 3" }] } });
      expect(batch.body.results.map((r: { exit_code: number; stdout: string }) => [r.exit_code, r.stdout])).toEqual([[0, ""], [0, "a\n"], [3, ""]]);
      expect((await api(server.url, "POST", `/v1/slots/${id}/exec`, { json: { command: 42 } })).status).toBe(400);
    } finally {
      await api(server.url, "DELETE", `/v1/slots/${id}`);
    }
  });
});

/** A one-bug Python repo as a bare mirror and a SWE row (FAIL_TO_PASS test_mul, PASS_TO_PASS test_add) at its commit. */
async function sweFixture(root: string): Promise<{ dataset: string; mirrors: string }> {
  const work = join(root, "work");
  const git = (...args: string[]) => execFileAsync("git", ["-c", "user.name=t", "-c", "user.email=t@t", ...args], { cwd: work }).then((r) => r.stdout);
  await mkdir(join(work, "calc"), { recursive: true });
  await mkdir(join(work, "tests"));
  await writeFile(join(work, "calc", "__init__.py"), "");
  await writeFile(join(work, "calc", "ops.py"), "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a + b  # bug\n");
  await writeFile(join(work, "tests", "__init__.py"), "");
  const testAdd = "from calc.ops import add, mul\n\n\ndef test_add():\n    assert add(2, 3) == 5\n";
  await writeFile(join(work, "tests", "test_ops.py"), testAdd);
  await git("init", "--quiet");
  await git("add", "-A");
  await git("commit", "--quiet", "-m", "base");
  const base = (await git("rev-parse", "HEAD")).trim();
  await writeFile(join(work, "tests", "test_ops.py"), `${testAdd}\n\ndef test_mul():\n    assert mul(3, 4) == 12\n`);
  const testPatch = await git("diff");
  await git("checkout", "--", ".");
  const mirrors = join(root, "mirrors");
  await mkdir(mirrors);
  await execFileAsync("git", ["clone", "--quiet", "--bare", work, join(mirrors, "acme__calc.git")]);
  const row = { instance_id: "calc-1", repo: "acme/calc", base_commit: base, patch: "", test_patch: testPatch, FAIL_TO_PASS: ["tests/test_ops.py::test_mul"], PASS_TO_PASS: ["tests/test_ops.py::test_add"], problem_statement: "mul adds", version: "1" };
  const dataset = join(root, "instances.jsonl");
  await writeFile(dataset, `${JSON.stringify(row)}\n`);
  return { dataset, mirrors };
}

describe.skipIf(!run)("SWE instances through /v1/slots", () => {
  test("a slot of a dataset row verifies per test (FAIL_TO_PASS / PASS_TO_PASS) over HTTP", async () => {
    const dir = await tempDir("proctor-slots-swe-");
    const fixture = await sweFixture(dir);
    const server = await startTestServer(join(dir, "data"), {
      auth: "token",
      tokens: [TOKEN_A],
      runtime: new DockerRuntime(),
      defaultImage: "proctor/base:bookworm",
      slots: { slotsPerSandbox: 1, maxSandboxes: 1, tasksDir: fixture.dataset, reposDir: fixture.mirrors, imageTemplate: "proctor/base:bookworm", cacheDir: join(dir, "cache") },
    });
    try {
      const slot = await new SlotsClient(server.url, { token: TOKEN_A }).create({ task: "calc-1" });
      const before = await slot.verify();
      expect(before).toMatchObject({ reward: 0, resolved: false });
      expect(before.tests).toEqual([
        { name: "tests/test_ops.py::test_mul", status: "FAILED", expected: "FAIL_TO_PASS" },
        { name: "tests/test_ops.py::test_add", status: "PASSED", expected: "PASS_TO_PASS" },
      ]);
      await slot.exec("sed -i 's/return a + b  # bug/return a * b/' calc/ops.py");
      expect(await slot.verify()).toMatchObject({ reward: 1, resolved: true, error: null });
      await slot.release();
    } finally {
      await server.close();
      await rm(dir, { recursive: true, force: true });
    }
  });
});

/** A slots server in a child process (slots-test-child.ts), killed with SIGKILL by the test. */
async function spawnSlotsServer(dataDir: string): Promise<{ url: string; kill(): Promise<void> }> {
  const child = spawn(process.execPath, ["--conditions=@proctor/source", "--import", "tsx", join(import.meta.dirname, "slots-test-child.ts"), dataDir, TOKEN_A], {
    cwd: join(import.meta.dirname, ".."),
    stdio: ["ignore", "pipe", "inherit"],
  });
  const line = await new Promise<string>((resolve, reject) => {
    createInterface({ input: child.stdout }).once("line", resolve);
    child.once("exit", (code) => reject(new Error(`slots server child exited with ${code} before listening`)));
  });
  const { url } = JSON.parse(line) as { url: string };
  return {
    url,
    kill: () =>
      new Promise<void>((done) => {
        if (child.exitCode !== null || child.signalCode !== null) return done();
        child.once("exit", () => done());
        child.kill("SIGKILL");
      }),
  };
}

async function containerGone(id: string): Promise<boolean> {
  return execFileAsync("docker", ["inspect", id]).then(
    () => false,
    () => true,
  );
}

describe.skipIf(!run)("slots after a server kill -9", () => {
  test("the old server's slot sandboxes are removed; a restarted server serves new slots", async () => {
    const dir = await tempDir("proctor-slots-kill-");
    let second: Awaited<ReturnType<typeof spawnSlotsServer>> | null = null;
    const first = await spawnSlotsServer(join(dir, "data"));
    try {
      const created = await api(first.url, "POST", "/v1/slots", { json: {} });
      expect(created.status).toBe(201);
      const sandbox = created.body.sandbox_id as string;
      expect(await containerGone(sandbox)).toBe(false);
      await first.kill();
      // The owner's watchdog (or the next start's reap) removes what the dead server left.
      second = await spawnSlotsServer(join(dir, "data"));
      const deadline = Date.now() + 120_000;
      while (!(await containerGone(sandbox)) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 250));
      expect(await containerGone(sandbox)).toBe(true);
      const fresh = await api(second.url, "POST", "/v1/slots", { json: {} });
      expect(fresh.status).toBe(201);
      expect(fresh.body.sandbox_id).not.toBe(sandbox);
      expect((await api(second.url, "POST", `/v1/slots/${fresh.body.slot_id}/exec`, { json: { command: ["echo", "ok"] } })).body.stdout).toBe("ok\n");
      expect((await api(second.url, "POST", `/v1/slots/${created.body.slot_id}/exec`, { json: { command: "true" } })).status).toBe(404);
    } finally {
      await first.kill();
      await second?.kill();
      await rm(dir, { recursive: true, force: true });
    }
  });

  test("a sandbox of a dead process that lands after the start's reap is removed while serving", async () => {
    const dir = await tempDir("proctor-slots-reaper-");
    const runtime = new DockerRuntime();
    let reaps = 0;
    const reap = runtime.reap.bind(runtime);
    runtime.reap = () => {
      reaps++;
      return reap();
    };
    const server = await startTestServer(join(dir, "data"), { auth: "token", tokens: [TOKEN_A], runtime, defaultImage: "proctor/busybox:latest", reapIntervalMs: 500 });
    let late = "";
    try {
      expect(reaps).toBe(1);
      // What a create sent by a killed server and finished by a busy daemon after the restart looks like.
      const dead = `${hostname()}:999999999:${Date.now()}`;
      late = (await execFileAsync("docker", ["create", "--label", "proctor.managed=true", "--label", `proctor.owner=${dead}`, "proctor/busybox:latest", "true"])).stdout.trim();
      const deadline = Date.now() + 30_000;
      while (!(await containerGone(late)) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 250));
      expect(await containerGone(late)).toBe(true);
      expect(reaps).toBeGreaterThan(1);
    } finally {
      await server.close();
      if (late) await execFileAsync("docker", ["rm", "-f", late]).catch(() => undefined);
      await rm(dir, { recursive: true, force: true });
    }
    // Stopped with the server: no reap after close().
    const after = reaps;
    await new Promise((r) => setTimeout(r, 1200));
    expect(reaps).toBe(after);
  });
});
