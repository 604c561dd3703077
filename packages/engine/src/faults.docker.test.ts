import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { openSync } from "node:fs";
import { mkdir, writeFile } from "node:fs/promises";
import { join } from "node:path";
import Dockerode from "dockerode";
import { DockerRuntime, dockerTestGate } from "@proctor/sandbox-docker";
import type { TaskSpec } from "@proctor/schema";
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { startRun } from "./run";
import { inlineTask, readResultsFile, tempDir } from "./testing/fixtures";

const haveDocker = await dockerTestGate();
const BUSYBOX = "proctor/busybox:latest";

/**
 * A Docker daemon of the test's own (own socket, data and exec roots, network namespace, no
 * bridge), so restarting it mid-run cannot disturb the suites that share the machine's daemon.
 */
class PrivateDaemon {
  private process: ChildProcess | null = null;
  readonly socket: string;
  constructor(private readonly dir: string) {
    this.socket = join(dir, "docker.sock");
  }

  async start(): Promise<void> {
    const log = openSync(join(this.dir, "dockerd.log"), "a");
    // In a network namespace of its own: a daemon without a bridge deletes the host's docker0,
    // which the machine's own daemon needs.
    this.process = spawn(
      "unshare",
      ["--net", "--", "dockerd", "--host", `unix://${this.socket}`, "--data-root", join(this.dir, "data"), "--exec-root", join(this.dir, "exec"), "--pidfile", join(this.dir, "docker.pid"), "--bridge", "none", "--iptables=false", "--ip-masq=false"],
      { stdio: ["ignore", log, log] },
    );
    const docker = new Dockerode({ socketPath: this.socket });
    for (let i = 0; i < 300; i++) {
      if (await docker.ping().then(() => true, () => false)) return;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    throw new Error(`the test's dockerd did not answer on ${this.socket}`);
  }

  async stop(): Promise<void> {
    const child = this.process;
    if (!child || child.exitCode !== null) return;
    const exited = new Promise((resolve) => child.once("exit", resolve));
    child.kill("SIGTERM");
    await exited;
    this.process = null;
  }
}

describe.skipIf(!haveDocker)("faults in the harness's own infrastructure", () => {
  let root: { path: string; cleanup: () => Promise<void> };
  let daemon: PrivateDaemon;

  beforeAll(async () => {
    root = await tempDir("proctor-faults-");
    daemon = new PrivateDaemon(root.path);
    await daemon.start();
    execFileSync("sh", ["-c", `docker save ${BUSYBOX} | docker -H unix://${daemon.socket} load`]);
  });
  afterAll(async () => {
    await daemon?.stop();
    await root?.cleanup();
  });

  // A daemon shutting down still answers for a moment: a trial's halt() can succeed just before
  // it goes, and the removal then finds no daemon (CI saw one container left behind this way).
  test("sandboxes killed while their daemon is down, halted or not, are removed once it is back", async () => {
    const docker = new Dockerode({ socketPath: daemon.socket });
    const runtime = new DockerRuntime({ docker, warmPool: 0 });
    const labels = { "proctor.run": "down-kill" };
    const halted = await runtime.create({ image: BUSYBOX, labels });
    const running = await runtime.create({ image: BUSYBOX, labels });
    expect(halted.halt).toBeDefined();
    await halted.halt?.();
    await daemon.stop();
    await Promise.all([halted.kill(), running.kill()]);
    await daemon.start();
    await runtime.drain();
    expect(await docker.listContainers({ all: true, filters: { label: ["proctor.run=down-kill"] } })).toEqual([]);
  });

  test("dockerd restarted mid-run: the trials it broke are retried as infra errors, the run completes, nothing is counted twice", async () => {
    const tests = join(root.path, "tests");
    await mkdir(tests, { recursive: true });
    await writeFile(join(tests, "test.sh"), 'mkdir -p /logs/verifier; if [ -f /app/done ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n');
    const solution = join(root.path, "solution");
    await mkdir(solution, { recursive: true });
    const tasks: TaskSpec[] = ["a", "b", "c", "d"].map((id) =>
      inlineTask(`slow-${id}`, join(root.path, "inline"), {
        format: "native",
        environment: { ...inlineTask("x", join(root.path, "inline"), { verifier: { mode: "checks", testsDir: null, checks: [], timeoutSec: 1, env: {}, isolateProcesses: false, allowChanges: [] } }).environment, dockerImage: BUSYBOX },
        verifier: { mode: "reward-file", testsDir: tests, command: 'sh "$PROCTOR_TESTS_DIR/test.sh"', timeoutSec: 30, env: {}, isolateProcesses: false, allowChanges: [] },
        solution: { dir: solution, command: "sleep 3; touch /app/done" },
      }),
    );
    const runtime = new DockerRuntime({ docker: new Dockerode({ socketPath: daemon.socket }), warmPool: 0 });
    const handle = startRun({ runId: "restart", runDir: join(root.path, "runs", "restart"), tasks, agent: { kind: "oracle" }, runtime, concurrency: 2, attempts: 1, maxInfraRetries: 2, retryBaseDelayMs: 200 });
    let restarted: Promise<void> | null = null;
    handle.bus.subscribe((event) => {
      if (restarted === null && event.type === "trial_phase" && (event.data as { phase?: string }).phase === "agent") {
        restarted = (async () => {
          await new Promise((resolve) => setTimeout(resolve, 500));
          await daemon.stop();
          await daemon.start();
        })();
      }
    });
    const summary = await handle.done;
    await restarted;
    const results = await readResultsFile(handle.runDir);
    const outcomes = results.map((r) => `${r.trialId} ${r.status} retries=${r.retries}${r.error ? ` ${r.error.kind}: ${r.error.message}` : ""}`).join("\n");
    expect(summary, outcomes).toMatchObject({ status: "completed", trials: { total: 4, passed: 4, errored: 0 } });
    expect(results.map((r) => r.trialId).sort()).toEqual(["slow-a__1", "slow-b__1", "slow-c__1", "slow-d__1"]);
    expect(results.reduce((n, r) => n + r.retries, 0)).toBeGreaterThanOrEqual(1);
    const left = await new Dockerode({ socketPath: daemon.socket }).listContainers({ all: true, filters: { label: ["proctor.run=restart"] } });
    expect(left).toEqual([]);
  });
});
