import type { ChildProcess } from "node:child_process";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { dockerTestGate } from "@proctor/sandbox-docker";
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { finish, listeningUrl, repoRoot, spawnProctor } from "../test-support";

const docker = await dockerTestGate();
const TOKEN = "cli-slots-token-0123456789abcdef";
const OTHER = "cli-slots-other-0123456789abcdef";
const asUser = { PROCTOR_TOKEN: TOKEN };

describe.skipIf(!docker)("proctor slots against proctor serve --slots (Docker)", () => {
  let work: string;
  let server: ChildProcess;
  let url: string;
  // --server before the arguments: everything after `--` is the slot's command.
  const slots = ([sub, ...args]: string[], env: Record<string, string> = asUser) => finish(spawnProctor(["slots", sub as string, "--server", url, ...args], env));

  beforeAll(async () => {
    work = await mkdtemp(join(tmpdir(), "proctor-cli-slots-"));
    server = spawnProctor(
      ["serve", "--port", "0", "--data-dir", join(work, "data"), "--auth", "token", "--runtime", "docker", "--slots", "--slots-per-sandbox", "2", "--slots-max-sandboxes", "1", "--slots-acquire-timeout-s", "1", "--slots-tasks-dir", join(repoRoot, "examples/tasks")],
      { PROCTOR_TOKENS: `${TOKEN},${OTHER}` },
    );
    url = await listeningUrl(server);
  }, 120_000);

  afterAll(async () => {
    if (server && server.exitCode === null) {
      const closed = new Promise((r) => server.once("close", r));
      server.kill("SIGTERM");
      await closed;
    }
    await rm(work, { recursive: true, force: true });
  });

  test("create, exec (output and exit code), put/get, verify, pool, rm", async () => {
    const created = await slots(["create", "--task", "greeting-file"]);
    expect(created.code, created.stderr).toBe(0);
    const id = created.stdout.trim();
    expect(id).toMatch(/^\S+$/);

    const run = await slots(["exec", id, "--", "sh", "-c", "echo out; echo err >&2; exit 7"]);
    expect(run).toMatchObject({ code: 7, stdout: "out\n" });
    expect(run.stderr).toContain("err\n");
    const shell = await slots(["exec", id, "--shell", "printf 'Hello, Proctor!\\n' > greeting.txt && mkdir -p archive && cp greeting.txt archive/"]);
    expect(shell.code, shell.stderr).toBe(0);
    expect((await slots(["exec", id, "--timeout", "0.5", "--", "sleep", "100"])).code).toBe(124);

    const local = join(work, "mode.txt");
    await writeFile(local, Buffer.from([0, 1, 2, 255]));
    expect((await slots(["put", id, local, "bin/data"])).code).toBe(0);
    const back = join(work, "back.bin");
    expect((await slots(["get", id, "bin/data", back])).code).toBe(0);
    expect([...(await readFile(back))]).toEqual([0, 1, 2, 255]);
    expect((await slots(["get", id, "greeting.txt"])).stdout).toBe("Hello, Proctor!\n");
    const absent = await slots(["get", id, "nothing.txt"]);
    expect(absent.code).toBe(1);
    expect(absent.stderr).toContain("has no file nothing.txt");

    const failing = await slots(["verify", id]);
    expect(failing.code, failing.stderr).toBe(0);
    expect(failing.stdout).toContain("reward 0: not resolved");
    expect((await slots(["exec", id, "--", "chmod", "600", "archive/greeting.txt"])).code).toBe(0);
    const passing = await slots(["verify", id, "--json"]);
    expect(JSON.parse(passing.stdout)).toMatchObject({ reward: 1, resolved: true, tests: null });

    const pool = await slots(["pool"]);
    expect(pool.stdout).toMatch(/sandboxes\s+slots\s+busy\s+waiting\s+quarantined\n.*\n1\s+2\s+1\s+0\s+0/);

    expect((await slots(["rm", id])).code).toBe(0);
    const gone = await slots(["exec", id, "--", "true"]);
    expect(gone.code).toBe(1);
    // A deleted slot says so once: the server's "no slot ID", then what happened and what to do.
    expect(gone.stderr).toContain(`404 no slot ${id}; it was released, or the server at ${url} restarted: create one with proctor slots create`);
    expect(gone.stderr.match(/no slot/g)).toHaveLength(1);
  }, 300_000);

  test("clear errors: bad token 401, another credential 403, exhausted pool 503, expired 410, bad --repo, no credentials; the token is never printed", async () => {
    const bad = await slots(["pool"], { PROCTOR_TOKEN: "wrong-token-value-123" });
    expect(bad.code).toBe(1);
    expect(bad.stderr).toContain(`the server ${url} did not accept the credentials`);
    expect(bad.stderr).not.toContain("wrong-token-value-123");

    const a = await slots(["create"]);
    const b = await slots(["create"]);
    expect([a.code, b.code]).toEqual([0, 0]);
    const full = await slots(["create"]);
    expect(full.code).toBe(1);
    expect(full.stderr).toMatch(/503[\s\S]*every slot on .* is busy; retry in \d+ s/);
    const theirs = await slots(["exec", a.stdout.trim(), "--", "true"], { PROCTOR_TOKEN: OTHER });
    expect(theirs.code).toBe(1);
    expect(theirs.stderr).toContain("belongs to another credential: use the credentials that created it");
    for (const r of [a, b]) expect((await slots(["rm", r.stdout.trim(), "--no-reset"])).code).toBe(0);
    // A slot past its ttl is reclaimed: 410, and what to do.
    const short = await slots(["create", "--ttl", "1"]);
    expect(short.code, short.stderr).toBe(0);
    let expired = await slots(["exec", short.stdout.trim(), "--", "true"]);
    for (let i = 0; i < 60 && expired.code === 0; i++) expired = await slots(["exec", short.stdout.trim(), "--", "true"]);
    expect(expired.code).toBe(1);
    expect(expired.stderr).toMatch(/410[\s\S]*is gone \(expired, or its sandbox stopped\): create a new one/);

    const repo = await slots(["create", "--repo", "nocommit"]);
    expect(repo.code).toBe(2);
    expect(repo.stderr).toContain("--repo must be NAME@COMMIT");
    const none = await finish(spawnProctor(["slots", "pool", "--server", url], { PROCTOR_TOKEN: "", PROCTOR_TOKENS: "", PROCTOR_HOTKEY_URI: "", PROCTOR_HOTKEY_FILE: "" }));
    expect(none.code).toBe(2);
    expect(none.stderr).toContain("no credentials");
    const down = await finish(spawnProctor(["slots", "pool", "--server", "http://127.0.0.1:9"], asUser));
    expect(down.code).toBe(1);
    expect(down.stderr).toContain("cannot reach the server at http://127.0.0.1:9");
    for (const r of [bad, full, theirs, expired, repo, none, down]) expect(r.stderr).not.toContain(TOKEN);
  }, 300_000);
});
