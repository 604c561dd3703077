import { spawn, type ChildProcess } from "node:child_process";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { createConnection, createServer, type Server } from "node:net";
import { hostname } from "node:os";
import { join } from "node:path";
import Dockerode from "dockerode";
import { afterAll, describe, expect, it } from "vitest";
import { dockerTestGate } from "./gate";
import { DockerRuntime } from "./runtime";
import { BUSYBOX, TEST_LABEL, channelDirOf, testContainers, until } from "./test-helpers";
import { WATCHDOG_TAG, WATCH_INTERVAL_MS, watchdogEndpoint, watchdogPid } from "./watchdog";

describe("watchdogEndpoint (the daemon the watchdog talks to is the runtime's)", () => {
  it("takes the socket path, or the function docker-modem uses to find it", async () => {
    expect(await watchdogEndpoint({ socketPath: "/run/docker.sock" })).toEqual({ socketPath: "/run/docker.sock" });
    expect(await watchdogEndpoint({ socketPath: () => Promise.resolve("/home/u/.docker/run/docker.sock") })).toEqual({ socketPath: "/home/u/.docker/run/docker.sock" });
  });

  it("takes DOCKER_HOST's host and port, with the TLS material when it uses TLS", async () => {
    expect(await watchdogEndpoint({ host: "10.0.0.5", port: "2375", protocol: "http" })).toEqual({ protocol: "http", host: "10.0.0.5", port: 2375 });
    expect(await watchdogEndpoint({ host: "d", port: "2376", protocol: "https", ca: ["CA1", "CA2"], cert: Buffer.from("CERT"), key: Buffer.from("KEY") })).toEqual({
      protocol: "https",
      host: "d",
      port: 2376,
      ca: ["CA1", "CA2"],
      cert: "CERT",
      key: "KEY",
    });
  });

  it("says why there is none for ssh", async () => {
    expect(await watchdogEndpoint({ host: "d", protocol: "ssh" })).toMatch(/ssh/);
  });
});

const docker = new Dockerode();
const run = await dockerTestGate(docker);

/** Pids of live watchdog processes guarding `owner` (from /proc: argv is `node -e <script> proctor-watchdog <owner>`). */
function watchdogsOf(owner: string): number[] {
  const pids: number[] = [];
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    let argv: string[];
    try {
      argv = readFileSync(`/proc/${entry}/cmdline`, "utf8").split("\0");
    } catch {
      continue;
    }
    const at = argv.indexOf(WATCHDOG_TAG);
    if (at > 0 && argv[at + 1] === owner) pids.push(Number(entry));
  }
  return pids;
}

interface Owner {
  child: ChildProcess;
  container: string;
  owner: string;
  exited: Promise<number | null>;
}

/** Starts fixtures/owner-child.ts and waits until it owns a running sandbox. */
async function startOwner(label: string, mode: "wait" | "clean" = "wait", env: Record<string, string> = {}): Promise<Owner> {
  const child = spawn(process.execPath, ["--conditions=@proctor/source", "--import", "tsx", join(import.meta.dirname, "fixtures", "owner-child.ts"), label, mode], {
    cwd: join(import.meta.dirname, ".."),
    stdio: ["ignore", "pipe", "inherit"],
    env: { ...process.env, ...env },
  });
  const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
  const ready = await new Promise<{ container: string; owner: string }>((resolve, reject) => {
    let out = "";
    child.stdout?.on("data", (chunk: Buffer) => {
      out += chunk.toString();
      const match = /ready (\w+) (\S+)\n/.exec(out);
      if (match) resolve({ container: match[1] as string, owner: match[2] as string });
    });
    void exited.then((code) => reject(new Error(`the owner exited with ${code} before it was ready: ${out}`)));
  });
  return { child, exited, ...ready };
}

