import type { ChildProcess } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, readFileSync } from "node:fs";
import { chmod, mkdir, mkdtemp, readdir, rm, writeFile } from "node:fs/promises";
import { hostname, tmpdir } from "node:os";
import { join } from "node:path";
import { BundleCache, DirBundleStore, packBundle, startRedisServer, type RedisServerHandle } from "@proctor/queue";
import { afterAll, afterEach, beforeAll, describe, expect, test } from "vitest";
import { finish, helloSubmission, proctor, repoRoot, spawnProctor, type Finished } from "./test-support";

let root: string;
const children: ChildProcess[] = [];
const servers: RedisServerHandle[] = [];

beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), "proctor-cli-queue-"));
});
afterEach(async () => {
  for (const child of children.splice(0)) if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
  for (const server of servers.splice(0)) await server.stop();
});
afterAll(async () => {
  await rm(root, { recursive: true, force: true });
});

async function redis(appendOnly = false): Promise<RedisServerHandle> {
  const server = await startRedisServer({ appendOnly });
  servers.push(server);
  return server;
}

/** A worker process; `exited` resolves with its output when it ends. */
function worker(url: string, name: string, extra: string[] = [], env: Record<string, string> = {}): { child: ChildProcess; exited: Promise<Finished>; stderr: () => string } {
  const child = spawnProctor(["worker", "--queue", url, "--runtime", "local", "--name", name, "--work-dir", join(root, `work-${name}`), ...extra], { PROCTOR_WORKER_LOCK_MS: "3000", ...env });
  children.push(child);
  let text = "";
  const exited = finish(child, (s) => (text = s));
  return { child, exited, stderr: () => text };
}

function queuedRun(url: string, source: string, out: string, extra: string[] = []): { child: ChildProcess; done: Promise<Finished>; stderr: () => string } {
  const child = spawnProctor(["run", source, "--queue", url, "--runtime", "local", "-o", out, "--run-id", "r", ...extra]);
  children.push(child);
  let text = "";
  const done = finish(child, (s) => (text = s));
  return { child, done, stderr: () => text };
}

