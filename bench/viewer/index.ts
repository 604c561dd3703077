/**
 * Viewer benchmark: a generated run of N trials (default 10,000) with a 1 MB agent log, served
 * by `startViewer` (@proctor/viewer, the same API the server's /ui uses) and opened in Chromium
 * (playwright-core, /usr/bin/chromium). Every figure has a baseline measured in the same run:
 *
 *   1. run page, time to first render (navigation -> the trial table's "1–50 of N" is shown),
 *      median of --rounds; baseline: the same page for a run of 100 trials. Ratio N / 100.
 *   2. trial page, time to first render of its log tail (navigation -> the log's last line is
 *      shown) for the 1 MB log; baseline: a trial with a 100-byte log.
 *   3. one appended trial: RunDir.refresh() (reads the appended bytes only) vs @proctor/report's
 *      loadRun (re-reads and re-parses results.jsonl), median of --rounds.
 *   4. memory: the process's RSS and V8 heap after the pages above, against before the viewer started.
 *
 *   node --conditions=@proctor/source --import tsx bench/viewer/index.ts [--trials 10000] [--rounds 5]
 */
import { existsSync } from "node:fs";
import { appendFile, mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { performance } from "node:perf_hooks";
import { loadRun } from "../../packages/report/src/index";
import { summarize } from "../../packages/reward/src/index";
import type { TrialResult } from "../../packages/schema/src/index";
import { RunDir, startViewer } from "../../packages/viewer/src/index";
import { reportFigure } from "../lib/figures";

// playwright-core is a dependency of packages/viewer (bench/ has no node_modules of its own).
const requireFromViewer = createRequire(new URL("../../packages/viewer/package.json", import.meta.url));
const { chromium } = requireFromViewer("playwright-core") as typeof import("playwright-core");

const { values: args } = parseArgs({ options: { trials: { type: "string", default: "10000" }, rounds: { type: "string", default: "5" } } });
const N = Number(args.trials);
const ROUNDS = Number(args.rounds);
const CHROMIUM = process.env.CHROMIUM_PATH ?? "/usr/bin/chromium";
if (!existsSync(CHROMIUM)) throw new Error(`bench/viewer needs Chromium at ${CHROMIUM} (apt-get install chromium, or set CHROMIUM_PATH)`);
const root = await mkdtemp(join(tmpdir(), "proctor-bench-viewer-"));
const MB = 1024 * 1024;

function trial(i: number): TrialResult {
  const taskId = `task-${String(i).padStart(5, "0")}`;
  const status = i % 10 === 0 ? "error" : i % 3 === 0 ? "failed" : "passed";
  return {
    trialId: `${taskId}__1`, taskId, attempt: 1, category: `cat-${i % 7}`, difficulty: null, status,
    reward: status === "passed" ? 1 : status === "failed" ? 0 : null, error: status === "error" ? { kind: "agent", message: `agent crashed on ${taskId}` } : null,
    durationMs: 1000 + i, startedAt: "2025-03-01T10:00:00.000Z", finishedAt: "2025-03-01T10:00:02.400Z", retries: 0,
    phases: [{ phase: "environment", durationMs: 100 }, { phase: "agent", durationMs: 1800 }, { phase: "verifier", durationMs: 500 }],
    agent: { exitCode: status === "passed" ? 0 : 1, timedOut: false, name: "oracle" }, checks: null,
    integrity: { isolation: "shared", tamperChecked: true, tampered: [], survivors: [], flagged: false, note: null },
  };
}

async function writeRun(runId: string, n: number, logBytes: number): Promise<string> {
  const dir = join(root, "runs", runId);
  await mkdir(dir, { recursive: true });
  const results = Array.from({ length: n }, (_, i) => trial(i));
  await writeFile(join(dir, "run.json"), JSON.stringify({ runId, tasks: results.map((r) => ({ id: r.taskId, hash: "h" })), sources: [], agent: { kind: "oracle" }, agentHash: null, runtime: "local", attempts: 1, concurrency: 1, timeoutMultiplier: 1, defaultImage: null, configHash: "x" }));
  await writeFile(join(dir, "results.jsonl"), results.map((r) => `${JSON.stringify(r)}\n`).join(""));
  await writeFile(join(dir, "summary.json"), JSON.stringify(summarize({ runId, results, plannedTrials: n, attempts: 1, startedAt: "2025-03-01T10:00:00.000Z", now: new Date("2025-03-01T11:00:00.000Z"), status: "completed" })));
  const agent = join(dir, "trials", "task-00001__1", "agent");
  await mkdir(agent, { recursive: true });
  const line = `${"x".repeat(79)}\n`;
  await writeFile(join(agent, "stdout.txt"), `${line.repeat(Math.max(0, Math.floor(logBytes / line.length) - 1))}THE END OF THE LOG\n`);
  return dir;
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] as number;
const mem = () => process.memoryUsage();

try {
  const bigDir = await writeRun("big", N, MB);
  await writeRun("small", 100, 100);
  const before = mem();
  const t0 = performance.now();
  const viewer = await startViewer({ paths: [join(root, "runs")], port: 0, pollMs: 60_000 });
  const startMs = performance.now() - t0;
  console.log(`viewer started with a ${N}-trial run and a 100-trial run in ${startMs.toFixed(0)} ms (reads every results.jsonl once)`);
  const browser = await chromium.launch({ executablePath: CHROMIUM, args: ["--headless", "--no-sandbox", "--disable-gpu"] });
  const page = await browser.newPage();
  const firstRender = async (hash: string, ready: (p: typeof page) => Promise<unknown>): Promise<number> => {
    const times: number[] = [];
    for (let i = 0; i < ROUNDS; i++) {
      await page.goto("about:blank");
      const start = performance.now();
      await page.goto(`${viewer.url}#${hash}`);
      await ready(page);
      times.push(performance.now() - start);
    }
    return median(times);
  };
  const runBig = await firstRender("/run/big", (p) => p.locator("#page-info").getByText(`1–50 of ${N}`).waitFor());
  const runSmall = await firstRender("/run/small", (p) => p.locator("#page-info").getByText("1–50 of 100").waitFor());
  const trialBig = await firstRender("/run/big/trial/task-00001__1", (p) => p.locator('pre[data-file="agent/stdout.txt"]').getByText("THE END OF THE LOG").waitFor());
  const trialSmall = await firstRender("/run/small/trial/task-00001__1", (p) => p.locator('pre[data-file="agent/stdout.txt"]').getByText("THE END OF THE LOG").waitFor());
  const after = mem();
  await browser.close();
  await viewer.close();

  // One trial appended to the big run: incremental refresh vs a full reload.
  const run = new RunDir(bigDir);
  await run.refresh();
  const incremental: number[] = [];
  const full: number[] = [];
  for (let i = 0; i < ROUNDS; i++) {
    await appendFile(join(bigDir, "results.jsonl"), `${JSON.stringify(trial(N + i))}\n`);
    let s = performance.now();
    await run.refresh();
    incremental.push(performance.now() - s);
    s = performance.now();
    await loadRun(bigDir);
    full.push(performance.now() - s);
  }

  console.log(`run page first render: ${N} trials ${runBig.toFixed(0)} ms, 100 trials ${runSmall.toFixed(0)} ms`);
  console.log(`trial page first render: 1 MB log ${trialBig.toFixed(0)} ms, 100-byte log ${trialSmall.toFixed(0)} ms`);
  console.log(`one appended trial: RunDir.refresh ${median(incremental).toFixed(2)} ms, loadRun ${median(full).toFixed(1)} ms`);
  console.log(`memory: RSS ${(before.rss / MB).toFixed(0)} -> ${(after.rss / MB).toFixed(0)} MB, heap ${(before.heapUsed / MB).toFixed(0)} -> ${(after.heapUsed / MB).toFixed(0)} MB`);
  reportFigure({ bench: "viewer", figure: `run page first render, ${N} trials (vs 100 trials)`, proctor: { value: runBig, unit: "ms" }, baseline: { value: runSmall, unit: "ms", label: "100 trials" }, ratio: runBig / runSmall, ratioMeaning: `${N} trials / 100 trials`, target: { on: "ratio", op: "<=", value: 3 } });
  reportFigure({ bench: "viewer", figure: "trial page first render, 1 MB log tail (vs 100-byte log)", proctor: { value: trialBig, unit: "ms" }, baseline: { value: trialSmall, unit: "ms", label: "100-byte log" }, ratio: trialBig / trialSmall, ratioMeaning: "1 MB log / 100-byte log", target: { on: "ratio", op: "<=", value: 3 } });
  reportFigure({ bench: "viewer", figure: `one appended trial in a ${N}-trial run: incremental read (vs full reload)`, proctor: { value: median(incremental), unit: "ms" }, baseline: { value: median(full), unit: "ms", label: "loadRun" }, ratio: median(incremental) / median(full), ratioMeaning: "RunDir.refresh / loadRun", target: { on: "ratio", op: "<=", value: 0.1 } });
  reportFigure({ bench: "viewer", figure: `viewer process RSS with a ${N}-trial run open (vs before start)`, proctor: { value: after.rss / MB, unit: "MB" }, baseline: { value: before.rss / MB, unit: "MB", label: "before start" }, ratio: after.rss / before.rss, ratioMeaning: "after / before", target: { on: "proctor", op: "<", value: 300, unit: "MB" } });
} finally {
  await rm(root, { recursive: true, force: true });
}
