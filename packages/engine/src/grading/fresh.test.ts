import { mkdir } from "node:fs/promises";
import { join } from "node:path";
import { describe, expect, test } from "vitest";
import { tempDir } from "../testing/fixtures";
import { OutputsUnusableError, onOutputs } from "./fresh";
import { stageFiles } from "./repo-diff";

describe("failures reading the agent's outputs", () => {
  test("one the outputs cause is the agent's (OutputsUnusableError, naming the step); the host's own stays what it was", async () => {
    const root = await tempDir("proctor-outputs-");
    try {
      // A path the tree lists as a file but that is nothing at all: copying it fails on the agent's content.
      await mkdir(join(root.path, "tree"));
      const failed = await onOutputs("copying the repository's changed files", () => stageFiles(join(root.path, "tree"), ["gone.py"], join(root.path, "staging"))).catch((error: unknown) => error);
      expect(failed).toBeInstanceOf(OutputsUnusableError);
      expect((failed as Error).message).toMatch(/^copying the repository's changed files failed on what the agent left: .*gone\.py/);

      const full = Object.assign(new Error("no space left on device"), { code: "ENOSPC" });
      await expect(onOutputs("copying", () => Promise.reject(full))).rejects.toBe(full);
    } finally {
      await root.cleanup();
    }
  });
});
