import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { proctor } from "./test-support";

let out: string;
const TASKS = ["data-a", "data-b", "web-a"];

/** A finished run dir as `proctor run` leaves it (run.json and results.jsonl; the summary is computed from them). */
async function writeRun(runId: string, version: string, agent: { name: string; model?: string; costUsd?: number }, passed: (i: number) => boolean, hash = "h"): Promise<void> {
  const dir = join(out, "runs", runId);
  await mkdir(dir, { recursive: true });
  const config = {
    runId, tasks: TASKS.map((id) => ({ id, hash: id === "web-a" ? hash : "h" })), sources: [join(out, "tasks")], agent: { kind: "oracle" }, agentHash: null,
    runtime: "local", attempts: 1, concurrency: 1, timeoutMultiplier: 1, defaultImage: null, configHash: "x", origins: TASKS.map((taskId) => ({ taskId, dataset: { name: "tbench", version }, repository: "https://example.com/tbench.git", commit: "0123abc", path: `tasks/${taskId}` })),
  };
  const results = TASKS.map((taskId, i) => ({
    trialId: `${taskId}__1`, taskId, attempt: 1, category: taskId.split("-")[0], difficulty: null, status: passed(i) ? "passed" : "failed", reward: passed(i) ? 1 : 0,
    error: null, durationMs: 3000, startedAt: "2025-03-01T10:00:00.000Z", finishedAt: "2025-03-01T10:00:03.000Z", retries: 0, phases: [], checks: null,
    agent: { exitCode: 0, timedOut: false, name: agent.name, ...(agent.model ? { model: agent.model, usage: { inputTokens: 900, outputTokens: 100, requests: 2, retries: 0, costUsd: agent.costUsd } } : {}) },
  }));
  await writeFile(join(dir, "run.json"), JSON.stringify(config));
  await writeFile(join(dir, "results.jsonl"), results.map((r) => `${JSON.stringify(r)}\n`).join(""));
}

beforeAll(async () => {
  out = await mkdtemp(join(tmpdir(), "proctor-leaderboard-cli-"));
  await writeRun("a-oracle-v1", "1.0", { name: "oracle" }, () => true);
  await writeRun("b-llm-v1", "1.0", { name: "llm", model: "model-small", costUsd: 0.02 }, (i) => i === 0);
  await writeRun("c-oracle-v2", "2.0", { name: "oracle" }, () => true);
  await writeRun("d-llm-v2", "2.0", { name: "llm", model: "model-small", costUsd: 0.02 }, (i) => i < 2, "changed");
});
afterAll(async () => {
  await rm(out, { recursive: true, force: true });
});

describe("proctor report --leaderboard", () => {
  test("text: one table per dataset version, rows by agent + model, the non-comparable row flagged", async () => {
    const r = await proctor(["report", "--leaderboard", join(out, "runs")]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toContain("Leaderboard over 4 runs");
    expect(r.stdout).toContain("Dataset tbench@1.0: 2 agent/model rows\n");
    expect(r.stdout).toContain("Dataset tbench@2.0: 2 agent/model rows — NOT all comparable");
    expect(r.stdout).toMatch(/1\s+oracle\s+-\s+100\.0% \[43\.9%, 100\.0%\]\s+-\s+—\s+—\s+3s\s+3\s+1\s+yes/);
    expect(r.stdout).toMatch(/2\s+llm\s+model-small\s+33\.3% \[6\.1%, 79\.2%\]\s+-\s+\$0\.020\s+1\.00k\s+3s\s+3\s+1\s+yes/);
    expect(r.stdout).toContain("NO: 1 task with other content (hash)");
  });

  test("md and json; html embeds the plots as inline SVG; other formats are refused", async () => {
    const runs = ["a-oracle-v1", "b-llm-v1", "c-oracle-v2", "d-llm-v2"].map((id) => join(out, "runs", id));
    const file = join(out, "board.html");
    const [md, json, html, junit] = await Promise.all([
      proctor(["report", "--leaderboard", ...runs, "--format", "md"]),
      proctor(["report", "--leaderboard", ...runs, "--json"]),
      proctor(["report", "--leaderboard", ...runs, "--format", "html", "-o", file]),
      proctor(["report", "--leaderboard", ...runs, "--format", "junit"]),
    ]);
    expect(md.code, md.stderr).toBe(0);
    expect(md.stdout).toContain("## Dataset tbench@1.0: 2 agent/model rows");
    expect(md.stdout).toContain("| 1 | oracle | - | 100.0% [43.9%, 100.0%] | - | — | — | 3s | 3 | 1 | yes |");
    expect(json.code, json.stderr).toBe(0);
    const board = JSON.parse(json.stdout);
    expect(board.groups.map((g: { dataset: { key: string }; comparable: boolean }) => [g.dataset.key, g.comparable])).toEqual([
      ["tbench@1.0", true],
      ["tbench@2.0", false],
    ]);
    expect(board.groups[0].rows[1]).toMatchObject({ agent: "llm", model: "model-small", costPerTask: 0.02, tokensPerTask: 1000, passed: 1, trials: 3, medianTrialMs: 3000 });
    expect(board.groups[0].rows[0].costPerTask).toBeNull();
    expect(html.code, html.stderr).toBe(0);
    const page = await readFile(file, "utf8");
    expect(page.match(/<svg /g)).toHaveLength(8);
    expect(page.match(/<circle class="mark/g)).toHaveLength(2); // one priced row per dataset
    expect(junit.code).toBe(2);
    expect(junit.stderr).toContain('--leaderboard prints --format table, md, json, html, got "junit"');
  });
});
