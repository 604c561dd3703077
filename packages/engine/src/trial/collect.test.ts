import { readdir, readFile } from "node:fs/promises";
import { join } from "node:path";
import { LocalRuntime } from "@proctor/sandbox";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { tempDir } from "../testing/fixtures";
import { collectLogs } from "./collect";

describe("collectLogs", () => {
  let root: { path: string; cleanup: () => Promise<void> };
  let runtime: LocalRuntime;
  beforeAll(async () => {
    root = await tempDir("proctor-collect-");
    runtime = new LocalRuntime({ rootDir: join(root.path, "sandboxes") });
  });
  afterAll(async () => {
    await root.cleanup();
  });

  it("copies the verifier's logs, then the agent's, under one cap; a cut dir gets a .TRUNCATED note saying where", async () => {
    const sandbox = await runtime.create({ image: "local" });
    try {
      await sandbox.writeFile("/logs/verifier/reward.txt", "1\n");
      await sandbox.writeFile("/logs/agent/a.log", "a".repeat(600));
      await sandbox.writeFile("/logs/agent/b.log", "b".repeat(600));
      const whole = join(root.path, "whole");
      expect(await collectLogs(sandbox, whole, { logBytes: 10_000 })).toEqual({ truncated: [], skipped: [] });
      expect((await readdir(join(whole, "logs"))).sort()).toEqual(["agent", "verifier"]);

      const cut = join(root.path, "cut");
      expect(await collectLogs(sandbox, cut, { logBytes: 1000 })).toEqual({ truncated: ["/logs/agent"], skipped: [] });
      expect(await readFile(join(cut, "logs", "agent", "a.log"), "utf8")).toBe("a".repeat(600));
      expect(await readFile(join(cut, "logs", "agent", "b.log"), "utf8")).toBe("b".repeat(398));
      expect(await readFile(join(cut, "logs", "agent.TRUNCATED"), "utf8")).toBe(
        "/logs/agent went past the 1000 byte cap on collected logs (limits.logBytes): /logs/agent/b.log was cut and nothing after it copied\n",
      );

      // Spent on the verifier's logs: the agent's are not copied at all.
      const spent = join(root.path, "spent");
      expect(await collectLogs(sandbox, spent, { logBytes: 1 })).toEqual({ truncated: ["/logs/verifier", "/logs/agent"], skipped: [] });
      expect(await readFile(join(spent, "logs", "agent.TRUNCATED"), "utf8")).toMatch(/: none of it was copied \(the cap was spent before it\)\n$/);
      expect(await readFile(join(spent, "logs", "verifier.TRUNCATED"), "utf8")).toMatch(/\/logs\/verifier\/reward.txt was cut/);
    } finally {
      await sandbox.kill();
    }
  });
});
