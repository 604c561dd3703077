import { afterAll, beforeAll, describe, expect, test } from "vitest";
import type { ChildProcess } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { finish, helloSubmission, listeningUrl, spawnProctor } from "./test-support";

const ALICE = "5GrwvaEF5zXb26Fz9rcQpDWS57CtERHpNehXCPcNoHGKutQY";
const asAlice = { PROCTOR_HOTKEY_URI: "//Alice" };
const cli = spawnProctor;

let work: string;
let server: ChildProcess;
let url: string;
let batchId: string;

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), "proctor-batch-cmds-"));
  const archive = await helloSubmission(work);
  server = cli(["serve", "--port", "0", "--data-dir", join(work, "data"), "--runtime", "local", "--unsafe-local-runtime", "--no-isolate-verifier", "--allow-local-repos"], { PROCTOR_HOTKEYS: ALICE });
  url = await listeningUrl(server);
  const submitted = await finish(cli(["submit", archive, "--server", url, "--json"], asAlice));
  expect(submitted.code, submitted.stderr).toBe(0);
  batchId = (JSON.parse(submitted.stdout) as { batch_id: string }).batch_id;
});

afterAll(async () => {
  if (server.exitCode === null) server.kill("SIGKILL");
  await rm(work, { recursive: true, force: true });
});

describe("proctor status / proctor follow", () => {
  test("status prints a finished batch's table and, with --json, its status and tasks", async () => {
    const table = await finish(cli(["status", batchId, "--server", url], asAlice));
    expect(table.code, table.stderr).toBe(0);
    expect(table.stdout).toMatch(/hello\s+passed\s+1/);
    expect(table.stdout).toContain(`batch ${batchId} completed: 1/1 done, 1 passed`);
    const json = await finish(cli(["status", batchId, "--server", url, "--json"], asAlice));
    expect(JSON.parse(json.stdout)).toMatchObject({ batch_id: batchId, status: "completed", passed_tasks: 1, tasks: [{ task_id: "hello", outcome: "passed" }] });
  });

  test("follow --since 0 replays the finished batch's events and ends with its table", async () => {
    const r = await finish(cli(["follow", batchId, "--server", url, "--since", "0"], asAlice));
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).toContain(`batch ${batchId} started: 1 tasks`);
    expect(r.stderr).toMatch(/\[1\/1\] PASSED hello reward=1/);
    expect(r.stdout).toContain(`batch ${batchId} completed: 1/1 passed`);
  });

  test("another hotkey's batch is a 404 (exit 1); a bad --server or --since is bad usage (exit 2)", async () => {
    const bob = await finish(cli(["status", batchId, "--server", url], { PROCTOR_HOTKEY_URI: "//Bob" }));
    expect(bob.code).toBe(1);
    expect(bob.stderr).toMatch(/404|403/);
    const badUrl = await finish(cli(["status", batchId, "--server", "localhost:8080"], asAlice));
    expect(badUrl.code).toBe(2);
    expect(badUrl.stderr).toContain("--server must be an http(s) URL");
    const badSince = await finish(cli(["follow", batchId, "--server", url, "--since", "-1"], asAlice));
    expect(badSince.code).toBe(2);
    expect(badSince.stderr).toContain("--since must be a whole number >= 0");
  });
});
