import { mkdir, mkdtemp, readdir, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Dockerode from "dockerode";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CHANNEL_DIR } from "./channel";
import { DaemonPaths, detectDaemonPaths, ownContainerId } from "./daemon-paths";
import { dockerTestGate } from "./gate";
import { DockerRuntime } from "./runtime";
import { BUSYBOX, testContainers } from "./test-helpers";

const docker = new Dockerode();
const run = await dockerTestGate(docker);

describe("ownContainerId", () => {
  it("reads the container id from the files Docker binds at its /etc, and nothing from a host's mountinfo, also while the daemon copies files of another container", () => {
    const id = "a".repeat(40) + "0123456789abcdef01234567";
    expect(ownContainerId(`1187 1170 8:1 /var/lib/docker/containers/${id}/resolv.conf /etc/resolv.conf rw,relatime - ext4 /dev/sda1 rw\n`)).toBe(id);
    expect(ownContainerId("25 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n")).toBeNull();
    // A host's mount table while the daemon copies files out of a container (docker cp, the
    // archive API): that container's binds sit under its rootfs, not at this process's /etc.
    const other = "e48936022e84b663bc42e0aa8e2472ccaf9f5a507a79279d3f267c9d3be66112";
    const merged = "/var/lib/docker/overlay2/a39ea93b69a85bfccf7c825bdfb34d8c7f416ab1a46255c65c29ae278af842c7/merged";
    const duringCopy = ["hostname", "hosts", "resolv.conf"].map((f, i) => `${47 + i} 45 254:0 /var/lib/docker/containers/${other}/${f} ${merged}/etc/${f} rw,relatime - ext4 /dev/vda rw`).join("\n");
    expect(ownContainerId(`25 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw\n${duringCopy}\n`)).toBeNull();
    // Inside a container during such a copy of a sibling: its own binds still name it.
    expect(ownContainerId(`${duringCopy}\n1188 1170 8:1 /var/lib/docker/containers/${id}/hostname /etc/hostname rw - ext4 /dev/sda1 rw\n`)).toBe(id);
    // The file bound at /etc/hostname must be that container's hostname, not another of its files.
    expect(ownContainerId(`1189 1170 8:1 /var/lib/docker/containers/${id}/hosts /etc/hostname rw - ext4 /dev/sda1 rw\n`)).toBeNull();
  });
});

