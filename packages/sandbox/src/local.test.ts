import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync, realpathSync } from "node:fs";
import { chmod, lstat, readlink, mkdir, mkdtemp, readdir, readFile, rm, stat, symlink, writeFile } from "node:fs/promises";
import { tmpdir, userInfo } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SandboxClosedError, SandboxError, TransferError } from "./errors";
import { linkedModules } from "./fixtures/linked-modules";
import { LocalRuntime, type LocalSandbox } from "./local";
import type { Sandbox } from "./types";

/** Sleep durations unique to this test process, so another run of the suite on the machine never matches. */
const S = 1_000_000 + (process.pid % 100_000) * 10;

let rootDir: string;
let runtime: LocalRuntime;
const open: Sandbox[] = [];

beforeAll(async () => {
  rootDir = await mkdtemp(join(tmpdir(), "proctor-local-test-"));
  runtime = new LocalRuntime({ rootDir, streamDrainMs: 200 });
});

afterAll(async () => {
  await Promise.all(open.map((s) => s.kill()));
  await rm(rootDir, { recursive: true, force: true });
});

async function sandbox(options: { env?: Record<string, string>; workdir?: string } = {}): Promise<LocalSandbox> {
  const s = (await runtime.create({ image: "proctor/base:bookworm", ...options })) as LocalSandbox;
  open.push(s);
  return s;
}

/** Pids whose full command line matches `pattern` (pgrep -f), zombies excluded. */
function pgrep(pattern: string): number[] {
  try {
    const out = execFileSync("ps", ["-eo", "pid=,stat=,args="], { encoding: "utf8" });
    return out
      .split("\n")
      .map((line) => line.trim().match(/^(\d+)\s+(\S+)\s+(.*)$/))
      .filter((m): m is RegExpMatchArray => m !== null && !m[2]?.startsWith("Z") && new RegExp(pattern).test(m[3] ?? ""))
      .filter((m) => !(m[3] ?? "").startsWith("ps "))
      .map((m) => Number(m[1]));
  } catch {
    return [];
  }
}

/** Poll (bounded) until the pattern has no live processes; returns what is still alive. */
async function gone(pattern: string, timeoutMs = 20_000): Promise<number[]> {
  const end = Date.now() + timeoutMs;
  while (Date.now() < end) {
    if (pgrep(pattern).length === 0) return [];
    await new Promise((r) => setTimeout(r, 100));
  }
  return pgrep(pattern);
}

