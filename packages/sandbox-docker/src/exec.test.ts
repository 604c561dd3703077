import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import Dockerode from "dockerode";
import { SandboxClosedError, type Sandbox } from "@proctor/sandbox";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { dockerTestGate } from "./gate";
import { DockerRuntime } from "./runtime";
import { BUSYBOX, testContainers, until } from "./test-helpers";

const docker = new Dockerode();
const run = await dockerTestGate(docker);

describe.skipIf(!run)("DockerSandbox.exec", () => {
  const tracked = testContainers(docker, "exec");
  const runtime = new DockerRuntime({ docker });
  let sandbox: Sandbox;

  beforeAll(async () => {
    sandbox = await runtime.create({ image: BUSYBOX, labels: tracked.labels });
  });
  afterAll(async () => {
    await sandbox?.kill();
    await runtime.drain();
    await tracked.cleanup();
  });

  /** The command lines of processes running in the container, from /proc (no ps flags needed). */
  async function processes(): Promise<string[]> {
    const result = await sandbox.exec({ shell: "for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f; echo; done" });
    return result.stdout.split("\n").map((line) => line.trim()).filter((line) => line !== "");
  }

  it("returns exit codes without throwing", async () => {
    expect((await sandbox.exec(["true"])).exitCode).toBe(0);
    expect((await sandbox.exec(["sh", "-c", "exit 3"])).exitCode).toBe(3);
    expect((await sandbox.exec({ shell: "exit 42" })).exitCode).toBe(42);
    const missing = await sandbox.exec(["no-such-program"]);
    expect(missing.exitCode).not.toBe(0);
    expect(missing.stdout + missing.stderr).toMatch(/no-such-program/);
  });

  it("passes argv through unsplit and unexpanded", async () => {
    const result = await sandbox.exec(["echo", "a  b", "$HOME", "*"]);
    expect(result.stdout).toBe("a  b $HOME *\n");
  });

  it("keeps stdout and stderr apart", async () => {
    const result = await sandbox.exec({ shell: "echo out; echo err >&2; echo out2" });
    expect(result).toMatchObject({ stdout: "out\nout2\n", stderr: "err\n", truncated: false, timedOut: false, aborted: false });
  });

  it("delivers every byte of many small writes made just before exit (truncation regression)", async () => {
    for (let round = 0; round < 5; round++) {
      const result = await sandbox.exec({ shell: "i=0; while [ $i -lt 3000 ]; do echo o$i; echo e$i >&2; i=$((i+1)); done; exit 7" });
      expect(result.exitCode).toBe(7);
      const out = result.stdout.split("\n");
      const err = result.stderr.split("\n");
      expect(out.length).toBe(3001);
      expect(err.length).toBe(3001);
      expect(out[2999]).toBe("o2999");
      expect(err[2999]).toBe("e2999");
    }
  });

  it("streams chunks to the callbacks in the order they were written", async () => {
    const events: string[] = [];
    let resolvedAt = 0;
    const result = await sandbox.exec(
      { shell: "echo one; sleep 0.2; echo two >&2; sleep 0.2; echo three" },
      {
        onStdout: (chunk) => events.push(`out:${chunk.toString().trim()}`),
        onStderr: (chunk) => events.push(`err:${chunk.toString().trim()}`),
      },
    ).then((r) => {
      resolvedAt = events.length;
      return r;
    });
    expect(events).toEqual(["out:one", "err:two", "out:three"]);
    expect(resolvedAt).toBe(3);
    expect(result.stdout).toBe("one\nthree\n");
  });

  it("feeds stdin and honours cwd, env and user", async () => {
    expect((await sandbox.exec(["cat"], { stdin: "hello\nworld" })).stdout).toBe("hello\nworld");
    expect((await sandbox.exec(["wc", "-c"], { stdin: new Uint8Array(100_000) })).stdout.trim()).toBe("100000");
    expect((await sandbox.exec(["pwd"])).stdout).toBe(`${sandbox.workdir}\n`);
    expect((await sandbox.exec(["pwd"], { cwd: "/logs/agent" })).stdout).toBe("/logs/agent\n");
    const env = await sandbox.exec({ shell: "echo $GREETING:$PROCTOR_WORKDIR:$PROCTOR_VERIFIER_LOGS_DIR" }, { env: { GREETING: "hi there" } });
    expect(env.stdout).toBe(`hi there:${sandbox.workdir}:/logs/verifier\n`);
    expect((await sandbox.exec(["id", "-u"], { user: "1234" })).stdout).toBe("1234\n");
  });

  it("caps 50 MB of output at maxOutputBytes with flat host memory, while callbacks see it all", async () => {
    const cap = 1024 * 1024;
    const total = 50 * 1024 * 1024;
    const gc = exposeGc();
    gc();
    const baseline = process.memoryUsage().arrayBuffers;
    // Every 10 MB, collect garbage and record what is still held: buffering the output would hold
    // 10, 20, 30, 40, 50 MB; streaming holds the 1 MiB kept plus socket buffers in flight.
    const retained: number[] = [];
    let seen = 0;
    const result = await sandbox.exec(["head", "-c", String(total), "/dev/zero"], {
      maxOutputBytes: cap,
      onStdout: (chunk) => {
        const before = Math.floor(seen / (10 * 1024 * 1024));
        seen += chunk.length;
        if (Math.floor(seen / (10 * 1024 * 1024)) > before) {
          gc();
          retained.push(process.memoryUsage().arrayBuffers - baseline);
        }
      },
    });
    expect(result.exitCode).toBe(0);
    expect(seen).toBe(total);
    // The kept text is the first and last half MiB around a note of what was cut.
    expect(result.truncated).toBe(true);
    expect(result.stdout).toMatch(/\n\[proctor: \d+ bytes of output cut\]\n/);
    expect(result.stdout.length).toBeGreaterThanOrEqual(cap);
    expect(result.stdout.length).toBeLessThan(cap + 100);
    expect(retained.length).toBeGreaterThanOrEqual(4);
    for (const bytes of retained) expect(bytes).toBeLessThan(16 * 1024 * 1024);
  });

  it("a timeout kills the command and every child it spawned, inside the container", async () => {
    const result = await sandbox.exec({ shell: "sleep 1000 & sleep 1001 & sleep 1002" }, { timeoutMs: 500 });
    expect(result).toMatchObject({ timedOut: true, aborted: false });
    expect(result.exitCode).toBe(137);
    expect(result.durationMs).toBeLessThan(60_000); // far below the sleeps: they were killed, not awaited
    expect((await processes()).filter((line) => /sleep 100[0-2]/.test(line))).toEqual([]);
  });

  it("an abort kills the tree too, including a child that left the session", async () => {
    const controller = new AbortController();
    const pending = sandbox.exec({ shell: "setsid sleep 1003 & sleep 1004" }, { signal: controller.signal });
    // Abort only once both sleeps run (polled with a deadline, not a fixed wait that a loaded machine outlasts).
    const bothRunning = async () => {
      const lines = await processes();
      return lines.some((line) => line.includes("sleep 1003")) && lines.some((line) => line.includes("sleep 1004"));
    };
    expect(await until(bothRunning, 30_000)).toBe(true);
    controller.abort();
    const result = await pending;
    expect(result).toMatchObject({ aborted: true, timedOut: false });
    expect((await processes()).filter((line) => /sleep 100[34]/.test(line))).toEqual([]);
  });

  it("an already aborted signal runs nothing", async () => {
    const result = await sandbox.exec({ shell: "touch /tmp/ran" }, { signal: AbortSignal.abort() });
    expect(result).toMatchObject({ aborted: true, exitCode: -1 });
    expect(await sandbox.readFile("/tmp/ran")).toBeNull();
  });

  it("kill is idempotent and concurrent-safe; later calls report a closed sandbox", async () => {
    const other = await runtime.create({ image: BUSYBOX, labels: tracked.labels });
    let started!: () => void;
    const isRunning = new Promise<void>((resolve) => (started = resolve));
    const running = other.exec({ shell: "echo started; sleep 1000" }, { onStdout: () => started() });
    await isRunning;
    await Promise.all([other.kill(), other.kill(), other[Symbol.asyncDispose]()]);
    await other[Symbol.asyncDispose]();
    expect((await running).exitCode).not.toBe(0);
    await expect(other.exec(["true"])).rejects.toBeInstanceOf(SandboxClosedError);
    // kill() resolves once nothing runs; the removal finishes in the background until drain().
    expect((await docker.getContainer(other.id).inspect().catch(() => ({ State: { Running: false } }))).State.Running).toBe(false);
    await runtime.drain();
    await expect(docker.getContainer(other.id).inspect()).rejects.toMatchObject({ statusCode: 404 });
  });
});

/** global.gc without --expose-gc: turn the flag on and fetch gc from a fresh context. */
function exposeGc(): () => void {
  setFlagsFromString("--expose-gc");
  return runInNewContext("gc") as () => void;
}
