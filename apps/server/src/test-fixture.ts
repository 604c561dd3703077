import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll } from "vitest";
import { makeGitRepo } from "./test-support";

const tempDirs: string[] = [];
// Registered when a test file first imports this module, so it runs after that file's own afterAll
// hooks (servers using the dirs stop first).
afterAll(async () => {
  await Promise.all(tempDirs.splice(0).map((dir) => rm(dir, { recursive: true, force: true })));
});

/** A fresh directory under the OS temp dir, removed after the test file's last test. */
export async function tempDir(prefix = "proctor-server-test-"): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), prefix));
  tempDirs.push(dir);
  return dir;
}

/**
 * A temp dir holding a small git repo, made once for the test file (beforeAll) and removed after
 * it (afterAll). Read its fields inside tests and hooks, not at module load.
 */
export function useGitFixture(): { root: string; repo: string; commit: string } {
  const fixture = { root: "", repo: "", commit: "" };
  beforeAll(async () => {
    fixture.root = await tempDir();
    Object.assign(fixture, await makeGitRepo(fixture.root));
  });
  afterAll(async () => {
    await rm(fixture.root, { recursive: true, force: true });
  });
  return fixture;
}
