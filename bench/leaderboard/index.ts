/**
 * Leaderboard benchmark: --runs generated run dirs (default 200) of --trials trials each (default
 * 500) over two versions of one dataset and 10 agent/model pairs, served by `startViewer`
 * (@proctor/viewer). Server time is measured over HTTP (request -> whole JSON body), median of
 * --rounds, each beside a baseline measured in the same run:
 *
 *   1. `api/leaderboard`, warm (nothing changed since the last request: the board is memoized on
 *      the runs' versions) vs `api/runs`, the runs list over the same runs (its entries memoized too).
 *   2. `api/leaderboard` cold (the first request after start: every run's stats computed) vs warm.
 *   3. after one trial is appended to one run: the leaderboard recomputes that run's stats only,
 *      vs cold (all of them).
 *   4. `api/leaderboard/plots` for one dataset (its four plots' data, the heat map 500 tasks x
 *      10 runs) vs warm `api/leaderboard`.
 *
 *   node --conditions=@proctor/source --import tsx bench/leaderboard/index.ts [--runs 200] [--trials 500] [--rounds 5]
 */
import { appendFile, mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { performance } from "node:perf_hooks";
import { summarize } from "../../packages/reward/src/index";
import type { TrialResult } from "../../packages/schema/src/index";
import { startViewer } from "../../packages/viewer/src/index";
import { reportFigure } from "../lib/figures";

const { values: args } = parseArgs({ options: { runs: { type: "string", default: "200" }, trials: { type: "string", default: "500" }, rounds: { type: "string", default: "5" } } });
const RUNS = Number(args.runs);
const TRIALS = Number(args.trials);
const ROUNDS = Number(args.rounds);
const AGENTS = Array.from({ length: 10 }, (_, i) => (i === 0 ? { name: "oracle" } : { name: "llm", model: `model-${i}`, costUsd: 0.002 * i }));
const root = await mkdtemp(join(tmpdir(), "proctor-bench-leaderboard-"));

function trial(run: number, i: number, agent: (typeof AGENTS)[number]): TrialResult {
  const taskId = `task-${String(i).padStart(4, "0")}`;
  const passed = agent.name === "oracle" || (i * 7 + run) % 10 < 3 + (agent.model ? Number(agent.model.slice(6)) % 6 : 0);
  const usage = "model" in agent ? { model: agent.model, usage: { inputTokens: 4000 + i, outputTokens: 600, requests: 5, retries: 0, costUsd: agent.costUsd } } : {};
  return {
    trialId: `${taskId}__1`, taskId, attempt: 1, category: `cat-${i % 8}`, difficulty: null, status: passed ? "passed" : "failed", reward: passed ? 1 : 0,
    error: null, durationMs: 20_000 + ((i * 131 + run * 17) % 40_000), startedAt: "2025-03-01T10:00:00.000Z", finishedAt: "2025-03-01T10:00:30.000Z", retries: 0,
    phases: [{ phase: "agent", durationMs: 15_000 }, { phase: "verifier", durationMs: 3000 }],
    agent: { exitCode: 0, timedOut: false, name: agent.name, ...usage }, checks: null,
    integrity: { isolation: "isolated", tamperChecked: true, tampered: [], survivors: [], flagged: false, note: null },
  };
}

async function writeRun(n: number): Promise<string> {
  const runId = `run-${String(n).padStart(4, "0")}`;
  const dir = join(root, "runs", runId);
  await mkdir(dir, { recursive: true });
  const agent = AGENTS[n % AGENTS.length] as (typeof AGENTS)[number];
  const version = n % 2 === 0 ? "1.0" : "2.0";
  const results = Array.from({ length: TRIALS }, (_, i) => trial(n, i, agent));
  const startedAt = new Date(Date.parse("2025-03-01T00:00:00.000Z") + n * 3_600_000).toISOString();
  await writeFile(join(dir, "run.json"), JSON.stringify({
    runId, tasks: results.map((r) => ({ id: r.taskId, hash: `h${version}` })), sources: ["/datasets/tbench"], agent: { kind: "oracle" }, agentHash: null, runtime: "docker",
    attempts: 1, concurrency: 8, timeoutMultiplier: 1, defaultImage: null, configHash: "x", origins: [{ dataset: { name: "tbench", version } }],
  }));
  await writeFile(join(dir, "results.jsonl"), results.map((r) => `${JSON.stringify(r)}\n`).join(""));
  await writeFile(join(dir, "summary.json"), JSON.stringify(summarize({ runId, results, plannedTrials: TRIALS, attempts: 1, startedAt, now: new Date(Date.parse(startedAt) + 1_800_000), status: "completed" })));
  return dir;
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] as number;

try {
  const t0 = performance.now();
  const dirs: string[] = [];
  for (let n = 0; n < RUNS; n++) dirs.push(await writeRun(n));
  console.log(`wrote ${RUNS} runs of ${TRIALS} trials (${RUNS * TRIALS} trials) in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
  const s0 = performance.now();
  const viewer = await startViewer({ paths: [join(root, "runs")], port: 0, pollMs: 3_600_000 });
  console.log(`viewer started (read every run once) in ${(performance.now() - s0).toFixed(0)} ms`);
  const get = async (path: string): Promise<{ ms: number; bytes: number }> => {
    const start = performance.now();
    const res = await fetch(new URL(path, viewer.url));
    const body = await res.arrayBuffer();
    if (!res.ok) throw new Error(`${path}: ${res.status}`);
    return { ms: performance.now() - start, bytes: body.byteLength };
  };
  const warm = async (path: string) => {
    const times: number[] = [];
    let bytes = 0;
    for (let i = 0; i < ROUNDS; i++) {
      const r = await get(path);
      times.push(r.ms);
      bytes = r.bytes;
    }
    return { ms: median(times), bytes };
  };
  try {
    // The runs list first (its first request builds each run's list entry), then the leaderboard.
    await get("api/runs");
    const list = await warm("api/runs");
    const cold = await get("api/leaderboard");
    const board = await warm("api/leaderboard");
    const appended: number[] = [];
    for (let i = 0; i < ROUNDS; i++) {
      await appendFile(join(dirs[0] as string, "results.jsonl"), `${JSON.stringify(trial(0, TRIALS + i, AGENTS[0] as (typeof AGENTS)[number]))}\n`);
      appended.push((await get("api/leaderboard")).ms);
    }
    const plots = await warm("api/leaderboard/plots?dataset=tbench%401.0");

    console.log(`api/leaderboard: cold ${cold.ms.toFixed(0)} ms, warm ${board.ms.toFixed(1)} ms (${(board.bytes / 1024).toFixed(0)} KiB); api/runs ${list.ms.toFixed(1)} ms (${(list.bytes / 1024).toFixed(0)} KiB)`);
    console.log(`api/leaderboard after one appended trial: ${median(appended).toFixed(1)} ms; api/leaderboard/plots (one dataset): ${plots.ms.toFixed(1)} ms (${(plots.bytes / 1024).toFixed(0)} KiB)`);
    const scale = `${RUNS} runs x ${TRIALS} trials`;
    reportFigure({ bench: "leaderboard", figure: `api/leaderboard warm, ${scale} (vs api/runs)`, proctor: { value: board.ms, unit: "ms" }, baseline: { value: list.ms, unit: "ms", label: "api/runs" }, ratio: board.ms / list.ms, ratioMeaning: "leaderboard / runs list", target: { on: "ratio", op: "<=", value: 3 } });
    reportFigure({ bench: "leaderboard", figure: `api/leaderboard cold, ${scale} (vs warm)`, proctor: { value: cold.ms, unit: "ms" }, baseline: { value: board.ms, unit: "ms", label: "warm" }, ratio: cold.ms / board.ms, ratioMeaning: "cold / warm", target: null });
    reportFigure({ bench: "leaderboard", figure: `api/leaderboard after one appended trial, ${scale} (vs cold)`, proctor: { value: median(appended), unit: "ms" }, baseline: { value: cold.ms, unit: "ms", label: "cold" }, ratio: median(appended) / cold.ms, ratioMeaning: "one run changed / every run computed", target: { on: "ratio", op: "<=", value: 0.5 } });
    reportFigure({ bench: "leaderboard", figure: `api/leaderboard/plots, one dataset of ${RUNS / 2} runs (vs api/leaderboard warm)`, proctor: { value: plots.ms, unit: "ms" }, baseline: { value: board.ms, unit: "ms", label: "leaderboard" }, ratio: plots.ms / board.ms, ratioMeaning: "plots / leaderboard", target: null });
  } finally {
    await viewer.close();
  }
} finally {
  await rm(root, { recursive: true, force: true });
}
