import { rm } from "node:fs/promises";
import { afterAll, beforeAll } from "vitest";
import { makeGitRepo, tempDir } from "./test-support";

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
