import { readdir, readFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ClientError, submitBatch, uploadArchive } from "@proctor/client";
import { startScriptedModelServer } from "@proctor/llm";
import { DockerRuntime, dockerTestGate } from "@proctor/sandbox-docker";
import { describe, expect, test } from "vitest";
import { ALICE, makeArchive, startTestServer } from "./test-support";
import { useGitFixture } from "./test-fixture";

const haveDocker = await dockerTestGate();
const fixture = useGitFixture();
const KEY = "sk-server-installed-REAL-4c2e19";
const KEY_ENV = "PROCTOR_SERVER_INSTALLED_TEST_KEY";

describe.skipIf(!haveDocker)("server batches naming an installed agent (?agent=codex, the real CLI, Docker)", () => {
  test("the operator's agents only; the upload brings tasks/ only; Codex runs with the operator's key, which no response, file or log holds", async () => {
    const upstream = await startScriptedModelServer({
      apiKey: KEY,
      models: ["small"],
      handler: (r) => (r.toolResults.length === 0 ? { toolCalls: [{ name: "exec_command", arguments: { cmd: "echo made > done.txt && env | grep -c PROCTOR_MODEL_TOKEN" } }] } : { content: "done" }),
    });
    process.env[KEY_ENV] = KEY;
    // The real CLI, installed once per machine (the CLI's e2e tests share this cache).
    process.env.PROCTOR_CACHE_DIR = join(tmpdir(), "proctor-e2e-agent-cache");
    const dataDir = join(fixture.root, "installed-agent");
    const server = await startTestServer(dataDir, {
      runtime: new DockerRuntime(),
      defaultImage: "proctor/base:bookworm",
      modelProxy: { baseUrl: upstream.baseUrl, apiKeyEnv: KEY_ENV, models: ["small"], agents: { codex: { name: "codex" } } },
    });
    try {
      const tasksOnly = await makeArchive(fixture.root, { ...fixture, tasks: [{ id: "made" }], withoutAgent: true });
      const notOffered = await uploadArchive({ server: server.url, archivePath: tasksOnly, keypair: ALICE, agent: "claude-code" }).catch((e: unknown) => e);
      expect(notOffered).toBeInstanceOf(ClientError);
      expect(notOffered).toMatchObject({ statusCode: 403, message: expect.stringMatching(/agent: "claude-code" is not offered on this server; offered: codex/) });
      const withCode = await makeArchive(fixture.root, { ...fixture, tasks: [{ id: "made" }] });
      const both = await uploadArchive({ server: server.url, archivePath: withCode, keypair: ALICE, agent: "codex" }).catch((e: unknown) => e);
      expect(both).toMatchObject({ statusCode: 400, message: expect.stringMatching(/leave agent_code\/ out/) });

      const final = await submitBatch({ server: server.url, archivePath: tasksOnly, keypair: ALICE, agent: "codex", model: "small" });
      expect(final).toMatchObject({ status: "completed", passed_tasks: 1 });
      expect(upstream.requests.length).toBeGreaterThanOrEqual(2);
      expect(upstream.requests.every((r) => r.headers.authorization === `Bearer ${KEY}` && r.model === "small")).toBe(true);
      const files = (await readdir(dataDir, { recursive: true, withFileTypes: true })).filter((e) => e.isFile()).map((e) => join(e.parentPath, e.name));
      const result = JSON.parse(await readFile(files.find((f) => f.endsWith("result.json")) ?? "", "utf8"));
      expect(result.agent).toMatchObject({ name: expect.stringMatching(/^codex@/), model: "small", usage: { requests: upstream.totals().requests } });
      expect(files.some((f) => f.endsWith("trajectory.json"))).toBe(true);
      for (const file of files) expect([file, (await readFile(file)).includes(KEY)]).toEqual([file, false]);
      expect(server.logger.lines.filter((l) => l.includes(KEY))).toEqual([]);
    } finally {
      delete process.env[KEY_ENV];
      delete process.env.PROCTOR_CACHE_DIR;
      await server.close();
      await upstream.close();
    }
  });
});
