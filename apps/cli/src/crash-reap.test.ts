import { execFileSync, type ChildProcess } from "node:child_process";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { dockerTestGate } from "@proctor/sandbox-docker";
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { finish, spawnProctor } from "./test-support";

// A crashed `proctor run` (kill -9: no handler, no cleanup) leaves no container behind, with no
// later command: its sandboxes' watchdog removes them (packages/sandbox-docker watchdog.ts).

const docker = await dockerTestGate();

let root: string;
beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), "proctor-crash-reap-"));
});
afterAll(async () => {
  await rm(root, { recursive: true, force: true });
});

/** A task whose reference solution takes 5 minutes: the CLI is surely mid-run when it is killed. */
async function slowTask(dir: string): Promise<void> {
  await mkdir(join(dir, "solution"), { recursive: true });
  await mkdir(join(dir, "tests"), { recursive: true });
  await writeFile(join(dir, "task.toml"), '[agent]\ntimeout_sec = 600\n\n[environment]\ndocker_image = "proctor/base:bookworm"\n');
  await writeFile(join(dir, "instruction.md"), "Take your time.\n");
  await writeFile(join(dir, "solution", "solve.sh"), "#!/bin/sh\nsleep 300\n", { mode: 0o755 });
  await writeFile(join(dir, "tests", "test.sh"), "#!/bin/sh\necho 1 > /logs/verifier/reward.txt\n", { mode: 0o755 });
}

const containers = (filter: string, all = true) =>
  execFileSync("docker", ["ps", ...(all ? ["-a"] : []), "-q", "--filter", filter]).toString().split("\n").filter(Boolean);

/** Pids of watchdog processes whose owner label names `pid`. */
function watchdogsOfPid(pid: number): number[] {
  const found: number[] = [];
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const argv = readFileSync(`/proc/${entry}/cmdline`, "utf8").split("\0");
      const at = argv.indexOf("proctor-watchdog");
      if (at > 0 && argv[at + 1]?.split(":").at(-2) === String(pid)) found.push(Number(entry));
    } catch {
      // gone meanwhile
    }
  }
  return found;
}

/** Exec-channel directories in the temp dir made by process `pid` (`proctor-channel-<pid>-<start>-*`). */
const channelDirsOfPid = (pid: number) => readdirSync(tmpdir()).filter((name) => name.startsWith(`proctor-channel-${pid}-`));

