import { execFile } from "node:child_process";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import Dockerode from "dockerode";
import type { FileChange } from "@proctor/sandbox";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { dockerTestGate } from "./gate";
import { overlayLayersOf, readOverlayChanges, type OverlayLayers } from "./overlay-changes";
import { DockerRuntime } from "./runtime";
import type { DockerSandbox } from "./sandbox";
import { BUSYBOX, testContainers } from "./test-helpers";
import { openXattrReader, type XattrReader } from "./xattrs";

const docker = new Dockerode();
const run = await dockerTestGate(docker);
const BASE = "proctor/base:bookworm";
/** Three layers over busybox: a deleted file and a directory deleted and made again (a whiteout and an opaque dir in the image). */
const LAYERED = `proctor-test/overlay-layers:${process.pid}`;
const DOCKERFILE = `FROM ${BUSYBOX}
RUN mkdir -p /d/e /keep/sub && touch /d/e/f /d/old /keep/sub/x /keep/y
RUN rm /bin/ls && rm -rf /d && mkdir -p /d && touch /d/g && rm /keep/y
RUN echo layer3 > /d/h
`;

const sorted = (changes: FileChange[]) => changes.map((c) => `${c.kind} ${c.path}`).sort();

/**
 * Both xattr readers: the binding installed with the package, and getfattr (which CI installs;
 * elsewhere its cases are skipped with a notice).
 */
const readers: [string, XattrReader][] = [];
for (const choice of ["native", "getfattr"] as const) {
  const reader = await openXattrReader(choice);
  if (!("unavailable" in reader)) readers.push([reader.name, reader]);
  else if (choice === "native" || process.env.CI === "true") throw new Error(`the ${choice} xattr reader is unavailable: ${reader.unavailable}`);
  else process.stderr.write(`SKIPPED: the overlay reader's cases with getfattr (${reader.unavailable})\n`);
}

