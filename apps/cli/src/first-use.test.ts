import { afterAll, beforeAll, describe, expect, test } from "vitest";
import type { ChildProcess } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { createServer, type Server } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startRedisServer } from "@proctor/queue";
import { finish, listeningUrl, proctor, repoRoot, spawnProctor, type Finished } from "./test-support";

// Mistakes a newcomer makes in the first hour. Each is answered with one line naming what was
// wrong and what to do, a non-zero exit, no stack trace, and no hang.

const examples = join(repoRoot, "examples/tasks");
const TOKEN = "first-use-token-0123456789abcdef";

let work: string;
beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), "proctor-first-use-"));
});
afterAll(() => rm(work, { recursive: true, force: true }));

/** A port nothing listens on (bound, then released). */
async function refusedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((done) => server.listen(0, "127.0.0.1", done));
  const { port } = server.address() as { port: number };
  await new Promise((done) => server.close(done));
  return port;
}

/** A port something else holds until `release`. */
async function busyPort(): Promise<{ port: number; server: Server }> {
  const server = createServer();
  await new Promise<void>((done) => server.listen(0, "127.0.0.1", done));
  return { port: (server.address() as { port: number }).port, server };
}

/** Exactly one `proctor:` line on stderr, no stack trace, the given exit code. */
function expectOneLine(r: Finished, code: number, ...mentions: (string | RegExp)[]): void {
  expect(r.code, r.stderr).toBe(code);
  const lines = r.stderr.split("\n").filter((l) => l.startsWith("proctor:"));
  expect(lines, r.stderr).toHaveLength(1);
  expect(r.stderr).not.toMatch(/^\s+at /m);
  expect(r.stderr).not.toContain("unexpected error");
  for (const m of mentions) expect(lines[0]).toMatch(m);
}

/** Kill the child if it is still running after `ms` (a hang guard: the assertion then fails on its exit code). */
function guard(child: ChildProcess, ms: number): Promise<Finished> {
  const timer = setTimeout(() => child.kill("SIGKILL"), ms);
  return finish(child).finally(() => clearTimeout(timer));
}

