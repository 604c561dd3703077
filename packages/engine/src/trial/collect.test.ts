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
      expect(await collectLogs({ verifier: sandbox, agent: sandbox }, whole, { logBytes: 10_000 })).toEqual({ truncated: [], skipped: [] });
      expect((await readdir(join(whole, "logs"))).sort()).toEqual(["agent", "verifier"]);

      const cut = join(root.path, "cut");
      expect(await collectLogs({ verifier: sandbox, agent: sandbox }, cut, { logBytes: 1000 })).toEqual({ truncated: ["/logs/agent"], skipped: [] });
      expect(await readFile(join(cut, "logs", "agent", "a.log"), "utf8")).toBe("a".repeat(600));
      expect(await readFile(join(cut, "logs", "agent", "b.log"), "utf8")).toBe("b".repeat(398));
      expect(await readFile(join(cut, "logs", "agent.TRUNCATED"), "utf8")).toBe(
        "/logs/agent went past the 1000 byte cap on collected logs (limits.logBytes): /logs/agent/b.log was cut and nothing after it copied\n",
      );

      // Spent on the verifier's logs: the agent's are not copied at all.
      const spent = join(root.path, "spent");
      expect(await collectLogs({ verifier: sandbox, agent: sandbox }, spent, { logBytes: 1 })).toEqual({ truncated: ["/logs/verifier", "/logs/agent"], skipped: [] });
      expect(await readFile(join(spent, "logs", "agent.TRUNCATED"), "utf8")).toMatch(/: none of it was copied \(the cap was spent before it\)\n$/);
      expect(await readFile(join(spent, "logs", "verifier.TRUNCATED"), "utf8")).toMatch(/\/logs\/verifier\/reward.txt was cut/);
    } finally {
      await sandbox.kill();
    }
  });

  it("takes the verifier's logs from the sandbox it ran in and the agent's from the agent's, never the agent's /logs/verifier", async () => {
    const agent = await runtime.create({ image: "local" });
    const grader = await runtime.create({ image: "local" });
    try {
      await agent.writeFile("/logs/verifier/reward.txt", "1\n"); // planted by the agent
      await agent.writeFile("/logs/agent/a.log", "a".repeat(600));
      await grader.writeFile("/logs/verifier/reward.txt", "0\n");
      await grader.writeFile("/logs/agent/x.log", "not the agent's");
      const dir = join(root.path, "apart");
      expect(await collectLogs({ verifier: grader, agent }, dir, { logBytes: 1000 })).toEqual({ truncated: [], skipped: [] });
      expect(await readFile(join(dir, "logs", "verifier", "reward.txt"), "utf8")).toBe("0\n");
      expect(await readdir(join(dir, "logs", "agent"))).toEqual(["a.log"]);

      // The cap is shared: what the verifier's logs used is gone for the agent's.
      const cut = join(root.path, "apart-cut");
      expect(await collectLogs({ verifier: grader, agent }, cut, { logBytes: 300 })).toEqual({ truncated: ["/logs/agent"], skipped: [] });
      expect(await readFile(join(cut, "logs", "agent", "a.log"), "utf8")).toBe("a".repeat(298));
    } finally {
      await agent.kill();
      await grader.kill();
    }
  });
});