describe.skipIf(!run)("a container's changes read from its overlay layers", () => {
  const tracked = testContainers(docker, "overlay");
  const runtime = new DockerRuntime({ docker, warmPool: 0, lifetimeStepMs: 1000 });
  let context: string;

  beforeAll(async () => {
    context = await mkdtemp(join(tmpdir(), "proctor-overlay-"));
    await writeFile(join(context, "Dockerfile"), DOCKERFILE);
    await promisify(execFile)("docker", ["build", "-q", "-t", LAYERED, context]);
  });
  afterAll(async () => {
    await runtime.drain();
    await tracked.cleanup();
    await docker.getImage(LAYERED).remove({ force: true }).catch(() => undefined);
    await rm(context, { recursive: true, force: true });
  });

  /** The daemon's answer (its full walk of both trees), the reference. */
  async function daemonChanges(container: { id: string }): Promise<string[]> {
    const list = (await docker.getContainer(container.id).changes()) as unknown;
    const kinds = ["modified", "added", "deleted"] as const;
    return sorted((Array.isArray(list) ? (list as { Path: string; Kind: number }[]) : []).map((c) => ({ path: c.Path, kind: kinds[c.Kind] ?? "modified" })));
  }

  async function layersOf(container: { id: string }): Promise<OverlayLayers> {
    const layers = overlayLayersOf((await docker.getContainer(container.id).inspect()).GraphDriver);
    if (typeof layers === "string") throw new Error(layers);
    return layers;
  }

  async function sandboxAfter(image: string, script: string): Promise<DockerSandbox> {
    const sandbox = (await runtime.create({ image, labels: tracked.labels })) as DockerSandbox;
    const result = await sandbox.exec(["sh", "-c", script], { user: "0" });
    expect(result.stderr).toBe("");
    expect(result.exitCode).toBe(0);
    return sandbox;
  }

  /** A container with Docker's default capabilities (a sandbox has no CAP_SETFCAP) after `script`. */
  async function containerAfter(image: string, script: string): Promise<{ id: string }> {
    const container = await docker.createContainer({ Image: image, Cmd: ["sleep", "infinity"], Labels: tracked.labels, HostConfig: { NetworkMode: "none" } });
    await container.start();
    const exec = await container.exec({ Cmd: ["sh", "-c", script], AttachStdout: true, AttachStderr: true });
    const stream = await exec.start({});
    const output: Buffer[] = [];
    stream.on("data", (chunk: Buffer) => output.push(chunk));
    await new Promise((resolve) => stream.on("end", resolve));
    const { ExitCode } = await exec.inspect();
    if (ExitCode !== 0) throw new Error(`the test's script failed (exit ${ExitCode}): ${Buffer.concat(output).toString("utf8")}`);
    return container;
  }

  describe.each(readers)("with xattrs read by %s", (_name, reader) => {
    it("equals the daemon's diff for files added, edited, re-owned, re-timed, given capabilities, linked and deleted", async () => {
      const container = await containerAfter(
        BASE,
        [
          `touch "/tmp/new\nline\\\\back" /tmp/é /usr/share/zz && rm /usr/share/zz`,
          "rm /etc/debian_version && mkdir -p /new/deep/dir && mv /usr/share/doc/bash /usr/share/doc/bash2",
          "chmod 700 /usr/share/doc/apt && echo > /usr/lib/os-release && touch /usr/bin/ls && chown 5 /usr/bin/cat",
          "ln -s /etc/passwd /root/link && ln -s /nonexistent /root/dangling && ln /usr/bin/true /usr/bin/true2 && mkfifo /tmp/fifo",
          "cp /usr/bin/env /tmp/env && cp /tmp/env /usr/bin/env && touch -d @0 /usr/bin/env",
          `python3 -c 'import os; os.setxattr("/usr/bin/dash", "security.capability", bytes.fromhex("0100000200200000000000000000000000000000"))'`,
        ].join(" && "),
      );
      const read = await readOverlayChanges(await layersOf(container), reader);
      if (!("changes" in read)) throw new Error(`the overlay reader did not answer: ${read.unavailable}`);
      const reference = await daemonChanges(container);
      expect(reference).toEqual(expect.arrayContaining(["deleted /etc/debian_version", "modified /usr/bin/dash", "modified /usr/bin/env", "added /usr/share/doc/bash2/copyright"]));
      expect(sorted(read.changes)).toEqual(reference);
    });

    it("compares by content what the daemon judges by size and time: a same-size rewrite with its time set back is a change, a copy-up that changed nothing is not", async () => {
      const container = await containerAfter(
        BASE,
        [
          // Same size, time put back: only the content differs (the daemon's diff misses it).
          "t=$(stat -c %y /etc/debian_version) && printf '%s' \"$(cat /etc/debian_version | tr 0123456789 9876543210)\" > /tmp/v && cat /tmp/v > /etc/debian_version && echo >> /etc/debian_version && touch -d \"$t\" /etc/debian_version",
          // Copied up (written with its own bytes), time put back: unchanged.
          "t=$(stat -c %y /etc/host.conf) && cat /etc/host.conf > /tmp/h && cat /tmp/h > /etc/host.conf && touch -d \"$t\" /etc/host.conf",
        ].join(" && "),
      );
      const read = await readOverlayChanges(await layersOf(container), reader);
      if (!("changes" in read)) throw new Error(`the overlay reader did not answer: ${read.unavailable}`);
      const reference = await daemonChanges(container);
      expect(reference).not.toContain("modified /etc/debian_version");
      expect(sorted(read.changes)).toEqual(["modified /etc", "modified /etc/debian_version", ...reference.filter((c) => c !== "modified /etc")].sort());
      expect(sorted(read.changes)).not.toContain("modified /etc/host.conf");
    });

    it("equals the daemon's diff over an image whose own layers deleted files and remade a directory", async () => {
      const sandbox = await sandboxAfter(LAYERED, "touch /bin/ls && mkdir -p /d/e && touch /d/e/f /d/g /keep/y && echo >> /d/h && rm /keep/sub/x && chmod 700 /keep && rm /d/h");
      const read = await readOverlayChanges(await layersOf(sandbox), reader);
      if (!("changes" in read)) throw new Error(`the overlay reader did not answer: ${read.unavailable}`);
      const reference = await daemonChanges(sandbox);
      expect(sorted(await sandbox.changes())).toEqual(reference);
      // /bin/ls was deleted by the image and /d/e hidden by its remade /d: both are new to the container.
      expect(reference).toEqual(expect.arrayContaining(["added /bin/ls", "added /d/e", "added /keep/y", "deleted /d/h", "deleted /keep/sub/x", "modified /d/g"]));
      expect(sorted(read.changes)).toEqual(reference);
      await sandbox.kill();
    });

    it("equals the daemon's diff over 12,000 paths (several getfattr runs), capabilities included", async () => {
      // 12,000 paths of ~90 bytes: over 1 MB of arguments, so at least two getfattr runs.
      const container = await containerAfter(
        BASE,
        `python3 -c '
import os
for d in range(40):
    p = "/opt/many/" + "d" * 60 + str(d)
    os.makedirs(p)
    for f in range(300):
        open(p + "/file-" + str(f), "w").close()
os.setxattr("/usr/bin/dash", "security.capability", bytes.fromhex("0100000200200000000000000000000000000000"))
'`,
      );
      const read = await readOverlayChanges(await layersOf(container), reader);
      if (!("changes" in read)) throw new Error(`the overlay reader did not answer: ${read.unavailable}`);
      const reference = await daemonChanges(container);
      expect(reference.length).toBeGreaterThan(12_000);
      expect(reference).toContain("modified /usr/bin/dash");
      expect(sorted(read.changes)).toEqual(reference);
    });

    it("leaves a directory deleted and made again to the daemon, which lists the files it hid", async () => {
      const sandbox = await sandboxAfter(BASE, "rm -rf /usr/share/doc/apt && mkdir /usr/share/doc/apt && echo x > /usr/share/doc/apt/changelog.gz");
      const read = await readOverlayChanges(await layersOf(sandbox), reader);
      expect(read).toEqual({ unavailable: "/usr/share/doc/apt is an opaque directory (deleted and made again)" });
      const reference = await daemonChanges(sandbox);
      expect(reference).toContain("deleted /usr/share/doc/apt/copyright");
      expect(sorted(await sandbox.changes())).toEqual(reference);
      await sandbox.kill();
    });
  });

  describe("when this host cannot read the layers' xattrs", () => {
    const script = "echo x > /etc/motd && rm /etc/debian_version && mkdir -p /srv/new && touch /srv/new/f";

    it("warns once per runtime, with the cost and the fix, and lists the same changes through the daemon", async () => {
      const warnings: string[] = [];
      const logger = { debug: () => undefined, info: () => undefined, warn: (message: string) => void warnings.push(message), error: () => undefined };
      const slow = new DockerRuntime({ docker, warmPool: 0, lifetimeStepMs: 1000, logger, overlayXattrs: "none" });
      try {
        const first = (await slow.create({ image: BASE, labels: tracked.labels })) as DockerSandbox;
        expect((await first.exec(["sh", "-c", script], { user: "0" })).exitCode).toBe(0);
        const fast = await sandboxAfter(BASE, script);
        const slowChanges = sorted(await first.changes());
        expect(slowChanges).toEqual(await daemonChanges(first));
        expect(slowChanges).toEqual(expect.arrayContaining(["modified /etc/motd", "deleted /etc/debian_version", "added /srv/new/f"]));
        // The fast path (this file's other runtime) gives the same list for the same script.
        expect(sorted(await fast.changes())).toEqual(slowChanges);

        expect(warnings).toHaveLength(1);
        expect(warnings[0]).toMatch(/^Docker: container file changes are listed by the daemon, which walks the whole image \(\d+\.\d\d s for this first listing/);
        expect(warnings[0]).toContain("because reading overlay xattrs on the host is turned off (PROCTOR_OVERLAY_XATTRS=none, or the runtime's overlayXattrs option). Fix: unset PROCTOR_OVERLAY_XATTRS");
        expect(warnings[0]).toContain("Fix: ");
        expect(warnings[0]).not.toContain("\n");

        // A second sandbox of the same runtime, and a second listing: no second warning.
        const second = (await slow.create({ image: BASE, labels: tracked.labels })) as DockerSandbox;
        expect((await second.exec(["sh", "-c", script], { user: "0" })).exitCode).toBe(0);
        expect(sorted(await second.changes())).toEqual(slowChanges);
        expect(sorted(await first.changes())).toEqual(slowChanges);
        expect(warnings).toHaveLength(1);
        await Promise.all([first.kill(), second.kill(), fast.kill()]);
      } finally {
        await slow.drain();
      }
    });

    it("names getfattr's package when it is missing", async () => {
      const path = process.env.PATH;
      process.env.PATH = context; // a directory without getfattr
      try {
        expect(await openXattrReader("getfattr")).toEqual({
          unavailable: "no overlay xattr reader: getfattr is not installed (Debian package attr)",
          fix: expect.stringContaining("apt-get install attr"),
        });
      } finally {
        process.env.PATH = path;
      }
    });

    it("says nothing when the layers are read on the host", async () => {
      const warnings: string[] = [];
      const debug: string[] = [];
      const logger = { debug: (message: string) => void debug.push(message), info: () => undefined, warn: (message: string) => void warnings.push(message), error: () => undefined };
      const quiet = new DockerRuntime({ docker, warmPool: 0, lifetimeStepMs: 1000, logger });
      try {
        const sandbox = (await quiet.create({ image: BASE, labels: tracked.labels })) as DockerSandbox;
        expect((await sandbox.exec(["sh", "-c", script], { user: "0" })).exitCode).toBe(0);
        expect(sorted(await sandbox.changes())).toEqual(await daemonChanges(sandbox));
        expect(warnings).toEqual([]);
        expect(debug).not.toContain("listing container changes through the Docker API");
        await sandbox.kill();
      } finally {
        await quiet.drain();
      }
    });
  });
});