describe("model endpoint mistakes", () => {
  test("--agent llm with a --base-url nothing listens on stops the run: exit 4, the URL named, no trial counted as the agent's", async () => {
    const baseUrl = `http://127.0.0.1:${await refusedPort()}/v1`;
    const r = await guard(spawnProctor(["run", examples, "-i", "greeting-file", "--runtime", "local", "-o", work, "--run-id", "unreachable", "--agent", "llm", "--model", "m", "--base-url", baseUrl]), 120_000);
    expectOneLine(r, 4, baseUrl, /cannot be reached \(ECONNREFUSED/, /Check --base-url/);
    const summary = JSON.parse(await readFile(join(work, "unreachable", "summary.json"), "utf8"));
    expect(summary.status).toBe("failed");
    expect(summary.error).toContain(baseUrl);
  });

  test("--api-key-env naming an unset variable: exit 2 naming it, before any trial", async () => {
    const r = await proctor(["run", examples, "--runtime", "local", "-o", work, "--run-id", "no-key", "--agent", "llm", "--model", "m", "--api-key-env", "PROCTOR_TEST_UNSET_KEY"], { env: { PROCTOR_TEST_UNSET_KEY: "" } });
    expectOneLine(r, 2, "$PROCTOR_TEST_UNSET_KEY is not set");
    expect(existsSync(join(work, "no-key", "results.jsonl"))).toBe(false);
  });
});

describe("server mistakes, on the client side", () => {
  test("submit of a missing file or of a directory: exit 2, one line saying what to give", async () => {
    const missing = await proctor(["submit", join(work, "nope.tar.gz"), "--server", "http://127.0.0.1:9", "--token", TOKEN]);
    expectOneLine(missing, 2, "no such file", "give the archive to submit");
    const dir = await proctor(["submit", examples, "--server", "http://127.0.0.1:9", "--token", TOKEN]);
    expectOneLine(dir, 2, "is a directory", "tar czf submission.tar.gz");
  });

  test("status, submit and follow against a server that is down: exit 1, one line naming the server", async () => {
    const server = `http://127.0.0.1:${await refusedPort()}`;
    for (const args of [["status", "b1"], ["follow", "b1"], ["submit", join(repoRoot, "examples/submission.tar.gz")]]) {
      const r = await guard(spawnProctor([...args, "--server", server, "--token", TOKEN]), 60_000);
      expectOneLine(r, 1, `cannot reach the server at ${server} (ECONNREFUSED)`, "is proctor serve running there?");
    }
  });
});

describe("proctor serve and proctor view mistakes", () => {
  test("serve on a busy port, --data-dir naming a file, --auth none on 0.0.0.0: exit 2, one line naming the flag", async () => {
    const held = await busyPort();
    try {
      const base = ["serve", "--runtime", "local", "--unsafe-local-runtime", "--auth", "none"];
      const busy = await guard(spawnProctor([...base, "--port", String(held.port), "--data-dir", join(work, "data-busy")]), 60_000);
      expectOneLine(busy, 2, `cannot listen on 127.0.0.1:${held.port} (EADDRINUSE)`, "--port");
      const file = join(work, "a-file");
      await writeFile(file, "x");
      const notDir = await guard(spawnProctor([...base, "--port", "0", "--data-dir", file]), 60_000);
      expectOneLine(notDir, 2, `--data-dir ${file} is not a directory`);
      const open = await guard(spawnProctor([...base, "--host", "0.0.0.0", "--port", "0", "--data-dir", join(work, "data-open")]), 60_000);
      expectOneLine(open, 2, "pass --insecure");
    } finally {
      held.server.close();
    }
    const help = await proctor(["serve", "--help"]);
    expect(help.stdout).toContain("PROCTOR_TOKENS");
  });

  test("view on a busy port exits 2 instead of hanging; view of a missing directory says so", async () => {
    const held = await busyPort();
    try {
      const busy = await guard(spawnProctor(["view", examples, "--port", String(held.port)]), 60_000);
      expectOneLine(busy, 2, `cannot listen on 127.0.0.1:${held.port}`);
    } finally {
      held.server.close();
    }
    const missing = await guard(spawnProctor(["view", join(work, "no-runs"), "--port", "0"]), 60_000);
    expectOneLine(missing, 2, "no-runs: no such directory");
  });

  test("run --queue with no Redis answering: exit 3 naming the URL and how to start it; nothing queued", async () => {
    const url = `redis://127.0.0.1:${await refusedPort()}/0`;
    const r = await guard(spawnProctor(["run", examples, "--runtime", "local", "-o", work, "--run-id", "no-redis", "--queue", url]), 60_000);
    expectOneLine(r, 3, `Redis at ${url} does not answer (connect ECONNREFUSED`, "redis-server --port");
    expect(existsSync(join(work, "no-redis"))).toBe(false);
  });

  test("a server's 401 and 404 are printed once, on one line with what to do", async () => {
    const server = spawnProctor(["serve", "--port", "0", "--auth", "token", "--runtime", "local", "--unsafe-local-runtime", "--data-dir", join(work, "data-401")], { PROCTOR_TOKENS: TOKEN });
    try {
      const url = await listeningUrl(server);
      const denied = await proctor(["status", "b1", "--server", url, "--token", "not-the-token-0123456789"]);
      expectOneLine(denied, 1, /401 /, "pass --token TOKEN");
      const unknown = await proctor(["status", "b1", "--server", url, "--token", TOKEN]);
      expectOneLine(unknown, 1, /404 no batch with id "b1"/);
      const noSlots = await proctor(["slots", "pool", "--server", url, "--token", TOKEN]);
      expectOneLine(noSlots, 1, /404 .*; .* does not serve the slots API: start it with proctor serve --slots/);
    } finally {
      server.kill("SIGKILL");
    }
  });
});

describe("saying what runs and what failed", () => {
  test("the run's first line names the agent and why: an archive's agent_code/ when --agent is not given", async () => {
    const r = await proctor(["run", join(repoRoot, "examples/submission.tar.gz"), "--runtime", "local", "-o", work, "--run-id", "archive-agent", "-i", "greeting-file"]);
    expect(r.code, r.stderr).toBe(0);
    const first = r.stderr.split("\n")[0] ?? "";
    expect(first).toMatch(/^agent: code agent \S+agent_code \(the archive's agent_code\/, because no --agent was given; --agent oracle runs the reference solutions instead\)$/);
    const oracle = await proctor(["run", examples, "--runtime", "local", "-o", work, "--run-id", "default-agent", "-i", "greeting-file"]);
    expect(oracle.stderr.split("\n")[0]).toMatch(/^agent: oracle \(each task's reference solution\) \(no --agent given/);
  });

  test("tasks validate names the failing line of a task whose tests write a reward, and keeps the logs it names", async () => {
    const task = join(work, "validate", "broken");
    await mkdir(join(task, "tests"), { recursive: true });
    await mkdir(join(task, "solution"), { recursive: true });
    await writeFile(join(task, "instruction.md"), "Write x.txt holding expected.\n");
    await writeFile(
      join(task, "tests", "test.sh"),
      'cd "${PROCTOR_WORKDIR:-/app}"\nreward="${PROCTOR_LOGS_DIR:-/logs}/verifier/reward.txt"\necho "checking x.txt"\nif [ "$(cat x.txt)" = expected ]; then echo 1 > "$reward"; else echo "FAIL: x.txt holds $(cat x.txt), expected expected"; echo 0 > "$reward"; fi\n',
    );
    await writeFile(join(task, "solution", "solve.sh"), 'cd "${PROCTOR_WORKDIR:-/app}"\necho wrong > x.txt\n');
    const r = await proctor(["tasks", "validate", join(work, "validate"), "--runtime", "local"]);
    expect(r.code, r.stderr).toBe(1);
    expect(r.stdout).toContain("oracle reward 0, expected 1; first failure: FAIL: x.txt holds wrong, expected expected");
    const kept = /run directories kept in (\S+)/.exec(r.stderr)?.[1];
    expect(kept, r.stderr).toBeDefined();
    const log = /verifier log (\S+test-stdout\.txt)/.exec(r.stderr)?.[1] ?? "";
    expect(existsSync(log), log).toBe(true);
    await rm(kept ?? "", { recursive: true, force: true });
  });

  test("tasks validate: a valid task names no log it then deletes; bash stopping on test.sh is quoted from its stderr, whole; CRLF line endings are named", async () => {
    const valid = await proctor(["tasks", "validate", examples, "-i", "greeting-file", "--runtime", "local"]);
    expect(valid.code, valid.stderr).toBe(0);
    expect(valid.stderr).not.toMatch(/verifier log|run directories kept/);

    const broken = join(work, "validate-bash");
    const testSh = (body: string) => `#!/bin/bash\nreward="\${PROCTOR_LOGS_DIR:-/logs}/verifier/reward.txt"\n${body}\n`;
    for (const [id, test] of [["unclosed-if", testSh('if [ -f x ]; then\n  echo "x is there"\necho 1 > "$reward"')], ["crlf", testSh('mkdir -p "$(dirname "$reward")"\necho 1 > "$reward"').replaceAll("\n", "\r\n")]] as const) {
      await mkdir(join(broken, id, "tests"), { recursive: true });
      await mkdir(join(broken, id, "solution"), { recursive: true });
      await writeFile(join(broken, id, "instruction.md"), "Anything.\n");
      await writeFile(join(broken, id, "solution", "solve.sh"), "true\n");
      await writeFile(join(broken, id, "tests", "test.sh"), test);
    }
    const crlf = await proctor(["tasks", "validate", broken, "--runtime", "local"]);
    expect(crlf.code, crlf.stderr).toBe(2);
    expect(crlf.stderr).toContain(`${join(broken, "crlf")}: CRLF line endings in tests/test.sh: `);
    await rm(join(broken, "crlf"), { recursive: true, force: true });

    const r = await proctor(["tasks", "validate", broken, "--runtime", "local"]);
    expect(r.code, r.stderr).toBe(1);
    expect(r.stdout).toMatch(/^ {4}oracle error \(verifier: the verifier wrote no reward \(exit 2; test-stderr\.txt: "\S+\/test\.sh: line \d+: syntax error: unexpected end of file"\): neither .* to reward\.json\)$/m);
    const log = /verifier log (\S+)/.exec(r.stderr)?.[1] ?? "";
    expect(log, r.stderr).toMatch(/test-stderr\.txt$/);
    expect(existsSync(log), log).toBe(true);
    await rm(/run directories kept in (\S+)/.exec(r.stderr)?.[1] ?? "", { recursive: true, force: true });
  });
});

describe("a queued run whose Redis goes away", () => {
  test("says so once and still stops on SIGTERM: exit 130, resumable", async () => {
    const redis = await startRedisServer();
    let stopped = false;
    try {
      const child = spawnProctor(["run", examples, "--runtime", "local", "-o", work, "--run-id", "redis-gone", "--queue", redis.url]);
      const done = guard(child, 120_000);
      let stderr = "";
      const waits: { pattern: RegExp; resolve: () => void }[] = [];
      child.stderr?.on("data", (c: Buffer) => {
        stderr += c.toString();
        for (const w of waits) if (w.pattern.test(stderr)) w.resolve();
      });
      const seen = (pattern: RegExp) => new Promise<void>((resolve) => (pattern.test(stderr) ? resolve() : waits.push({ pattern, resolve })));
      // No worker: the run waits on Redis, then Redis stops under it.
      await seen(/waiting for workers/);
      await redis.stop();
      stopped = true;
      await seen(/is unreachable/);
      child.kill("SIGTERM");
      const r = await done;
      expect(r.code, `${r.stderr}\n${r.stdout}`).toBe(130);
      expect(r.stderr.match(/Redis at \S+ is unreachable/g), r.stderr).toHaveLength(1);
      expect(r.stderr).toContain("proctor run --resume");
    } finally {
      if (!stopped) await redis.stop();
    }
  });
});
