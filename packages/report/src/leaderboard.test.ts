import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import type { TrialResult } from "@proctor/schema";
import { summarize } from "@proctor/reward";
import { buildLeaderboard, leaderboardPlots, loadRun, renderLeaderboard, renderReport, runStats, type LoadedRun } from "./index";

interface Agent {
  name: string;
  model?: string;
  costUsd?: number;
}

function trial(taskId: string, attempt: number, passed: boolean, agent: Agent, extra: Partial<TrialResult> = {}): TrialResult {
  return {
    trialId: `${taskId}__${attempt}`, taskId, attempt, category: taskId.startsWith("web") ? "web" : "data", difficulty: null,
    status: passed ? "passed" : "failed", reward: passed ? 1 : 0, error: null, durationMs: 1000 * attempt + taskId.length * 100,
    startedAt: "2025-03-01T10:00:00.000Z", finishedAt: "2025-03-01T10:00:02.000Z", retries: 0, phases: [],
    agent: { exitCode: 0, timedOut: false, name: agent.name, ...(agent.model ? { model: agent.model, usage: { inputTokens: 1000, outputTokens: 200, requests: 3, retries: 0, ...(agent.costUsd !== undefined ? { costUsd: agent.costUsd } : {}) } } : {}) },
    checks: null, ...extra,
  };
}

let root: string;
const TASKS = ["data-a", "data-b", "web-a", "web-b"];

async function writeRun(runId: string, dataset: { name: string; version: string } | null, hashes: Record<string, string>, results: TrialResult[], startedAt: string, attempts = 1): Promise<string> {
  const dir = join(root, runId);
  await mkdir(dir, { recursive: true });
  const config = {
    runId, tasks: Object.entries(hashes).map(([id, hash]) => ({ id, hash })), sources: [join(root, "tasks", dataset?.name ?? "local-tasks")],
    agent: { kind: "oracle" }, agentHash: null, runtime: "local", attempts, concurrency: 1, timeoutMultiplier: 1, defaultImage: null, configHash: "x",
    ...(dataset ? { origins: Object.keys(hashes).map((taskId) => ({ taskId, dataset, repository: "https://example.com/tbench.git", commit: "abc", path: `tasks/${taskId}` })) } : {}),
  };
  await writeFile(join(dir, "run.json"), JSON.stringify(config));
  await writeFile(join(dir, "results.jsonl"), results.map((r) => `${JSON.stringify(r)}\n`).join(""));
  await writeFile(join(dir, "summary.json"), JSON.stringify(summarize({ runId, results, plannedTrials: results.length, attempts, startedAt, now: new Date(Date.parse(startedAt) + 60_000), status: "completed" })));
  return dir;
}

const hashes = (h: string, overrides: Record<string, string> = {}) => ({ ...Object.fromEntries(TASKS.map((t) => [t, h])), ...overrides });
const oracle: Agent = { name: "oracle" };
const cheap: Agent = { name: "llm", model: "model-small", costUsd: 0.01 };
const dear: Agent = { name: "llm", model: "model-large", costUsd: 0.05 };
let runs: LoadedRun[];

beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), "proctor-leaderboard-"));
  const v1 = { name: "tbench", version: "1.0" };
  const v2 = { name: "tbench", version: "2.0" };
  const dirs = [
    await writeRun("r1-oracle", v1, hashes("a"), TASKS.map((t) => trial(t, 1, true, oracle)), "2025-03-01T10:00:00.000Z"),
    await writeRun("r2-small", v1, hashes("a"), TASKS.map((t, i) => trial(t, 1, i < 2, cheap)), "2025-03-01T11:00:00.000Z"),
    // Two attempts: pass@k over the pooled attempts.
    await writeRun("r3-large", v1, hashes("a"), TASKS.flatMap((t, i) => [trial(t, 1, i < 3, dear), trial(t, 2, i !== 1, dear)]), "2025-03-01T12:00:00.000Z", 2),
    await writeRun("r4-oracle", v2, hashes("b"), TASKS.map((t) => trial(t, 1, true, oracle)), "2025-03-02T10:00:00.000Z"),
    await writeRun("r5-small", v2, hashes("b"), TASKS.map((t, i) => trial(t, 1, i === 0, cheap)), "2025-03-02T11:00:00.000Z"),
    // web-b changed content: not comparable with the other rows of 2.0.
    await writeRun("r6-large", v2, hashes("b", { "web-b": "changed" }), TASKS.map((t) => trial(t, 1, true, dear)), "2025-03-02T12:00:00.000Z"),
    // No origins: grouped by its sources' name.
    await writeRun("r7-plain", null, { "data-a": "a" }, [trial("data-a", 1, false, oracle)], "2025-03-03T10:00:00.000Z"),
  ];
  runs = await Promise.all(dirs.map((d) => loadRun(d)));
});
afterAll(async () => {
  await rm(root, { recursive: true, force: true });
});

