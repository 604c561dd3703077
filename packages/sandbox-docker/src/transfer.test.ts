import { randomBytes } from "node:crypto";
import { lstat, mkdir, mkdtemp, readFile, readdir, rm, symlink, writeFile, chmod } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Dockerode from "dockerode";
import { TransferError, type Sandbox } from "@proctor/sandbox";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { dockerTestGate } from "./gate";
import { DockerRuntime } from "./runtime";
import { BUSYBOX, testContainers, until } from "./test-helpers";

const docker = new Dockerode();
const run = await dockerTestGate(docker);

describe.skipIf(!run)("DockerSandbox file transfer", () => {
  const tracked = testContainers(docker, "transfer");
  const runtime = new DockerRuntime({ docker });
  let sandbox: Sandbox;
  let host: string;

  beforeAll(async () => {
    host = await mkdtemp(join(tmpdir(), "proctor-transfer-"));
    sandbox = await runtime.create({ image: BUSYBOX, labels: tracked.labels });
  });
  afterAll(async () => {
    await sandbox?.kill();
    await runtime.drain();
    await tracked.cleanup();
    if (host) await rm(host, { recursive: true, force: true });
  });

  it("uploads and downloads a tree: bytes, modes and empty dirs survive; download skips links", async () => {
    const src = join(host, "src");
    const binary = randomBytes(300_000);
    await mkdir(join(src, "nested/deeper"), { recursive: true });
    await mkdir(join(src, "empty"));
    await writeFile(join(src, "blob.bin"), binary);
    await writeFile(join(src, "run.sh"), "#!/bin/sh\necho ran\n");
    await chmod(join(src, "run.sh"), 0o755);
    await writeFile(join(src, "nested/deeper/secret.txt"), "s");
    await chmod(join(src, "nested/deeper/secret.txt"), 0o600);
    await symlink("nested/deeper/secret.txt", join(src, "link"));

    await sandbox.upload(src, "/data/in"); // /data does not exist yet
    const inside = await sandbox.exec({ shell: "cd /data/in && ./run.sh && stat -c '%a %n' run.sh nested/deeper/secret.txt && readlink link && ls -d empty && md5sum blob.bin" });
    expect(inside.exitCode).toBe(0);
    const md5 = (await import("node:crypto")).createHash("md5").update(binary).digest("hex");
    expect(inside.stdout).toBe(`ran\n755 run.sh\n600 nested/deeper/secret.txt\nnested/deeper/secret.txt\nempty\n${md5}  blob.bin\n`);
    // Missing parents are made as `mkdir -p` as root would.
    expect((await sandbox.exec(["stat", "-c", "%a %u", "/data"])).stdout).toBe("755 0\n");

    const back = join(host, "back");
    const report = await sandbox.download("/data/in", back);
    expect((await readdir(back)).sort()).toEqual(["blob.bin", "empty", "nested", "run.sh"]);
    expect(report).toMatchObject({ files: 3, truncated: false, skipped: [expect.stringMatching(/link$/)] });
    expect((await readFile(join(back, "blob.bin"))).equals(binary)).toBe(true);
    expect((await lstat(join(back, "run.sh"))).mode & 0o777).toBe(0o755);
    expect((await lstat(join(back, "nested/deeper/secret.txt"))).mode & 0o777).toBe(0o600);
    expect(await readdir(join(back, "empty"))).toEqual([]);
  });

  it("download stops reading at maxBytes: a 3 GB sparse file costs a few MB, FIFOs and devices are skipped", async () => {
    await sandbox.exec({ shell: "mkdir -p /big && truncate -s 3G /big/huge && mkfifo /big/fifo && echo hi > /big/small" });
    const back = join(host, "capped");
    const report = await sandbox.download("/big", back, { maxBytes: 2 * 1024 * 1024 });
    expect(report.truncated).toBe(true);
    expect(report.bytes).toBeLessThanOrEqual(2 * 1024 * 1024);
    const sizes = await Promise.all((await readdir(back)).map(async (name) => (await lstat(join(back, name))).size));
    expect(sizes.reduce((a, b) => a + b, 0)).toBeLessThanOrEqual(2 * 1024 * 1024);
    expect(await lstat(join(back, "fifo")).catch(() => null)).toBeNull();
  });

  it("uploads a single file as the target path, or into the target when it is a directory", async () => {
    const file = join(host, "one.txt");
    await writeFile(file, "single\n");
    await sandbox.upload(file, "/opt/files/renamed.txt");
    expect((await sandbox.readFile("/opt/files/renamed.txt"))?.toString()).toBe("single\n");
    await sandbox.upload(file, "/opt/files");
    expect((await sandbox.readFile("/opt/files/one.txt"))?.toString()).toBe("single\n");
    await expect(sandbox.upload(join(host, "missing"), "/x")).rejects.toBeInstanceOf(TransferError);
  });

  it("writes and reads files: text, binary, modes, relative paths, symlinks", async () => {
    await sandbox.writeFile("/tmp/w/hello.txt", "hello");
    expect((await sandbox.readFile("/tmp/w/hello.txt"))?.toString()).toBe("hello");
    const bytes = randomBytes(5000);
    await sandbox.writeFile("/tmp/w/bytes.bin", bytes);
    expect((await sandbox.readFile("/tmp/w/bytes.bin"))?.equals(bytes)).toBe(true);
    await sandbox.writeFile("/tmp/w/tool.sh", "#!/bin/sh\necho tool\n", { mode: 0o755 });
    expect((await sandbox.exec(["/tmp/w/tool.sh"])).stdout).toBe("tool\n");
    await sandbox.writeFile("relative.txt", "in workdir");
    expect((await sandbox.exec(["cat", `${sandbox.workdir}/relative.txt`])).stdout).toBe("in workdir");
    await sandbox.exec(["ln", "-s", "hello.txt", "/tmp/w/alias"]);
    expect((await sandbox.readFile("/tmp/w/alias"))?.toString()).toBe("hello");
  });

  it("readFile: null when missing, errors past maxBytes and for directories", async () => {
    expect(await sandbox.readFile("/no/such/file")).toBeNull();
    await sandbox.writeFile("/tmp/big.bin", Buffer.alloc(2048));
    await expect(sandbox.readFile("/tmp/big.bin", { maxBytes: 1024 })).rejects.toThrow(/2048 bytes, above the 1024 byte limit/);
    expect((await sandbox.readFile("/tmp/big.bin", { maxBytes: 2048 }))?.length).toBe(2048);
    await expect(sandbox.readFile("/tmp")).rejects.toBeInstanceOf(TransferError);
  });

  it("transfers: odd and 150-byte names survive both ways, a cut download leaves no tar running, a stopped container still takes and gives files", async () => {
    const long = "n".repeat(150);
    await sandbox.exec({ shell: `mkdir -p "/odd/a dir" && echo 1 > "/odd/-x" && echo 2 > "/odd/a dir/${long}" && echo 3 > /odd/é` });
    const back = join(host, "odd");
    expect(await sandbox.download("/odd", back)).toMatchObject({ files: 3, truncated: false, skipped: [] });
    expect(await readFile(join(back, "a dir", long), "utf8")).toBe("2\n");
    expect(await readFile(join(back, "-x"), "utf8")).toBe("1\n");
    expect(await readFile(join(back, "é"), "utf8")).toBe("3\n");
    // And back in: the same names through upload.
    await sandbox.upload(back, "/odd-again");
    expect((await sandbox.exec({ shell: `cat "/odd-again/a dir/${long}" /odd-again/-x /odd-again/é` })).stdout).toBe("2\n1\n3\n");

    await sandbox.exec({ shell: "mkdir -p /big2 && truncate -s 2G /big2/huge" });
    expect((await sandbox.download("/big2", join(host, "cut"), { maxBytes: 1024 })).truncated).toBe(true);
    const tarLeft = async () => (await sandbox.exec({ shell: "ps -o args | grep -c '[t]ar -c' || true" }, { user: "0" })).stdout.trim();
    expect(await until(async () => (await tarLeft()) === "0", 30_000)).toBe(true);

    const stopping = await runtime.create({ image: BUSYBOX, labels: tracked.labels });
    await stopping.exec({ shell: "mkdir -p /keep && echo kept > /keep/f" });
    await docker.getContainer((stopping as unknown as { id: string }).id).stop({ t: 0 });
    await stopping.writeFile("/keep/g", "written while stopped\n");
    const fromStopped = join(host, "stopped");
    expect(await stopping.download("/keep", fromStopped)).toMatchObject({ files: 2 });
    expect(await readFile(join(fromStopped, "g"), "utf8")).toBe("written while stopped\n");
    expect(await readFile(join(fromStopped, "f"), "utf8")).toBe("kept\n");
    // Entries from a stopped container come one by one through the archive API, in order.
    const entriesStopped = join(host, "stopped-entries");
    expect(await stopping.download("/", entriesStopped, { entries: ["keep", "missing"], maxBytes: 8 })).toMatchObject({ truncated: true, bytes: 8, cutAt: expect.stringMatching(/^keep\/[fg]$/) });
    await stopping.kill();
  });

  it("download with entries: only those, in their order, one budget (cut in the first, the rest not read); none present copies nothing", async () => {
    await sandbox.exec({ shell: "mkdir -p /lg/first /lg/second /lg/other && head -c 3000 /dev/zero > /lg/first/a && head -c 3000 /dev/zero > /lg/second/b && echo x > /lg/other/c && ln -s /etc /lg/first/link" });
    const all = join(host, "entries-all");
    expect(await sandbox.download("/lg", all, { entries: ["second", "missing", "first"] })).toMatchObject({ files: 2, bytes: 6000, truncated: false, skipped: ["./first/link"] });
    expect((await readdir(all)).sort()).toEqual(["first", "second"]);
    const cut = join(host, "entries-cut");
    const report = await sandbox.download("/lg", cut, { entries: ["first", "second"], maxBytes: 1000 });
    expect(report).toMatchObject({ truncated: true, bytes: 1000, cutAt: "first/a" });
    expect(await readdir(cut)).toEqual(["first"]);
    expect(await sandbox.download("/lg", join(host, "entries-none"), { entries: ["nope"] })).toEqual({ files: 0, bytes: 0, truncated: false, skipped: [] });
    await expect(sandbox.download("/lg", join(host, "entries-bad"), { entries: ["../etc"] })).rejects.toThrow(/entries must be plain names/);
  });

  it("download: a missing source copies nothing; a file lands in hostDir under its name", async () => {
    const dest = join(host, "nothing");
    await sandbox.download("/no/such/dir", dest);
    await expect(readdir(dest)).rejects.toMatchObject({ code: "ENOENT" });
    const single = join(host, "single");
    await sandbox.download("/tmp/w/hello.txt", single);
    expect(await readdir(single)).toEqual(["hello.txt"]);
    expect(await readFile(join(single, "hello.txt"), "utf8")).toBe("hello");
  });
});