describe("exec", () => {
  it("returns exit codes without throwing, 128+signal when killed, 127 when the program is missing", async () => {
    const s = await sandbox();
    expect((await s.exec(["true"])).exitCode).toBe(0);
    expect((await s.exec(["sh", "-c", "exit 3"])).exitCode).toBe(3);
    expect((await s.exec({ shell: "kill -TERM $$" })).exitCode).toBe(143);
    const missing = await s.exec(["definitely-not-a-program-xyz"]);
    expect(missing.exitCode).toBe(127);
    expect(missing.stderr).toContain("definitely-not-a-program-xyz");
    await expect(s.exec([])).rejects.toThrow(SandboxError);
  });

  it("keeps stdout and stderr apart, passes stdin, and never splits argv on spaces", async () => {
    const s = await sandbox();
    const r = await s.exec({ shell: "echo out; echo err >&2; cat" }, { stdin: "from stdin" });
    expect(r).toMatchObject({ exitCode: 0, stdout: "out\nfrom stdin", stderr: "err\n", truncated: false, timedOut: false });
    const argv = await s.exec(["printf", "%s|", "a b", "$HOME", "c"]);
    expect(argv.stdout).toBe("a b|$HOME|c|");
  });

  it("streams output to the callbacks while the command runs, in order", async () => {
    const s = await sandbox();
    const flag = join(s.root, "tmp", "go");
    const chunks: string[] = [];
    // The command waits for a file the test only creates once it has seen "ready" stream in.
    const r = await s.exec(
      { shell: `echo ready; while [ ! -e "$TMPDIR/go" ]; do sleep 0.02; done; for i in 1 2 3 4 5; do echo line$i; done` },
      {
        timeoutMs: 20_000,
        onStdout: (chunk) => {
          chunks.push(chunk.toString());
          if (chunk.toString().includes("ready")) void writeFile(flag, "");
        },
      },
    );
    expect(r.timedOut).toBe(false);
    expect(chunks.join("")).toBe("ready\nline1\nline2\nline3\nline4\nline5\n");
    expect(r.stdout).toBe(chunks.join(""));
  });

  it("cuts 50 MB of output at the cap with flat memory, and the callbacks still see all of it", async () => {
    // In a child node with --expose-gc, so RSS shows what exec retains rather than GC lag.
    const out = execFileSync(
      process.execPath,
      ["--expose-gc", "--conditions=@proctor/source", "--import", "tsx", join(import.meta.dirname, "fixtures/output-memory.ts"), "50", rootDir],
      { encoding: "utf8" },
    );
    const r = JSON.parse(out) as { growthMb: number; seen: number; stdoutLength: number; truncated: boolean; exitCode: number };
    console.log(`50 MB through exec: rss growth ${r.growthMb.toFixed(1)} MB`);
    expect(r).toMatchObject({ exitCode: 0, seen: 50 * 1024 * 1024, truncated: true });
    expect(r.stdoutLength).toBeLessThan(1024 * 1024 + 100);
    expect(r.growthMb).toBeLessThan(16);

    // And in this process: the kept text is head + note + tail.
    const s = await sandbox();
    const small = await s.exec({ shell: "printf start; head -c 5000 /dev/zero | tr '\\0' x; printf end" }, { maxOutputBytes: 100 });
    expect(small.truncated).toBe(true);
    expect(small.stdout).toBe(`start${"x".repeat(45)}\n[proctor: 4908 bytes of output cut]\n${"x".repeat(47)}end`);
  });

  it("kills the whole process group on timeout, children included", async () => {
    const s = await sandbox();
    const r = await s.exec({ shell: `sleep ${S + 1} & sleep ${S + 2} & echo started; wait` }, { timeoutMs: 2000 }); // time to echo even under load
    expect(r).toMatchObject({ timedOut: true, aborted: false, exitCode: 137, stdout: "started\n" });
    expect(await gone(`sleep (${S + 1}|${S + 2})`)).toEqual([]);
  });

  it("kills the process group on abort", async () => {
    const s = await sandbox();
    const controller = new AbortController();
    const r = await s.exec(
      { shell: `sh -c 'sleep ${S + 4}' & echo started; sleep ${S + 5}` },
      { signal: controller.signal, onStdout: () => controller.abort() },
    );
    expect(r).toMatchObject({ aborted: true, timedOut: false, exitCode: 137 });
    expect(await gone(`sleep (${S + 4}|${S + 5})`)).toEqual([]);
    const pre = await s.exec(["true"], { signal: controller.signal });
    expect(pre).toMatchObject({ aborted: true, exitCode: -1 });
  });

  it("returns when the command exits though a background child holds stdout; kill() ends the child", async () => {
    const s = await sandbox();
    const r = await s.exec({ shell: `sleep ${S + 6} & echo started` });
    expect(r).toMatchObject({ exitCode: 0, stdout: "started\n", timedOut: false });
    expect(pgrep(`sleep ${S + 6}`)).toHaveLength(1);
    await s.kill();
    expect(await gone(`sleep ${S + 6}`)).toEqual([]);
  });

  it("kills processes that left the process group (setsid) when the sandbox is killed", async () => {
    const s = await sandbox();
    await s.exec({ shell: `setsid sleep ${S + 7} >/dev/null 2>&1 < /dev/null &` });
    expect(pgrep(`sleep ${S + 7}`)).toHaveLength(1);
    await s.kill();
    expect(await gone(`sleep ${S + 7}`)).toEqual([]);
  });

  it("maps cwd through the root and refuses escapes and other users", async () => {
    const s = await sandbox({ workdir: "/testbed" });
    expect(s.workdir).toBe("/testbed");
    expect((await s.exec(["pwd"])).stdout.trim()).toBe(join(s.root, "testbed"));
    await s.exec(["mkdir", "-p", "sub/dir"]);
    expect((await s.exec(["pwd"], { cwd: "sub/dir" })).stdout.trim()).toBe(join(s.root, "testbed/sub/dir"));
    expect((await s.exec(["pwd"], { cwd: "/logs/verifier" })).stdout.trim()).toBe(join(s.root, "logs/verifier"));
    await expect(s.exec(["pwd"], { cwd: "/../.." })).rejects.toThrow(/climbs above/);
    await expect(s.exec(["pwd"], { cwd: "/nope" })).rejects.toThrow(/does not exist/);
    await expect(s.exec(["id"], { user: "nobody-such-user" })).rejects.toThrow(/not supported by the local runtime/);
    expect((await s.exec(["true"], { user: userInfo().username })).exitCode).toBe(0);
  });

  it("passes only allowlisted host env, plus the path vars, create env and exec env", async () => {
    process.env.PROCTOR_FAKE_SECRET = "hunter2";
    try {
      const s = await sandbox({ env: { FROM_CREATE: "c", BOTH: "create" } });
      const r = await s.exec(["env"], { env: { FROM_EXEC: "e", BOTH: "exec" } });
      const env = Object.fromEntries(r.stdout.trim().split("\n").map((l) => [l.slice(0, l.indexOf("=")), l.slice(l.indexOf("=") + 1)]));
      expect(r.stdout).not.toContain("hunter2");
      expect(env.PROCTOR_FAKE_SECRET).toBeUndefined();
      expect(env).toMatchObject({
        PATH: process.env.PATH,
        HOME: join(s.root, "root-home"),
        TMPDIR: join(s.root, "tmp"),
        PROCTOR_WORKDIR: join(s.root, "app"),
        PROCTOR_LOGS_DIR: join(s.root, "logs"),
        PROCTOR_VERIFIER_LOGS_DIR: join(s.root, "logs/verifier"),
        PROCTOR_TESTS_DIR: join(s.root, "tests"),
        FROM_CREATE: "c",
        FROM_EXEC: "e",
        BOTH: "exec",
      });
      const keys = Object.keys(env).filter((k) => !k.startsWith("PROCTOR_") && !["HOME", "TMPDIR", "FROM_CREATE", "FROM_EXEC", "BOTH", "PWD", "SHLVL", "_"].includes(k));
      expect(keys.every((k) => ["PATH", "LANG", "LC_ALL", "TZ", "TERM"].includes(k))).toBe(true);
    } finally {
      delete process.env.PROCTOR_FAKE_SECRET;
    }
  });

  it("lets a verifier written for Docker find its reward file through PROCTOR_LOGS_DIR", async () => {
    const s = await sandbox();
    await s.writeFile("/tests/test.sh", 'echo 1 > "${PROCTOR_LOGS_DIR:-/logs}/verifier/reward.txt"\n', { mode: 0o755 });
    const r = await s.exec({ shell: '"$PROCTOR_TESTS_DIR/test.sh"' });
    expect(r.exitCode).toBe(0);
    expect((await s.readFile("/logs/verifier/reward.txt"))?.toString()).toBe("1\n");
  });
});