async function until(what: string, check: () => boolean | Promise<boolean>, timeoutMs = 240_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

const lines = (path: string) => (existsSync(path) ? readFileSync(path, "utf8").split("\n").filter((l) => l.trim() !== "") : []);
const results = (runDir: string) => lines(join(runDir, "results.jsonl")).map((l) => JSON.parse(l) as { trialId: string; status: string; reward: number | null; error: { message: string } | null });
/** Trials whose agent phase started, from the run's events. */
const agentsStarted = (runDir: string) =>
  new Set(
    lines(join(runDir, "events.jsonl"))
      .map((l) => JSON.parse(l) as { type: string; trialId?: string; data?: { phase?: string; status?: string } })
      .filter((e) => e.type === "trial_phase" && e.data?.phase === "agent" && e.data.status === "started")
      .map((e) => e.trialId),
  );

/** Tasks whose solution waits until `gate` exists, so a test decides when trials may finish. */
async function gatedTasks(dir: string, count: number, gate: string): Promise<string> {
  for (let i = 1; i <= count; i++) {
    const task = join(dir, `gated-${i}`);
    await mkdir(join(task, "tests"), { recursive: true });
    await mkdir(join(task, "solution"), { recursive: true });
    await writeFile(join(task, "task.toml"), "[agent]\ntimeout_sec = 600\n[verifier]\ntimeout_sec = 60\n");
    await writeFile(join(task, "instruction.md"), "Write done to out.txt once the gate opens.\n");
    await writeFile(join(task, "solution", "solve.sh"), `#!/bin/bash\nwhile [ ! -e '${gate}' ]; do sleep 0.2; done\ncd "$PROCTOR_WORKDIR" && echo done > out.txt\n`);
    await writeFile(join(task, "tests", "test.sh"), '#!/bin/bash\nmkdir -p "$PROCTOR_LOGS_DIR/verifier"\nif grep -q done "$PROCTOR_WORKDIR/out.txt"; then echo 1; else echo 0; fi > "$PROCTOR_LOGS_DIR/verifier/reward.txt"\n');
    await chmod(join(task, "solution", "solve.sh"), 0o755);
    await chmod(join(task, "tests", "test.sh"), 0o755);
  }
  return dir;
}

const trialIds = (rs: { trialId: string }[]) => rs.map((r) => r.trialId).sort();

describe("proctor run --queue with proctor worker processes", () => {
  test("with no worker running, the run says it waits for workers instead of hanging silently", async () => {
    const server = await redis();
    const run = queuedRun(server.url, join(repoRoot, "examples/tasks"), join(root, "runs-wait"), ["-i", "greeting-file"]);
    await until("the waiting notice", () => run.stderr().includes("waiting for workers"));
    expect(run.stderr()).toMatch(/waiting for workers: 1 trial\(s\) queued on redis:\/\/127\.0\.0\.1:\d+\/0, no worker alive/);
    expect(run.stderr()).toContain("proctor worker --queue");
    run.child.kill("SIGINT");
    expect((await run.done).code).toBe(130);
  });

  test("two workers run a run whose results equal a local run's", async () => {
    const server = await redis();
    const a = worker(server.url, "a", ["-n", "2"]);
    const b = worker(server.url, "b", ["-n", "2"]);
    const local = await proctor(["run", "examples/tasks", "--runtime", "local", "-k", "2", "-o", join(root, "runs-local"), "--run-id", "r"]);
    expect(local.code).toBe(0);
    const queued = await queuedRun(server.url, join(repoRoot, "examples/tasks"), join(root, "runs-queued"), ["-k", "2"]).done;
    expect(queued.code, queued.stderr).toBe(0);
    // Nothing shared but Redis and the network: the run served its bundles over HTTP, with a token the jobs carry.
    expect(queued.stderr).toMatch(/queue: trials go to workers on .* \(runtime local, bundles served at http:\/\/[\d.]+:\d+\)/);
    expect(queued.stderr).not.toMatch(/[0-9a-f]{64}/);
    const mine = results(join(root, "runs-queued", "r"));
    const theirs = results(join(root, "runs-local", "r"));
    const view = (rs: typeof mine) => Object.fromEntries(rs.map((r) => [r.trialId, [r.status, r.reward]]));
    expect(view(mine)).toEqual(view(theirs));
    expect(mine).toHaveLength(8);
    for (const r of mine) expect(existsSync(join(root, "runs-queued", "r", "trials", r.trialId, "verifier"))).toBe(true);
    a.child.kill("SIGTERM");
    b.child.kill("SIGTERM");
    const [aOut, bOut] = [await a.exited, await b.exited];
    expect(aOut.code).toBe(0);
    expect(bOut.code).toBe(0);
    // Each result names the worker that ran it; each worker printed a line per trial started and finished.
    const ranBy = new Map<string, string>();
    for (const r of results(join(root, "runs-queued", "r")) as { trialId: string; status: string; worker?: { name: string; host: string } }[]) {
      expect(r.worker?.host).toBe(hostname());
      expect(["a", "b"]).toContain(r.worker?.name);
      ranBy.set(r.trialId, r.worker?.name ?? "");
      const stored = JSON.parse(readFileSync(join(root, "runs-queued", "r", "trials", r.trialId, "result.json"), "utf8")) as { worker?: unknown };
      expect(stored.worker).toEqual(r.worker);
      const log = (r.worker?.name === "a" ? aOut : bOut).stderr;
      const id = r.trialId.replace(/[.]/g, "\\.");
      expect(log).toMatch(new RegExp(`^trial=${id} run=r worker=${r.worker?.name} task=\\S+ status=started retry=0$`, "m"));
      expect(log).toMatch(new RegExp(`^trial=${id} run=r worker=${r.worker?.name} task=\\S+ status=${r.status} reward=\\S+ duration=\\d+\\.\\ds`, "m"));
    }
    expect(ranBy.size).toBe(8);
  });

  test("kill -9 of a worker mid-run: its trials run elsewhere, each recorded exactly once, all finish", async () => {
    const server = await redis();
    const gate = join(root, "gate-kill");
    const tasks = await gatedTasks(join(root, "tasks-kill"), 4, gate);
    const runDir = join(root, "runs-kill", "r");
    const doomed = worker(server.url, "doomed", ["-n", "2"]);
    const run = queuedRun(server.url, tasks, join(root, "runs-kill"), ["-a", "oracle"]);
    await until("two trials running on the doomed worker", () => agentsStarted(runDir).size === 2);
    doomed.child.kill("SIGKILL");
    await doomed.exited;
    const survivor = worker(server.url, "survivor", ["-n", "4"]);
    await until("the survivor took the other trials", () => agentsStarted(runDir).size === 4);
    await writeFile(gate, "");
    const done = await run.done;
    expect(done.code, done.stderr).toBe(0);
    const recorded = results(runDir);
    expect(trialIds(recorded)).toEqual(["gated-1__1", "gated-2__1", "gated-3__1", "gated-4__1"]);
    expect(recorded.map((r) => r.status)).toEqual(["passed", "passed", "passed", "passed"]);
    survivor.child.kill("SIGTERM");
    expect((await survivor.exited).code).toBe(0);
  });

  test("SIGTERM drains: the running trial finishes, no new one starts, then the worker exits", async () => {
    const server = await redis();
    const gate = join(root, "gate-drain");
    const tasks = await gatedTasks(join(root, "tasks-drain"), 2, gate);
    const runDir = join(root, "runs-drain", "r");
    const draining = worker(server.url, "draining", ["-n", "1"]);
    const run = queuedRun(server.url, tasks, join(root, "runs-drain"), ["-a", "oracle"]);
    await until("one trial running", () => agentsStarted(runDir).size === 1);
    draining.child.kill("SIGTERM");
    await until("the worker says it drains", () => draining.stderr().includes("draining"));
    expect(draining.child.exitCode).toBeNull(); // still running its trial
    await writeFile(gate, "");
    const exit = await draining.exited;
    expect(exit.code, exit.stderr).toBe(0);
    await until("the drained trial is recorded", () => results(runDir).length === 1);
    expect(results(runDir).map((r) => r.status)).toEqual(["passed"]); // finished, and took nothing more
    expect(agentsStarted(runDir).size).toBe(1);
    const next = worker(server.url, "next", ["-n", "1"]);
    const done = await run.done;
    expect(done.code, done.stderr).toBe(0);
    expect(trialIds(results(runDir))).toEqual(["gated-1__1", "gated-2__1"]);
    next.child.kill("SIGTERM");
    await next.exited;
  });

  test("a Redis restart mid-run: the run completes with every trial once", async () => {
    const server = await redis(true);
    const gate = join(root, "gate-restart");
    const tasks = await gatedTasks(join(root, "tasks-restart"), 3, gate);
    const runDir = join(root, "runs-restart", "r");
    const w = worker(server.url, "steady", ["-n", "2"]);
    const run = queuedRun(server.url, tasks, join(root, "runs-restart"), ["-a", "oracle"]);
    await until("two trials running", () => agentsStarted(runDir).size === 2);
    // Down until both sides said so clearly, then back with its AOF.
    await server.restart({
      whileDown: () => until("both sides to say Redis is gone", () => [run.stderr(), w.stderr()].every((t) => /Redis at redis:\/\/127\.0\.0\.1:\d+\/0 is unreachable/.test(t))),
    });
    await writeFile(gate, "");
    const done = await run.done;
    expect(done.code, done.stderr).toBe(0);
    expect(trialIds(results(runDir))).toEqual(["gated-1__1", "gated-2__1", "gated-3__1"]);
    expect(results(runDir).every((r) => r.status === "passed")).toBe(true);
    w.child.kill("SIGTERM");
    expect((await w.exited).code).toBe(0);
  });

  test("--bundles-dir with --bundles-host, or a host that is not this machine's: one line, exit 2, no run directory", async () => {
    const server = await redis();
    const both = await proctor(["run", "examples/tasks", "--queue", server.url, "--runtime", "local", "-o", join(root, "runs-bad-bundles"), "--bundles-dir", join(root, "b"), "--bundles-host", "127.0.0.1"]);
    expect(both.code, both.stderr).toBe(2);
    expect(both.stderr).toContain("proctor: --bundles-dir and --bundles-host: give one");
    const foreign = await proctor(["run", "examples/tasks", "--queue", server.url, "--runtime", "local", "-o", join(root, "runs-bad-bundles"), "--bundles-host", "192.0.2.1"]);
    expect(foreign.code, foreign.stderr).toBe(2);
    expect(foreign.stderr).toContain("proctor: --bundles-host 192.0.2.1: cannot serve the task bundles there (EADDRNOTAVAIL)");
    expect(existsSync(join(root, "runs-bad-bundles"))).toBe(false);
  });

  test("a tampered bundle in the shared directory is refused: the trial is an infra error naming it, nothing runs", async () => {
    const server = await redis();
    const bundles = join(root, "bundles-tamper");
    const source = join(repoRoot, "examples/tasks/greeting-file");
    const run = queuedRun(server.url, source, join(root, "runs-tamper"), ["--bundles-dir", bundles]);
    await until("the bundle is published", async () => existsSync(bundles) && (await readdir(bundles)).some((f) => f.endsWith(".tar.gz")));
    const [file] = (await readdir(bundles)).filter((f) => f.endsWith(".tar.gz"));
    // Swap in other content under the same name (what a tampered share would hold).
    const other = await packBundle([join(repoRoot, "examples/tasks/word-frequency")]);
    await writeFile(join(bundles, file as string), other.bytes);
    const w = worker(server.url, "victim", ["-n", "1"]);
    const done = await run.done;
    expect(done.code, done.stderr).toBe(0);
    const [result] = results(join(root, "runs-tamper", "r"));
    expect(result?.status).toBe("error");
    expect(result?.error?.message).toMatch(/refused: its content hashes to/);
    expect(agentsStarted(join(root, "runs-tamper", "r")).size).toBe(0);
    w.child.kill("SIGTERM");
    await w.exited;
  });
});

describe("proctor serve --queue", () => {
  test("a submitted batch runs on a worker; GET /v1/bundles/:sha needs the worker token: a wrong one gets 401 and no bundle, the right one bytes matching the sha", async () => {
    const server = await redis();
    const dataDir = join(root, "serve-data");
    const token = "worker-token-0123456789abcdef";
    const bundle = await packBundle([join(repoRoot, "examples/tasks/greeting-file")]);
    await new DirBundleStore(join(dataDir, "bundles")).put(bundle);
    const userToken = "user-token-0123456789abcdef";
    const serve = spawnProctor(
      ["serve", "--queue", server.url, "--runtime", "local", "--unsafe-local-runtime", "--no-isolate-verifier", "--allow-local-repos", "--auth", "token", "--port", "0", "--data-dir", dataDir],
      { PROCTOR_WORKER_TOKEN: token, PROCTOR_TOKENS: userToken },
    );
    children.push(serve);
    let text = "";
    const ended = finish(serve, (s) => (text = s));
    await until("the server listens", () => /listening on http:\/\/[^\s]+/.test(text));
    const base = /listening on (http:\/\/[^\s]+)/.exec(text)?.[1] as string;
    expect(text).toContain("trials go to workers");

    const wrong = await fetch(`${base}/v1/bundles/${bundle.sha256}`, { headers: { authorization: "Bearer not-the-token" } });
    expect(wrong.status).toBe(401);
    const body = (await wrong.json()) as { error: string; message: string };
    expect(body.error).toBe("unauthorized");
    expect(JSON.stringify(body)).not.toContain(token);
    expect((await fetch(`${base}/v1/bundles/${bundle.sha256}`)).status).toBe(401);
    const cache = new BundleCache(join(root, "serve-cache"), { token: "not-the-token" });
    await expect(cache.materialize({ sha256: bundle.sha256, source: { kind: "http", baseUrl: base } })).rejects.toThrow(/refused this worker's token \(401\)/);
    expect(existsSync(join(root, "serve-cache", bundle.sha256))).toBe(false);

    const right = await fetch(`${base}/v1/bundles/${bundle.sha256}`, { headers: { authorization: `Bearer ${token}` } });
    expect(right.status).toBe(200);
    expect(createHash("sha256").update(Buffer.from(await right.arrayBuffer())).digest("hex")).toBe(bundle.sha256);
    const good = new BundleCache(join(root, "serve-cache-ok"), { token });
    expect(existsSync(join(await good.materialize({ sha256: bundle.sha256, source: { kind: "http", baseUrl: base } }), "p0", "task.toml"))).toBe(true);

    // A worker with a wrong token: the trial becomes an infra error naming the 401, nothing runs.
    const archive = await helloSubmission(await mkdtemp(join(root, "hello-")));
    const impostor = worker(server.url, "impostor", ["-n", "1"], { PROCTOR_WORKER_TOKEN: "wrong-token-0123456789abcdef" });
    const refused = await proctor(["submit", archive, "--server", base, "--token", userToken]);
    expect(refused.code, refused.stderr).toBe(0);
    expect(refused.stdout).toMatch(/infra: the queue gave up on this trial: the server at http:\/\/127\.0\.0\.1:\d+ refused this worker's token \(401\)/);
    expect(`${refused.stdout}${refused.stderr}${impostor.stderr()}`).not.toContain(token);
    impostor.child.kill("SIGTERM");
    expect((await impostor.exited).code).toBe(0);

    const w = worker(server.url, "listed", ["-n", "3"], { PROCTOR_WORKER_TOKEN: token });
    await until("the worker is listed", async () => {
      const res = await fetch(`${base}/v1/workers`, { headers: { authorization: `Bearer ${token}` } });
      const json = (await res.json()) as { workers: { name: string }[] };
      return json.workers.some((x) => x.name === "listed");
    });
    const listed = (await (await fetch(`${base}/v1/workers`, { headers: { authorization: `Bearer ${token}` } })).json()) as { workers: Record<string, unknown>[] };
    expect(listed.workers[0]).toMatchObject({ name: "listed", capacity: 3, running_trials: [], runtime: "local" });
    // A batch (term-executor archive, repo on this disk) runs on the worker, not in the server.
    const submitted = await proctor(["submit", archive, "--server", base, "--token", userToken]);
    expect(submitted.code, submitted.stderr).toBe(0);
    expect(submitted.stdout).toMatch(/1\/1 passed/);
    const after = (await (await fetch(`${base}/v1/workers`, { headers: { authorization: `Bearer ${token}` } })).json()) as { workers: { finished_trials: number }[] };
    expect(after.workers[0]?.finished_trials).toBe(1);
    const metrics = await (await fetch(`${base}/metrics`, { headers: { authorization: `Bearer ${userToken}` } })).text();
    expect(metrics).toMatch(/proctor_queue_waiting_jobs \d+/);
    expect(metrics).toMatch(/proctor_worker_capacity\{worker="listed"\} 3/);
    w.child.kill("SIGTERM");
    await w.exited;
    serve.kill("SIGTERM");
    await ended;
  });
});
