import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { chmod, mkdir, writeFile } from "node:fs/promises";
import { connect, createServer } from "node:net";
import { join } from "node:path";

/** Test and bench support: real git repositories served by `git daemon` on loopback. */

/** `git <args>` in `cwd` with a fixed identity; its stdout, trimmed. */
export function git(cwd: string, ...args: string[]): string {
  return execFileSync("git", ["-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main", ...args], { cwd, stdio: ["ignore", "pipe", "pipe"] }).toString().trim();
}

/**
 * A native task at `dir` whose oracle writes `written` to answer.txt and whose test wants
 * `wanted`: equal, the oracle passes; different, it fails (a broken task, fixed in a later commit).
 */
export async function writeTask(dir: string, options: { written: string; wanted: string; instruction?: string }): Promise<void> {
  await mkdir(join(dir, "tests"), { recursive: true });
  await mkdir(join(dir, "solution"), { recursive: true });
  await writeFile(join(dir, "task.toml"), '[metadata]\ncategory = "tiny"\n\n[agent]\ntimeout_sec = 30\n\n[verifier]\ntimeout_sec = 30\n');
  await writeFile(join(dir, "instruction.md"), options.instruction ?? `Write ${options.wanted} to answer.txt.\n`);
  await writeFile(
    join(dir, "tests", "test.sh"),
    `#!/usr/bin/env bash\nlogs="\${PROCTOR_LOGS_DIR:-/logs}/verifier"\nmkdir -p "$logs"\ncd "\${PROCTOR_WORKDIR:-/app}" || exit 0\nif [ "$(cat answer.txt 2>/dev/null)" = "${options.wanted}" ]; then echo 1; else echo "FAIL: answer.txt is not ${options.wanted}"; echo 0; fi | tail -1 > "$logs/reward.txt"\n`,
  );
  await writeFile(join(dir, "solution", "solve.sh"), `#!/usr/bin/env bash\ncd "\${PROCTOR_WORKDIR:-/app}"\necho ${options.written} > answer.txt\n`);
  await chmod(join(dir, "tests", "test.sh"), 0o755);
  await chmod(join(dir, "solution", "solve.sh"), 0o755);
}

/** Commit everything in the work tree `repo`; the new commit's id. */
export function commitAll(repo: string, message: string): string {
  git(repo, "add", "-A");
  git(repo, "commit", "-qm", message);
  return git(repo, "rev-parse", "HEAD");
}

/** A bare copy of the work tree `repo` at `<root>/<name>.git` (what the daemon serves), updated by pushBare. */
export function pushBare(repo: string, root: string, name: string): void {
  const bare = join(root, `${name}.git`);
  execFileSync("git", ["init", "-q", "--bare", bare]);
  git(repo, "push", "-q", "--force", bare, "HEAD:refs/heads/main");
  git(bare, "symbolic-ref", "HEAD", "refs/heads/main");
}

async function freePort(): Promise<number> {
  return new Promise((done, fail) => {
    const server = createServer();
    server.on("error", fail);
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      server.close(() => (typeof address === "object" && address ? done(address.port) : fail(new Error("no port"))));
    });
  });
}

export interface GitDaemon {
  /** git://127.0.0.1:PORT/<name>.git */
  url(name: string): string;
  port: number;
  stop(): Promise<void>;
}

/** `git daemon` serving every repository under `root` on a free loopback port; resolves once it answers. */
export async function startGitDaemon(root: string): Promise<GitDaemon> {
  const port = await freePort();
  const child: ChildProcess = spawn("git", ["daemon", "--reuseaddr", "--export-all", "--informative-errors", `--base-path=${root}`, "--listen=127.0.0.1", `--port=${port}`, root], { stdio: ["ignore", "ignore", "pipe"] });
  let stderr = "";
  child.stderr?.on("data", (c: Buffer) => (stderr += c.toString()));
  const daemon: GitDaemon = {
    port,
    url: (name) => `git://127.0.0.1:${port}/${name}.git`,
    stop: () =>
      new Promise<void>((done) => {
        if (child.exitCode !== null || child.signalCode !== null) return done();
        child.once("close", () => done());
        child.kill("SIGTERM");
      }),
  };
  for (let i = 0; i < 100; i++) {
    if (child.exitCode !== null) throw new Error(`git daemon exited ${child.exitCode}: ${stderr}`);
    if (await accepts(port)) return daemon;
    await new Promise((r) => setTimeout(r, 100));
  }
  await daemon.stop();
  throw new Error(`git daemon on port ${port} did not answer: ${stderr}`);
}

/** Whether something accepts TCP connections on loopback `port`. */
function accepts(port: number): Promise<boolean> {
  return new Promise((done) => {
    const socket = connect(port, "127.0.0.1");
    socket.once("connect", () => {
      socket.destroy();
      done(true);
    });
    socket.once("error", () => done(false));
  });
}