describe("files", () => {
  it("round-trips a directory: binary bytes, modes and empty dirs; download never follows or copies links", async () => {
    const s = await sandbox();
    const src = await mkdtemp(join(rootDir, "src-"));
    const blob = randomBytes(300_000);
    await mkdir(join(src, "nested/deeper"), { recursive: true });
    await mkdir(join(src, "empty"));
    await writeFile(join(src, "nested/deeper/blob.bin"), blob);
    await writeFile(join(src, "run.sh"), "#!/bin/sh\necho ran\n");
    await chmod(join(src, "run.sh"), 0o755);
    await writeFile(join(src, "private"), "p");
    await chmod(join(src, "private"), 0o600);
    await symlink("nested/deeper/blob.bin", join(src, "link"));
    await s.upload(src, "/app/data");
    expect((await s.exec(["./data/run.sh"])).stdout).toBe("ran\n");

    const back = join(rootDir, `back-${Date.now()}`);
    const report = await s.download("/app/data", back);
    expect((await readFile(join(back, "nested/deeper/blob.bin"))).equals(blob)).toBe(true);
    expect((await stat(join(back, "run.sh"))).mode & 0o777).toBe(0o755);
    expect((await stat(join(back, "private"))).mode & 0o777).toBe(0o600);
    expect(await lstat(join(back, "link")).catch(() => null)).toBeNull();
    expect(report).toMatchObject({ files: 3, truncated: false });
    expect(report.skipped).toEqual(["link"]);
    expect(await readdir(join(back, "empty"))).toEqual([]);
  });

  it("download stops at maxBytes: the file crossing it is cut and nothing after it is copied", async () => {
    const s = await sandbox();
    await s.exec({ shell: 'mkdir -p "$PROCTOR_LOGS_DIR/agent" && head -c 5000 /dev/zero > "$PROCTOR_LOGS_DIR/agent/a" && truncate -s 3G "$PROCTOR_LOGS_DIR/agent/b"' });
    const back = join(rootDir, `capped-${Date.now()}`);
    const report = await s.download("/logs/agent", back, { maxBytes: 8000 });
    expect(report).toMatchObject({ truncated: true, bytes: 8000 });
    expect((await stat(join(back, "a"))).size + (await stat(join(back, "b"))).size).toBe(8000);
  });

  it("download with entries: only those, in their order, one budget; the cut file is named", async () => {
    const s = await sandbox();
    await s.exec({ shell: 'cd "$PROCTOR_LOGS_DIR" && mkdir -p first second other && head -c 3000 /dev/zero > first/a && head -c 3000 /dev/zero > second/b && echo x > other/c' });
    const all = join(rootDir, `entries-all-${Date.now()}`);
    expect(await s.download("/logs", all, { entries: ["second", "missing", "first"] })).toMatchObject({ files: 2, bytes: 6000, truncated: false });
    expect((await readdir(all)).sort()).toEqual(["first", "second"]);
    const cut = join(rootDir, `entries-cut-${Date.now()}`);
    expect(await s.download("/logs", cut, { entries: ["second", "first"], maxBytes: 1000 })).toMatchObject({ truncated: true, bytes: 1000, cutAt: "second/b" });
    expect(await readdir(cut)).toEqual(["second"]);
    await expect(s.download("/logs", cut, { entries: ["a/b"] })).rejects.toThrow(/entries must be plain names/);
  });

  it("download with links and exclude: links come as links with their target text, never followed; excluded top-level entries are left out", async () => {
    const s = await sandbox();
    await s.exec({ shell: 'cd "$PROCTOR_WORKDIR" && mkdir -p .git src && echo secret > .git/config && echo code > src/a.py && ln -s /etc/passwd passwd-link && ln -s src src-link' });
    const back = join(rootDir, `links-${Date.now()}`);
    const report = await s.download("/app", back, { links: true, exclude: [".git"] });
    expect(report.skipped).toEqual([]);
    expect((await readdir(back)).sort()).toEqual(["passwd-link", "src", "src-link"]);
    expect(await readlink(join(back, "passwd-link"))).toBe("/etc/passwd");
    expect(await readlink(join(back, "src-link"))).toBe("src");
    expect(await readFile(join(back, "src", "a.py"), "utf8")).toBe("code\n");
  });

  it("uploads a single file to a path or into an existing dir", async () => {
    const s = await sandbox();
    const file = join(await mkdtemp(join(rootDir, "f-")), "solve.sh");
    await writeFile(file, "echo solved\n");
    await chmod(file, 0o750);
    await s.upload(file, "/solution/solve.sh");
    await s.upload(file, "/app");
    expect((await s.readFile("/solution/solve.sh"))?.toString()).toBe("echo solved\n");
    expect((await stat(s.hostPath("/app/solve.sh"))).mode & 0o777).toBe(0o750);
    await expect(s.upload(join(rootDir, "missing"), "/app/x")).rejects.toThrow(TransferError);
  });

  it("writes files with modes, reads them back, null when missing, refuses past maxBytes", async () => {
    const s = await sandbox();
    await s.writeFile("/logs/agent/x/out.bin", new Uint8Array([0, 1, 2, 255]), { mode: 0o640 });
    expect((await s.readFile("/logs/agent/x/out.bin"))?.equals(Buffer.from([0, 1, 2, 255]))).toBe(true);
    expect((await stat(s.hostPath("/logs/agent/x/out.bin"))).mode & 0o777).toBe(0o640);
    expect(await s.readFile("/logs/verifier/reward.json")).toBeNull();
    await s.writeFile("big.txt", "x".repeat(100));
    await expect(s.readFile("/app/big.txt", { maxBytes: 99 })).rejects.toThrow(/larger than the 99 byte limit/);
    expect((await s.readFile("/app/big.txt", { maxBytes: 100 }))?.length).toBe(100);
    await expect(s.readFile("/app")).rejects.toThrow(TransferError);
    await expect(s.writeFile("/../../etc/x", "no")).rejects.toThrow(/climbs above/);
  });

  // nodejs/node#51142: once this process stats a FIFO or socket into Node's shared stat buffer,
  // require() stops resolving symlinks (a pnpm dependency's own dependencies are then looked up in
  // the wrong node_modules). An agent's files must never do that to a long-lived server or worker.
  it("an agent's FIFOs and sockets: readFile refuses them at once, download skips them, kill removes them; require() still resolves links", async () => {
    const resolvesLinks = await linkedModules(realpathSync(await mkdtemp(join(rootDir, "modules-"))));

    const s = await sandbox();
    const made = await s.exec({
      shell: 'v="$PROCTOR_VERIFIER_LOGS_DIR"; mkfifo "$v/reward.txt" pipe && python3 -c "import socket, sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])" "$v/sock" && echo 1 > "$v/kept.txt"',
    });
    expect(made.exitCode, made.stderr).toBe(0);
    await expect(s.readFile("/logs/verifier/reward.txt")).rejects.toThrow(/reward.txt is not a regular file/);
    expect(resolvesLinks()).toBe("the store's dep");
    const back = join(rootDir, `fifo-back-${Date.now()}`);
    const report = await s.download("/logs/verifier", back);
    expect(report).toMatchObject({ files: 1, truncated: false });
    expect(report.skipped.sort()).toEqual(["reward.txt", "sock"]);
    expect(await readdir(back)).toEqual(["kept.txt"]);
    expect(resolvesLinks()).toBe("the store's dep");
    await s.kill();
    expect(existsSync(s.root)).toBe(false);
    expect(resolvesLinks()).toBe("the store's dep");
  });

  it("download of a missing source copies nothing", async () => {
    const s = await sandbox();
    const target = join(rootDir, `none-${Date.now()}`);
    await s.download("/logs/nothing-here", target);
    expect(existsSync(target)).toBe(false);
  });
});