describe("leaderboard", () => {
  test("groups runs by dataset name@version (or sources) and by agent + model, best pass rate first", () => {
    const board = buildLeaderboard(runs.map(runStats));
    expect(board.groups.map((g) => g.dataset.key)).toEqual(["local-tasks", "tbench@1.0", "tbench@2.0"]);
    const v1 = board.groups[1];
    expect(v1?.rows.map((r) => `${r.agent}/${r.model ?? "-"}`)).toEqual(["oracle/-", "llm/model-large", "llm/model-small"]);
    expect(v1?.comparable).toBe(true);
    const [orc, large, small] = v1?.rows ?? [];
    expect(orc?.passRate).toBe(1);
    expect(orc?.costPerTask).toBeNull(); // no model, no cost: "—", never $0
    expect(small?.costPerTask).toBeCloseTo(0.01);
    expect(large?.costPerTask).toBeCloseTo(0.1); // two attempts per task
    expect(large?.passAtK.map((p) => p.k)).toEqual([1, 2]);
    expect(large?.passAtK[1]?.value).toBe(1);
    expect(small?.passAtK).toEqual([]);
    expect(small?.tokensPerTask).toBe(1200);
    expect(small?.ci?.low).toBeGreaterThan(0);
    expect(small?.medianTrialMs).toBe(1550);
  });

  test("flags rows whose tasks differ in content (hash) or in ids", () => {
    const board = buildLeaderboard(runs.map(runStats));
    const v2 = board.groups.find((g) => g.dataset.key === "tbench@2.0");
    expect(v2?.comparable).toBe(false);
    const large = v2?.rows.find((r) => r.model === "model-large");
    expect(large?.comparable).toBe(false);
    expect(large?.notComparable).toBe("1 task with other content (hash)");
    expect(v2?.rows.filter((r) => r.comparable)).toHaveLength(2);
    // Two rows of different task sets, one each: neither is the reference, both are flagged.
    const sameDataset = (r: LoadedRun | undefined, agent: string) => ({ ...runStats(r as LoadedRun), agent, dataset: { key: "x", name: "x", version: null, from: "sources" as const } });
    const rows = buildLeaderboard([sameDataset(runs[0], "oracle"), sameDataset(runs[6], "nop")]).groups[0]?.rows;
    expect(rows?.map((r) => [r.agent, r.notComparable])).toEqual([["oracle", "3 other tasks"], ["nop", "3 tasks missing"]]);
    // Three rows: the set two of them ran is the reference.
    const three = buildLeaderboard([sameDataset(runs[0], "oracle"), sameDataset(runs[6], "nop"), sameDataset(runs[1], "llm")]).groups[0]?.rows;
    expect(three?.map((r) => [r.agent, r.notComparable])).toEqual([["oracle", null], ["llm", null], ["nop", "3 tasks missing"]]);
    // One row whose runs ran different task sets.
    const row = buildLeaderboard([sameDataset(runs[0], "oracle"), sameDataset(runs[6], "oracle")]).groups[0]?.rows[0];
    expect(row?.notComparable).toBe("its 2 runs ran different tasks");
  });

  test("plots: Pareto front, category bars, pass@k curves and a heat map cell per task and run", () => {
    const stats = runs.map(runStats);
    const p = leaderboardPlots(stats, "tbench@1.0");
    expect(p?.cost.points.map((x) => [x.label, x.pareto])).toEqual([
      ["llm (model-large)", true],
      ["llm (model-small)", true],
    ]);
    expect(p?.cost.unpriced).toEqual(["oracle"]);
    expect(p?.categories.categories).toEqual(["data", "web"]);
    expect(p?.categories.runs).toHaveLength(3);
    expect(p?.passAtK.curves.map((c) => c.runId)).toEqual(["r3-large"]);
    expect(p?.heatmap.tasks).toEqual(TASKS);
    expect(p?.heatmap.cells).toHaveLength(12);
    // A cell links to the first attempt that did not pass.
    const cell = p?.heatmap.cells.find((c) => p.heatmap.runs[c.run]?.runId === "r3-large" && p.heatmap.tasks[c.task] === "data-b");
    expect(cell).toMatchObject({ passed: 1, attempts: 2, trialId: "data-b__2" });
    expect(leaderboardPlots(stats, "tbench@1.0", { runIds: ["r2-small"] })?.heatmap.cells).toHaveLength(4);
    expect(leaderboardPlots(stats, "nope")).toBeNull();
  });

  test("renders as text, markdown, JSON and HTML with inline SVG plots", async () => {
    const text = renderLeaderboard(runs, "table");
    expect(text).toContain("Dataset tbench@2.0: 3 agent/model rows — NOT all comparable");
    expect(text).toMatch(/1\s+oracle\s+-\s+100\.0% \[51\.0%, 100\.0%\]\s+-\s+—/);
    expect(text).toContain("NO: 1 task with other content (hash)");
    expect(renderLeaderboard(runs, "md")).toContain("| 2 | llm | model-large |");
    const json = JSON.parse(renderLeaderboard(runs, "json"));
    expect(json.groups[1].rows[2].costPerTask).toBeCloseTo(0.01);
    const html = renderLeaderboard(runs, "html");
    expect(html.match(/<svg /g)).toHaveLength(12);
    expect(html).not.toMatch(/<script|<link|<img|url\(|\b(?:src|href)\s*=|\/\/[a-z0-9]/i);
    // The HTML report of several runs carries the same plots.
    expect((await renderReport(runs.slice(0, 3), "html")).match(/<svg /g)).toHaveLength(4);
  });
});
