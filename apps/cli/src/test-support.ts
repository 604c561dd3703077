import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { mkdir, writeFile } from "node:fs/promises";
import { join, resolve } from "node:path";

/** Repository root, for examples/ and the CLI entry. */
export const repoRoot = resolve(import.meta.dirname, "../../..");

export interface Finished { code: number | null; stdout: string; stderr: string }

/** Start `proctor <args>` from source, as `pnpm proctor` does. */
export function spawnProctor(args: string[], env: Record<string, string> = {}): ChildProcess {
  return spawn(process.execPath, ["--conditions=@proctor/source", "--import", "tsx", join(repoRoot, "apps/cli/src/main.ts"), ...args], {
    cwd: repoRoot,
    env: { ...process.env, FORCE_COLOR: "0", ...env },
  });
}

/** Collect a child's output until it exits; onStderr sees the stderr so far after each chunk. */
export function finish(child: ChildProcess, onStderr?: (text: string) => void): Promise<Finished> {
  return new Promise((done, fail) => {
    let stdout = "";
    let stderr = "";
    child.stdout?.on("data", (c: Buffer) => (stdout += c.toString()));
    child.stderr?.on("data", (c: Buffer) => {
      stderr += c.toString();
      onStderr?.(stderr);
    });
    child.on("error", fail);
    child.on("close", (code) => done({ code, stdout, stderr }));
  });
}

/** Run `proctor <args>` to the end. */
export function proctor(args: string[], options: { env?: Record<string, string>; onStderr?: (text: string, child: ChildProcess) => void } = {}): Promise<Finished> {
  const child = spawnProctor(args, options.env);
  return finish(child, options.onStderr && ((text) => options.onStderr?.(text, child)));
}

/**
 * A term-executor submission archive in `work`: one task "hello" on a local git repo (the agent
 * writes hello to out.txt; its check greps for it). Returns the .tar.gz path.
 */
export async function helloSubmission(work: string): Promise<string> {
  const repo = join(work, "repo");
  await mkdir(repo);
  const git = (...a: string[]) => execFileSync("git", ["-c", "user.name=t", "-c", "user.email=t@t", ...a], { cwd: repo }).toString().trim();
  git("init", "-q");
  await writeFile(join(repo, "f.txt"), "v1\n");
  git("add", ".");
  git("commit", "-qm", "init");
  const sub = join(work, "sub");
  await mkdir(join(sub, "tasks", "hello", "tests"), { recursive: true });
  await mkdir(join(sub, "agent_code"));
  await writeFile(join(sub, "tasks", "hello", "workspace.yaml"), `repo: ${repo}\nbase_commit: ${git("rev-parse", "HEAD")}\n`);
  await writeFile(join(sub, "tasks", "hello", "prompt.md"), "Write hello to out.txt\n");
  await writeFile(join(sub, "tasks", "hello", "tests", "check.sh"), "grep -q hello out.txt\n");
  await writeFile(join(sub, "agent_code", "run.sh"), '#!/bin/bash\necho hello > "$REPO_DIR/out.txt"\n');
  const archive = join(work, "sub.tar.gz");
  execFileSync("tar", ["-czf", archive, "-C", sub, "."]);
  return archive;
}

/** The URL a `proctor serve` child prints once it listens; rejects (with its stderr) if it exits first. */
export function listeningUrl(server: ChildProcess): Promise<string> {
  return new Promise<string>((done, fail) => {
    let seen = "";
    server.stderr?.on("data", (c: Buffer) => {
      seen += c.toString();
      const m = /listening on (http:\/\/\S+)/.exec(seen);
      if (m?.[1]) done(m[1]);
    });
    server.on("close", (code) => fail(new Error(`serve exited ${code}: ${seen}`)));
  });
}