describe.skipIf(!run)("sandboxes started from inside a container of the daemon", () => {
  const tracked = testContainers(docker, "daemon-paths");
  let root: string;
  const volume = `proctor-test-daemon-paths-${process.pid}-${Date.now()}`;
  beforeAll(async () => {
    root = await mkdtemp(join(tmpdir(), "proctor-daemon-paths-"));
    await docker.createVolume({ Name: volume, Labels: tracked.labels });
  });
  afterAll(async () => {
    await tracked.cleanup();
    await docker.getVolume(volume).remove().catch(() => undefined);
    await rm(root, { recursive: true, force: true });
  });

  it("a real container's mountinfo names it; its bind mounts and volumes map to host paths, its own filesystem and tmpfs to none", async () => {
    const holder = await docker.createContainer({
      Image: BUSYBOX,
      Cmd: ["sleep", "300"],
      Labels: tracked.labels,
      HostConfig: {
        Mounts: [
          { Type: "bind", Source: root, Target: "/proctor-test-bound" },
          { Type: "volume", Source: volume, Target: "/proctor-test-volume" },
          { Type: "tmpfs", Source: "", Target: "/proctor-test-tmpfs" },
        ],
      },
    });
    await holder.start();
    const exec = await holder.exec({ Cmd: ["cat", "/proc/self/mountinfo"], AttachStdout: true });
    const stream = await exec.start({ hijack: true, stdin: false });
    const chunks: Buffer[] = [];
    await new Promise<void>((resolve, reject) => {
      docker.modem.demuxStream(stream, { write: (c: Buffer) => chunks.push(c) } as unknown as NodeJS.WritableStream, process.stderr);
      stream.on("end", () => resolve());
      stream.on("error", reject);
    });
    const paths = await detectDaemonPaths(docker, Buffer.concat(chunks).toString("utf8"));
    expect(paths.container).toBe(holder.id);
    const volumeDir = (await docker.getVolume(volume).inspect()).Mountpoint;
    expect(paths.hostPathOf("/proctor-test-bound/a/b")).toBe(join(root, "a/b"));
    expect(paths.hostPathOf("/proctor-test-bound")).toBe(root);
    expect(paths.hostPathOf("/proctor-test-volume/x")).toBe(`${volumeDir}/x`);
    expect(paths.hostPathOf("/proctor-test-tmpfs/x")).toBeNull();
    expect(paths.hostPathOf("/proctor-test-bound-not/x")).toBeNull(); // a sibling name is not under the mount
    expect(paths.hostPathOf("/tmp/anything")).toBeNull();
    // On the daemon's host (no container in its mountinfo) a path is itself.
    expect((await detectDaemonPaths(docker, "25 1 8:1 / / rw - ext4 /dev/sda1 rw\n")).hostPathOf("/tmp/x")).toBe("/tmp/x");
  });

  it("bind mounts go through the container's mounts, the exec channel is off when the temp dir is its own, and an unshared path is one clear error", async () => {
    // This process as a container whose /proctor-inside is `root` on the host and whose temp dir is its own.
    const shared = join(root, "shared");
    await mkdir(join(shared, "data"), { recursive: true });
    await writeFile(join(shared, "data", "train.csv"), "a,b\n1,2\n");
    const paths = DaemonPaths.inContainer("f".repeat(64), [{ Type: "bind", Source: shared, Destination: "/proctor-inside" }]);
    const runtime = new DockerRuntime({ docker, daemonPaths: paths, warmPool: 0 });
    const channelDirsBefore = (await readdir(tmpdir())).filter((n) => n.startsWith(`proctor-channel-${process.pid}-`));
    try {
      const sandbox = await runtime.create({ image: BUSYBOX, labels: tracked.labels, mounts: [{ hostPath: "/proctor-inside/data", sandboxPath: "/home/data", readOnly: true }] });
      const read = await sandbox.exec(["cat", "/home/data/train.csv"], { timeoutMs: 60_000 });
      expect(read).toMatchObject({ exitCode: 0, stdout: "a,b\n1,2\n" });
      const info = await docker.getContainer(sandbox.id).inspect();
      expect(info.Mounts.find((m) => m.Destination === "/home/data")?.Source).toBe(join(shared, "data"));
      expect(info.Mounts.some((m) => m.Destination === CHANNEL_DIR)).toBe(false); // execs went through docker exec
      await expect(sandbox.forwardHostSocket?.(join(tmpdir(), "proxy.sock"), 8080)).rejects.toThrow(
        /this process runs in container ffffffffffff and .*proxy\.sock is on its own filesystem, which the Docker daemon cannot bind into the sandbox; put the socket's directory on a bind mount or volume/,
      );
      await sandbox.kill();
      await expect(runtime.create({ image: BUSYBOX, labels: tracked.labels, mounts: [{ hostPath: join(tmpdir(), "public"), sandboxPath: "/home/data", readOnly: true }] })).rejects.toThrow(
        /^mount .*public -> \/home\/data: this process runs in container ffffffffffff and .*public is on its own filesystem, which the Docker daemon cannot bind into a sandbox; keep it on a bind mount or volume of this container/,
      );
    } finally {
      await runtime.drain();
    }
    // No channel directory was made for sandboxes that could not use it.
    expect((await readdir(tmpdir())).filter((n) => n.startsWith(`proctor-channel-${process.pid}-`))).toEqual(channelDirsBefore);
  });
});
