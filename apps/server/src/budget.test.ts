import { readdir, readFile } from "node:fs/promises";
import { join } from "node:path";
import { startScriptedModelServer } from "@proctor/llm";
import { describe, expect, test } from "vitest";
import { ClientError, submitBatch, uploadArchive } from "@proctor/client";
import { ALICE, makeArchive, startTestServer } from "./test-support";
import { useGitFixture } from "./test-fixture";

const fixture = useGitFixture();
const KEY = "sk-server-budget-key-81c2";
const KEY_ENV = "PROCTOR_SERVER_BUDGET_TEST_KEY";

/** The agent asks the model once through the proxy, then writes done.txt. */
const AGENT = `#!/bin/bash
set -e
python3 - <<'PY'
import json, os, urllib.request
req = urllib.request.Request(os.environ["OPENAI_BASE_URL"] + "/chat/completions", data=b'{"messages":[{"role":"user","content":"hi"}]}',
                             headers={"content-type": "application/json", "authorization": "Bearer " + os.environ["OPENAI_API_KEY"]})
urllib.request.urlopen(req, timeout=30).read()
PY
echo done > done.txt
`;

describe("batch budgets on POST /submit", () => {
  test("max_cost stops starting tasks once spent (the batch completes, the rest not run); trial_max_cost stops a task's agent at the proxy; a bad value is a 400 naming it", async () => {
    // gpt-4o-mini at a million prompt tokens a request: each task costs about $0.15.
    const upstream = await startScriptedModelServer({ apiKey: KEY, handler: () => ({ content: "ok", usage: { promptTokens: 1_000_000, completionTokens: 0 } }) });
    process.env[KEY_ENV] = KEY;
    const dataDir = join(fixture.root, "budget");
    const server = await startTestServer(dataDir, { modelProxy: { baseUrl: upstream.baseUrl, apiKeyEnv: KEY_ENV, models: ["gpt-4o-mini"] } });
    try {
      const archive = await makeArchive(fixture.root, { ...fixture, tasks: [{ id: "a" }, { id: "b" }, { id: "c" }], agentScript: AGENT });
      const bad = await uploadArchive({ server: server.url, archivePath: archive, keypair: ALICE, budget: { maxCostUsd: -1 } }).catch((e: unknown) => e);
      expect(bad).toBeInstanceOf(ClientError);
      expect(bad).toMatchObject({ statusCode: 400 });
      expect((bad as Error).message).toMatch(/query parameter max_cost: .*>0/);

      const final = await submitBatch({ server: server.url, archivePath: archive, keypair: ALICE, concurrentTasks: 1, budget: { maxCostUsd: 0.1 } });
      expect(final).toMatchObject({ status: "completed", completed_tasks: 1, passed_tasks: 1 });
      expect(upstream.requests).toHaveLength(1);
      const batchDir = join(dataDir, "batches", final.batch_id);
      const summary = JSON.parse(await readFile(join(batchDir, "summary.json"), "utf8"));
      expect(summary).toMatchObject({ status: "budget_exhausted", trials: { planned: 3, total: 1 }, budget: { maxCostUsd: 0.1, notRun: 2 } });
      expect(summary.cost.totalUsd).toBeGreaterThan(0.1);
      // GET /batch/:id says what the batch cost, as its summary does.
      expect(final.cost_usd).toBeCloseTo(summary.cost.totalUsd, 6);
      expect(final.unpriced_tasks).toBe(0);
      expect(JSON.parse(await readFile(join(batchDir, "run.json"), "utf8")).budget).toEqual({ maxCostUsd: 0.1 });

      // trial_max_cost: the proxy refuses the request after the one that passed it; the task is an agent error saying so.
      const twice = await makeArchive(fixture.root, { ...fixture, tasks: [{ id: "greedy" }], agentScript: AGENT.replace("urllib.request.urlopen(req, timeout=30).read()", "urllib.request.urlopen(req, timeout=30).read()\nurllib.request.urlopen(req, timeout=30).read()") });
      const capped = await submitBatch({ server: server.url, archivePath: twice, keypair: ALICE, budget: { trialMaxCostUsd: 0.1 } });
      expect(capped).toMatchObject({ status: "completed", passed_tasks: 0 });
      const files = (await readdir(join(dataDir, "batches", capped.batch_id, "trials"), { recursive: true })).filter((f) => f.endsWith("result.json"));
      const result = JSON.parse(await readFile(join(dataDir, "batches", capped.batch_id, "trials", files[0] ?? ""), "utf8"));
      expect(result.error).toMatchObject({ kind: "agent", message: expect.stringMatching(/passed its limit of \$0\.1 \(--trial-max-cost\)/) });
    } finally {
      delete process.env[KEY_ENV];
      await server.close();
      await upstream.close();
    }
  });
});