describe.skipIf(!run)("the sandbox watchdog", () => {
  const tracked = testContainers(docker, "watchdog");
  const label = tracked.labels[TEST_LABEL] as string;
  const containersOf = async (owner: string) =>
    (await docker.listContainers({ all: true, filters: { label: [`${TEST_LABEL}=${label}`, `proctor.owner=${owner}`] } })).map((c) => c.Id);
  /**
   * A created container carrying this suite's label and the given owner label (not
   * proctor.managed, so a `reap()` another test runs at the same time leaves it alone).
   */
  const decoy = async (owner: string) => (await docker.createContainer({ Image: BUSYBOX, Cmd: ["sleep", "600"], Labels: { ...tracked.labels, "proctor.owner": owner } })).id;
  const servers: Server[] = [];
  afterAll(async () => {
    for (const server of servers) server.close();
    await tracked.cleanup();
  });

  it("kill -9 of the owner: its containers go within seconds with no later command; other owners' containers stay", async () => {
    const owner = await startOwner(label);
    expect(owner.container).toMatch(/^[0-9a-f]{64}$/);
    // One watchdog for the owner, started with its first sandbox.
    expect(await until(async () => watchdogsOf(owner.owner).length === 1, 10_000)).toBe(true);
    const [watchdog] = watchdogsOf(owner.owner);
    // Owner labels that are not exactly this owner's: a longer one with it as prefix, another
    // host's (a dead process of this host's would be fair game for any server's or run's reap()).
    const others = [await decoy(`${owner.owner}0`), await decoy(`${hostname()}-elsewhere:999999999:1`)];
    // A live owner keeps its container across several of the watchdog's looks.
    await new Promise((resolve) => setTimeout(resolve, 2.5 * WATCH_INTERVAL_MS));
    expect(await containersOf(owner.owner)).toEqual([owner.container]);
    const channelDir = await channelDirOf(docker, owner.container);
    expect(existsSync(channelDir)).toBe(true);

    const killedAt = Date.now();
    owner.child.kill("SIGKILL");
    expect(await until(async () => (await containersOf(owner.owner)).length === 0, 60_000, 200)).toBe(true);
    // Its exec channel's directory on this host goes too (by the watchdog, or by another test's reap()).
    expect(await until(async () => !existsSync(channelDir), 10_000, 100)).toBe(true);
    const tookMs = Date.now() - killedAt;
    console.log(`watchdog: the container was gone ${tookMs} ms after kill -9 of its owner`);
    expect(tookMs).toBeLessThan(60_000);
    // The watchdog exits once it has confirmed nothing of its owner is left.
    expect(await until(async () => !existsSync(`/proc/${watchdog}`), 20_000, 200)).toBe(true);
    for (const id of others) expect((await docker.getContainer(id).inspect()).Id).toBe(id);
  });

  it("reaches the daemon the way the runtime does: DOCKER_HOST=tcp://", async () => {
    // A TCP front for the daemon's socket, counting connections (the watchdog's calls are among them).
    const socketPath = (await watchdogEndpoint(docker.modem)) as { socketPath: string };
    let connections = 0;
    const proxy = createServer((client) => {
      connections++;
      const daemon = createConnection(socketPath.socketPath);
      client.pipe(daemon).pipe(client);
      client.on("error", () => daemon.destroy());
      daemon.on("error", () => client.destroy());
    });
    servers.push(proxy);
    await new Promise<void>((resolve) => proxy.listen(0, "127.0.0.1", resolve));
    const port = (proxy.address() as { port: number }).port;
    const owner = await startOwner(label, "wait", { DOCKER_HOST: `tcp://127.0.0.1:${port}` });
    expect(await until(async () => watchdogsOf(owner.owner).length === 1, 10_000)).toBe(true);
    const before = connections;
    const killedAt = Date.now();
    owner.child.kill("SIGKILL");
    expect(await until(async () => (await containersOf(owner.owner)).length === 0, 60_000, 200)).toBe(true);
    console.log(`watchdog over tcp: the container was gone ${Date.now() - killedAt} ms after kill -9 of its owner`);
    // The watchdog lists the owner's containers through the proxy once it sees the owner gone. Not
    // asserted at the moment the container is gone: another test's reap() (the container is
    // proctor.managed, its owner dead) may remove it first, before the watchdog's first look.
    expect(await until(async () => connections > before, 30_000, 100)).toBe(true);
    // It confirms over the same endpoint and exits (before afterAll closes the proxy).
    expect(await until(async () => watchdogsOf(owner.owner).length === 0, 20_000, 200)).toBe(true);
  });

  it("a SIGTERM to the watchdog (its owner's service being stopped) still reaps when the owner dies right after", async () => {
    const owner = await startOwner(label);
    expect(await until(async () => watchdogsOf(owner.owner).length === 1, 10_000)).toBe(true);
    const [watchdog] = watchdogsOf(owner.owner) as [number];
    process.kill(watchdog, "SIGTERM");
    await new Promise((resolve) => setTimeout(resolve, 500));
    expect(existsSync(`/proc/${watchdog}`)).toBe(true);
    owner.child.kill("SIGKILL");
    expect(await until(async () => (await containersOf(owner.owner)).length === 0, 30_000, 200)).toBe(true);
  });

  it("a clean exit of the owner: its watchdog exits by itself", async () => {
    const owner = await startOwner(label, "clean");
    expect(await owner.exited).toBe(0);
    expect(await containersOf(owner.owner)).toEqual([]);
    expect(await until(async () => watchdogsOf(owner.owner).length === 0, 20_000, 200)).toBe(true);
  });

  it("a watchdog that died is started again by the next create(), one per owner", async () => {
    const runtime = new DockerRuntime({ docker, warmPool: 0 });
    const first = await runtime.create({ image: BUSYBOX, labels: tracked.labels });
    const second = await runtime.create({ image: BUSYBOX, labels: tracked.labels });
    try {
      expect(watchdogsOf(runtime.ownerId)).toEqual([watchdogPid(runtime.ownerId)]);
      const old = watchdogPid(runtime.ownerId) as number;
      process.kill(old, "SIGKILL");
      expect(await until(async () => watchdogPid(runtime.ownerId) === undefined, 10_000)).toBe(true);
      const third = await runtime.create({ image: BUSYBOX, labels: tracked.labels });
      await third.kill();
      const again = watchdogPid(runtime.ownerId);
      expect(again).toBeDefined();
      expect(again).not.toBe(old);
      expect(watchdogsOf(runtime.ownerId)).toEqual([again]);
    } finally {
      await first.kill();
      await second.kill();
      await runtime.drain();
    }
    // This test process's watchdog stays until the test worker exits, then finds nothing to remove.
  });
});
