import { chmod, mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { afterEach } from "vitest";

/** A file's content, or content plus mode (e.g. 0o755 for scripts). */
export type FileSpec = string | { content: string; mode: number };

const made: string[] = [];

afterEach(async () => {
  await Promise.all(made.splice(0).map((dir) => rm(dir, { recursive: true, force: true })));
});

/** A fresh temp dir, removed after the test. */
export async function tempDir(): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), "proctor-tasks-test-"));
  made.push(dir);
  return dir;
}

/** Write `files` (relative path -> content) under `root`. */
export async function writeTree(root: string, files: Record<string, FileSpec>): Promise<string> {
  for (const [rel, spec] of Object.entries(files)) {
    const path = join(root, rel);
    await mkdir(dirname(path), { recursive: true });
    const content = typeof spec === "string" ? spec : spec.content;
    await writeFile(path, content);
    if (typeof spec !== "string") await chmod(path, spec.mode);
  }
  return root;
}

export const script = (content: string): FileSpec => ({ content, mode: 0o755 });

/** A minimal valid native task. */
export function nativeFiles(extra: Record<string, FileSpec> = {}): Record<string, FileSpec> {
  return {
    "instruction.md": "Write hello.txt\n",
    "tests/test.sh": script("#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n"),
    ...extra,
  };
}

/** The value, or a thrown error naming what was missing (instead of a `!` that hides it). */
export function must<T>(value: T | null | undefined, what = "value"): T {
  if (value === null || value === undefined) throw new Error(`expected a ${what}, got ${String(value)}`);
  return value;
}