async function poll(check: () => boolean, timeoutMs: number): Promise<boolean> {
  const end = Date.now() + timeoutMs;
  while (Date.now() < end) {
    if (check()) return true;
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
  return check();
}

describe.skipIf(!docker)("kill -9 of the CLI or the server", () => {
  test("kill -9 of proctor run mid-run: its containers are gone within 60 s with nothing else run", async () => {
    const tasks = join(root, "tasks");
    for (const id of ["slow-a", "slow-b"]) await slowTask(join(tasks, id));
    const runId = `crash-reap-${process.pid}-${Date.now()}`;
    const child = spawnProctor(["run", tasks, "--runtime", "docker", "-a", "oracle", "-n", "2", "-o", join(root, "runs"), "--run-id", runId]);
    let stderr = "";
    const done = finish(child, (text) => (stderr = text));
    const label = `label=proctor.run=${runId}`;
    try {
      // Mid-run: both trials' sandboxes are up (the solutions sleep for 5 minutes).
      const up = await poll(() => containers(label, false).length >= 2, 120_000);
      expect(up, (await Promise.race([done, Promise.resolve(null)]))?.stderr ?? "the CLI still runs").toBe(true);
      expect(watchdogsOfPid(child.pid as number)).toHaveLength(1);
      // Each sandbox's exec channel has its FIFO directory in the temp dir, named after the CLI's pid.
      const channels = () => readdirSync(tmpdir()).filter((name) => name.startsWith("proctor-channel-"));
      expect(channelDirsOfPid(child.pid as number).length, `pid ${child.pid}; channel dirs in ${tmpdir()}: ${channels().join(" ")}\n${stderr.split("\n").slice(-20).join("\n")}`).toBeGreaterThanOrEqual(2);
    } catch (error) {
      child.kill("SIGKILL");
      throw error;
    }

    const killedAt = Date.now();
    child.kill("SIGKILL");
    expect((await done).code).toBeNull();
    // Nothing else runs: no `proctor gc`, no later `proctor run`.
    const gone = await poll(() => containers(label).length === 0, 60_000);
    const tookMs = Date.now() - killedAt;
    console.log(`crash-reap: ${runId}: 0 containers ${tookMs} ms after kill -9 of proctor run`);
    expect(gone, `still there after 60 s: ${containers(label).join(" ")}`).toBe(true);
    // And the watchdog is gone too once it has confirmed it.
    expect(await poll(() => watchdogsOfPid(child.pid as number).length === 0, 20_000)).toBe(true);
    // It removed the CLI's exec-channel directories on its way out (the CLI's close() never ran).
    expect(channelDirsOfPid(child.pid as number)).toEqual([]);
    expect(existsSync(join(root, "runs", runId, "run.json"))).toBe(true);
  });

  test("kill -9 of proctor serve mid-batch: its containers are gone within 60 s with nothing else run", async () => {
    const alice = "5GrwvaEF5zXb26Fz9rcQpDWS57CtERHpNehXCPcNoHGKutQY";
    const repo = join(root, "repo");
    await mkdir(repo, { recursive: true });
    const git = (...a: string[]) => execFileSync("git", ["-c", "user.name=t", "-c", "user.email=t@t", ...a], { cwd: repo }).toString().trim();
    git("init", "-q");
    await writeFile(join(repo, "f.txt"), "v1\n");
    git("add", ".");
    git("commit", "-qm", "init");
    const sub = join(root, "sub");
    for (const id of ["slow-a", "slow-b"]) {
      await mkdir(join(sub, "tasks", id, "tests"), { recursive: true });
      await writeFile(join(sub, "tasks", id, "workspace.yaml"), `repo: ${repo}\nbase_commit: ${git("rev-parse", "HEAD")}\n`);
      await writeFile(join(sub, "tasks", id, "prompt.md"), "Take your time.\n");
      await writeFile(join(sub, "tasks", id, "tests", "check.sh"), "true\n");
    }
    await mkdir(join(sub, "agent_code"), { recursive: true });
    await writeFile(join(sub, "agent_code", "run.sh"), "#!/bin/bash\nsleep 300\n", { mode: 0o755 });
    const archive = join(root, "sub.tar.gz");
    execFileSync("tar", ["-czf", archive, "-C", sub, "."]);

    const server = spawnProctor(["serve", "--port", "0", "--data-dir", join(root, "data"), "--runtime", "docker", "--allow-local-repos"], { PROCTOR_HOTKEYS: alice });
    const serverDone = finish(server);
    let client: ChildProcess | undefined;
    const ownedByServer = () =>
      execFileSync("docker", ["ps", "-a", "--filter", "label=proctor.managed=true", "--format", '{{.ID}} {{.Label "proctor.owner"}}'])
        .toString()
        .split("\n")
        .filter((line) => line.split(" ")[1]?.split(":").at(-2) === String(server.pid));
    try {
      const url = await new Promise<string>((resolve, reject) => {
        let seen = "";
        server.stderr?.on("data", (c: Buffer) => {
          seen += c.toString();
          const m = /listening on (http:\/\/\S+)/.exec(seen);
          if (m?.[1]) resolve(m[1]);
        });
        void serverDone.then((r) => reject(new Error(`serve exited ${r.code}: ${seen}`)));
      });
      client = spawnProctor(["submit", archive, "--server", url, "-n", "2"], { PROCTOR_HOTKEY_URI: "//Alice" });
      const clientDone = finish(client);
      const up = await poll(() => ownedByServer().length >= 2, 120_000);
      expect(up, (await Promise.race([clientDone, Promise.resolve(null)]))?.stderr ?? "the batch still runs").toBe(true);
    } catch (error) {
      server.kill("SIGKILL");
      client?.kill("SIGKILL");
      throw error;
    }

    const killedAt = Date.now();
    server.kill("SIGKILL");
    expect((await serverDone).code).toBeNull();
    client?.kill("SIGKILL");
    const gone = await poll(() => ownedByServer().length === 0, 60_000);
    const tookMs = Date.now() - killedAt;
    console.log(`crash-reap: 0 containers ${tookMs} ms after kill -9 of proctor serve`);
    expect(gone, `still there after 60 s: ${ownedByServer().join(", ")}`).toBe(true);
  });
});