describe.skipIf(!run)("DockerSandbox halt", () => {
  const tracked = testContainers(docker, "halt");
  const runtime = new DockerRuntime({ docker });
  let host: string;

  beforeAll(async () => {
    host = await mkdtemp(join(tmpdir(), "proctor-halt-"));
  });
  afterAll(async () => {
    await runtime.drain();
    await tracked.cleanup();
    if (host) await rm(host, { recursive: true, force: true });
  });

  /** The container's daemon events from `since` (s, fractional) until now: exec_create, archive-path, ... */
  const eventsSince = async (id: string, since: number): Promise<string[]> => {
    const { execFile } = await import("node:child_process");
    const { promisify } = await import("node:util");
    const { stdout } = await promisify(execFile)("docker", ["events", "--since", since.toFixed(3), "--until", (Date.now() / 1000).toFixed(3), "--filter", `container=${id}`, "--format", "{{.Action}}"]);
    return stdout.split("\n").filter(Boolean);
  };
  const tree = async (dir: string, rel = ""): Promise<string[]> => {
    const out: string[] = [];
    for (const entry of (await readdir(join(dir, rel), { withFileTypes: true })).sort((a, b) => a.name.localeCompare(b.name))) {
      const path = rel ? `${rel}/${entry.name}` : entry.name;
      const info = await lstat(join(dir, path));
      if (entry.isDirectory()) out.push(`${path}/ ${(info.mode & 0o777).toString(8)}`, ...(await tree(dir, path)));
      else out.push(`${path} ${(info.mode & 0o777).toString(8)} ${(await readFile(join(dir, path))).toString("base64").slice(0, 40)} ${info.size}`);
    }
    return out;
  };

  it("a halted sandbox's logs come from its upper dir: the tree a running download gives, with no exec and no archive call; the cut is the same", async () => {
    const sandbox = await runtime.create({ image: BUSYBOX, labels: tracked.labels });
    const made = await sandbox.exec({
      shell: "mkdir -p /logs/verifier/sub && printf 1 > /logs/verifier/reward.txt && head -c 200000 /dev/urandom > /logs/agent/blob && chmod 600 /logs/agent/blob && ln -s /etc/passwd /logs/agent/link && mkfifo /logs/agent/fifo && : > /logs/verifier/sub/empty && echo x > /etc/added",
    });
    expect(made.exitCode, made.stderr).toBe(0);
    const options = { entries: ["verifier", "agent"], maxBytes: 1_000_000 };
    const running = await sandbox.download("/logs", join(host, "running"), options);
    const runningCut = await sandbox.download("/logs", join(host, "running-cut"), { ...options, maxBytes: 100_001 });

    expect(sandbox.halt).toBeDefined();
    await sandbox.halt?.();
    const since = Date.now() / 1000;
    const halted = await sandbox.download("/logs", join(host, "halted"), options);
    const haltedCut = await sandbox.download("/logs", join(host, "halted-cut"), { ...options, maxBytes: 100_001 });
    expect(await eventsSince(sandbox.id, since)).toEqual([]);

    const normal = (report: typeof running) => ({ ...report, skipped: report.skipped.map((name) => name.replace(/^\.\//, "")).sort() });
    expect(normal(halted)).toEqual(normal(running));
    expect(halted).toMatchObject({ files: 3, bytes: 200_001, truncated: false });
    expect(normal(halted).skipped).toEqual(["agent/fifo", "agent/link"]);
    expect(await tree(join(host, "halted"))).toEqual(await tree(join(host, "running")));
    expect(normal(haltedCut)).toEqual(normal(runningCut));
    expect(haltedCut).toMatchObject({ truncated: true, cutAt: "agent/blob", bytes: 100_001 });
    expect(await tree(join(host, "halted-cut"))).toEqual(await tree(join(host, "running-cut")));

    // /etc is the image's too: that goes through the daemon's archive API, merged view and all.
    const etcSince = Date.now() / 1000;
    await sandbox.download("/etc", join(host, "etc"));
    expect(await eventsSince(sandbox.id, etcSince)).toContain("archive-path");
    expect((await readdir(join(host, "etc"))).sort()).toEqual(expect.arrayContaining(["added", "passwd"]));

    await expect(sandbox.exec(["true"])).rejects.toThrow();
    await sandbox.kill();
    await runtime.drain();
    expect(await until(async () => (await docker.listContainers({ all: true, filters: { id: [sandbox.id] } })).length === 0, 10_000)).toBe(true);
  });

  it("download with links and exclude: links come as links (never followed, here or there), excluded entries are not read; the same running, halted and from the archive API", async () => {
    const sandbox = await runtime.create({ image: BUSYBOX, labels: tracked.labels });
    const made = await sandbox.exec({
      shell: "mkdir -p /work/.git/objects /work/src && echo secret > /work/.git/config && echo code > /work/src/a.py && ln -s /etc/passwd /work/passwd-link && ln -s src /work/src-link && mkfifo /work/fifo",
    });
    expect(made.exitCode, made.stderr).toBe(0);
    const options = { links: true, exclude: [".git"] };
    const check = async (dir: string) => {
      expect((await readdir(dir)).sort()).toEqual(["passwd-link", "src", "src-link"]);
      expect((await lstat(join(dir, "passwd-link"))).isSymbolicLink()).toBe(true);
      expect(await (await import("node:fs/promises")).readlink(join(dir, "passwd-link"))).toBe("/etc/passwd");
      expect(await (await import("node:fs/promises")).readlink(join(dir, "src-link"))).toBe("src");
      expect(await readFile(join(dir, "src", "a.py"), "utf8")).toBe("code\n");
    };
    const running = await sandbox.download("/work", join(host, "links-running"), options);
    await check(join(host, "links-running"));
    expect(running.skipped.map((s) => s.replace(/^\.\//, ""))).toEqual(["fifo"]);
    // Without links they are skipped and listed, as before.
    const plain = await sandbox.download("/work", join(host, "links-plain"), { exclude: [".git"] });
    expect(plain.skipped.map((s) => s.replace(/^\.\//, "")).sort()).toEqual(["fifo", "passwd-link", "src-link"]);

    await sandbox.halt?.();
    await sandbox.download("/work", join(host, "links-halted"), options);
    await check(join(host, "links-halted"));
    // A path the image also has goes through the archive API (a directory of the image: /etc).
    const etc = await sandbox.download("/etc", join(host, "links-etc"), { links: true, exclude: ["passwd"] });
    expect(etc.files).toBeGreaterThan(0);
    expect((await readdir(join(host, "links-etc"))).includes("passwd")).toBe(false);
    await sandbox.kill();
  });
});

describe("extractBounded", () => {
  it("never writes through a link the archive made: an entry below one is skipped", async () => {
    const { extractBounded } = await import("./extract-bounded");
    const tar = await import("tar");
    const { Readable } = await import("node:stream");
    const src = await mkdtemp(join(tmpdir(), "proctor-xb-src-"));
    const dest = await mkdtemp(join(tmpdir(), "proctor-xb-dest-"));
    const outside = await mkdtemp(join(tmpdir(), "proctor-xb-outside-"));
    try {
      // An archive with "a" -> outside, then "a/planted" (made by hand: tar never writes this itself).
      await symlink(outside, join(src, "a"));
      const first = await new Promise<Buffer>((done) => {
        const chunks: Buffer[] = [];
        tar.c({ cwd: src, portable: true }, ["a"]).on("data", (c: Buffer) => chunks.push(c)).on("end", () => done(Buffer.concat(chunks)));
      });
      await rm(join(src, "a"));
      await mkdir(join(src, "a"));
      await writeFile(join(src, "a", "planted"), "x");
      const second = await new Promise<Buffer>((done) => {
        const chunks: Buffer[] = [];
        tar.c({ cwd: src, portable: true }, ["a/planted"]).on("data", (c: Buffer) => chunks.push(c)).on("end", () => done(Buffer.concat(chunks)));
      });
      // Concatenated archives: drop the first one's end blocks.
      const archive = Buffer.concat([first.subarray(0, first.length - 1024), second]);
      const report = await extractBounded(Readable.from([archive]), dest, { strip: 0, maxBytes: 1_000_000, links: true });
      expect(await readdir(outside)).toEqual([]);
      expect(report.skipped).toEqual(["a/planted"]);
      expect((await lstat(join(dest, "a"))).isSymbolicLink()).toBe(true);
    } finally {
      for (const dir of [src, dest, outside]) await rm(dir, { recursive: true, force: true });
    }
  });
});
