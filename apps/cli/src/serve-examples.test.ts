import { afterAll, beforeAll, expect, test } from "vitest";
import { execFileSync } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { listeningUrl, proctor, repoRoot, spawnProctor } from "./test-support";

// The ready archive of the examples (Harbor task directories beside agent_code/) is what a new
// user submits first: the server must take it, and say what it does, a line per batch and trial.

const TOKEN = "serve-examples-token-0123456789ab";
let work: string;
beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), "proctor-serve-examples-"));
});
afterAll(() => rm(work, { recursive: true, force: true }));

test("examples/submission.tar.gz is the examples as they are now (node tools/examples/pack-submission.mjs --check)", () => {
  const out = execFileSync(process.execPath, [join(repoRoot, "tools/examples/pack-submission.mjs"), "--check"], { encoding: "utf8" });
  expect(out).toContain("is up to date");
});

test("proctor serve takes the examples' Harbor task directories and logs a line per batch and per trial", async () => {
  const server = spawnProctor(["serve", "--port", "0", "--auth", "token", "--runtime", "local", "--unsafe-local-runtime", "--data-dir", join(work, "data")], { PROCTOR_TOKENS: TOKEN });
  let log = "";
  server.stderr?.on("data", (c: Buffer) => (log += c.toString()));
  try {
    const url = await listeningUrl(server);
    const r = await proctor(["submit", join(repoRoot, "examples/submission.tar.gz"), "--server", url, "--token", TOKEN, "--json"]);
    expect(r.code, r.stderr).toBe(0);
    const status = JSON.parse(r.stdout) as { status: string; passed_tasks: number; total_tasks: number };
    expect(status, r.stdout).toMatchObject({ status: "completed", total_tasks: 4, passed_tasks: 4 });
    const batchId = /submitted: batch (\S+),/.exec(r.stderr)?.[1];
    expect(batchId, r.stderr).toBeDefined();
    // The server's own lines: the batch accepted, each of its four trials, the batch finished.
    await expect.poll(() => log, { timeout: 30_000 }).toMatch(/batch finished/);
    // Fields as words (key=value), not a JSON object.
    expect(log).toMatch(new RegExp(`info: batch accepted .*batchId=${batchId} .*tasks=4`));
    for (const task of ["fizzbuzz-python", "git-first-commit", "greeting-file", "word-frequency"]) {
      expect(log).toMatch(new RegExp(`info: batch ${batchId}: trial ${task}__\\S+ passed \\(reward 1\\) in [0-9.]+ s`));
    }
    expect(log).not.toContain(TOKEN);
  } finally {
    server.kill("SIGTERM");
  }
});
