import { spawn, type ChildProcess } from "node:child_process";
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
