import { afterAll, beforeAll, describe, expect, test } from "vitest";
import type { ChildProcess } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { finish, helloSubmission, listeningUrl, spawnProctor } from "./test-support";

const ALICE = "5GrwvaEF5zXb26Fz9rcQpDWS57CtERHpNehXCPcNoHGKutQY";
const cli = spawnProctor;

let work: string;
let server: ChildProcess;
let url: string;
let archive: string;

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), "proctor-serve-"));
  archive = await helloSubmission(work);

  server = cli(["serve", "--port", "0", "--data-dir", join(work, "data"), "--runtime", "local", "--unsafe-local-runtime", "--no-isolate-verifier", "--allow-local-repos"], { PROCTOR_HOTKEYS: ALICE });
  url = await listeningUrl(server);
});

afterAll(async () => {
  if (server.exitCode === null) server.kill("SIGKILL");
  await rm(work, { recursive: true, force: true });
});

describe("proctor serve + proctor submit", () => {
  test("an allowlisted hotkey's batch runs and its table is printed", async () => {
    const r = await finish(cli(["submit", archive, "--server", url], { PROCTOR_HOTKEY_URI: "//Alice" }));
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/hello\s+passed\s+1/);
    expect(r.stdout).toContain("1/1 passed");
  });

  test("a hotkey not on the allowlist gets the server's 403, exit 1", async () => {
    const r = await finish(cli(["submit", archive, "--server", url], { PROCTOR_HOTKEY_URI: "//Bob" }));
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/403 .*not on this server's allowlist/);
  });

  test("serve refuses to run uploads on the local runtime without --unsafe-local-runtime", async () => {
    const r = await finish(cli(["serve", "--port", "0", "--data-dir", join(work, "data-refused"), "--runtime", "local"], { PROCTOR_HOTKEYS: ALICE }));
    expect(r.code).toBe(2);
    expect(r.stderr).toContain("no isolation");
  });

  test("submit without credentials is a usage error", async () => {
    const r = await finish(cli(["submit", archive, "--server", url], { PROCTOR_HOTKEY_URI: "", PROCTOR_HOTKEY_FILE: "", PROCTOR_TOKEN: "", PROCTOR_TOKENS: "" }));
    expect(r.code).toBe(2);
    expect(r.stderr).toContain("no credentials");
  });

  test("SIGTERM stops the server cleanly", async () => {
    const closed = finish(server);
    server.kill("SIGTERM");
    const r = await closed;
    expect(r.code).toBe(0);
  });
});