describe("lifecycle", () => {
  it("runs 16 sandboxes at once, each in its own root", async () => {
    const all = await Promise.all(Array.from({ length: 16 }, () => runtime.create({ image: "local" }) as Promise<LocalSandbox>));
    const results = await Promise.all(all.map((s, i) => s.exec({ shell: `echo ${i} > "$PROCTOR_WORKDIR/n"; cat n` })));
    expect(results.map((r) => r.stdout.trim())).toEqual(all.map((_, i) => String(i)));
    expect(new Set(all.map((s) => s.root)).size).toBe(16);
    await Promise.all(all.map((s) => s.kill()));
    expect(all.filter((s) => existsSync(s.root))).toEqual([]);
  });

  it("kill is idempotent and concurrency-safe; later operations throw SandboxClosedError", async () => {
    const s = (await runtime.create({ image: "local" })) as LocalSandbox;
    let started!: () => void;
    const startedP = new Promise<void>((r) => (started = r));
    const running = s.exec({ shell: `echo started; exec sleep ${S + 8}` }, { onStdout: () => started() });
    await startedP;
    await Promise.all([s.kill(), s[Symbol.asyncDispose](), s.kill()]);
    await s.kill();
    expect(existsSync(s.root)).toBe(false);
    expect(await running).toMatchObject({ aborted: true, exitCode: 137 });
    expect(await gone(`sleep ${S + 8}`)).toEqual([]);
    await expect(s.exec(["true"])).rejects.toThrow(SandboxClosedError);
    await expect(s.readFile("/app/x")).rejects.toThrow(SandboxClosedError);
    await expect(s.writeFile("/app/x", "")).rejects.toThrow(SandboxClosedError);
  });

  it("removes roots even when a command left unwritable directories", async () => {
    const s = (await runtime.create({ image: "local" })) as LocalSandbox;
    await s.exec({ shell: "mkdir -p locked/inner && touch locked/inner/f && chmod 0 locked/inner locked" });
    await s.kill();
    expect(existsSync(s.root)).toBe(false);
  });

  it("resolveImage never builds: the image asked for, or local", async () => {
    expect(await runtime.resolveImage({ image: "python:3.12", buildContext: null, buildTimeoutMs: 1 })).toBe("python:3.12");
    const lines: string[] = [];
    expect(
      await runtime.resolveImage({ image: null, buildContext: "/x/environment", buildTimeoutMs: 1, onProgress: (l) => lines.push(l) }),
    ).toBe("local");
    expect(lines[0]).toContain("not building /x/environment");
  });
});
