import { mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { existsSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { chromium, type Browser, type Page } from "playwright-core";
import type { TrialResult } from "@proctor/schema";
import { summarize } from "@proctor/reward";
import { readViewerAsset, startViewer, type ViewerHandle } from "./index";

const CHROMIUM = process.env.CHROMIUM_PATH ?? "/usr/bin/chromium";
/** Screenshots land here for people to look at (gitignored). */
const SHOTS = resolve(import.meta.dirname, "..", ".tmp", "screenshots");
const haveChromium = existsSync(CHROMIUM);
if (!haveChromium && process.env.CI === "true") throw new Error(`viewer tests need Chromium at ${CHROMIUM} (.ci/run installs it)`);

interface Agent {
  name: string;
  model?: string;
  costUsd?: number;
}
const oracle: Agent = { name: "oracle" };
const small: Agent = { name: "llm", model: "model-small", costUsd: 0.01 };
const large: Agent = { name: "llm", model: "model-large", costUsd: 0.05 };
const TASKS = ["data-a", "data-b", "web-a", "web-b"];

function trial(taskId: string, attempt: number, passed: boolean, agent: Agent): TrialResult {
  return {
    trialId: `${taskId}__${attempt}`, taskId, attempt, category: taskId.startsWith("web") ? "web" : "data", difficulty: null,
    status: passed ? "passed" : "failed", reward: passed ? 1 : 0, error: null, durationMs: 2000 + attempt * 500,
    startedAt: "2025-03-01T10:00:00.000Z", finishedAt: "2025-03-01T10:00:02.000Z", retries: 0, phases: [{ phase: "agent", durationMs: 1500 }],
    agent: { exitCode: 0, timedOut: false, name: agent.name, ...(agent.model ? { model: agent.model, usage: { inputTokens: 2000, outputTokens: 500, requests: 4, retries: 0, costUsd: agent.costUsd } } : {}) },
    checks: null, integrity: { isolation: "isolated", tamperChecked: true, tampered: [], survivors: [], flagged: false, note: null },
  };
}

let root: string;

/** A finished run of `dataset` as `proctor run` leaves it: run.json (with origins), results.jsonl, summary.json, trial dirs. */
async function writeRun(runId: string, version: string, results: TrialResult[], startedAt: string, options: { attempts?: number; hashes?: Record<string, string> } = {}): Promise<void> {
  const dir = join(root, "runs", runId);
  await mkdir(dir, { recursive: true });
  for (const r of results) {
    await mkdir(join(dir, "trials", r.trialId, "verifier"), { recursive: true });
    await writeFile(join(dir, "trials", r.trialId, "result.json"), JSON.stringify(r));
    await writeFile(join(dir, "trials", r.trialId, "verifier", "test-stdout.txt"), r.status === "passed" ? "1 passed\n" : `FAILED tests/test_${r.taskId}.py::test_it - AssertionError\n`);
  }
  const attempts = options.attempts ?? 1;
  await writeFile(join(dir, "run.json"), JSON.stringify({
    runId, tasks: TASKS.map((id) => ({ id, hash: options.hashes?.[id] ?? `h-${version}` })), sources: [join(root, "tasks")], agent: { kind: "oracle" }, agentHash: null,
    runtime: "local", attempts, concurrency: 1, timeoutMultiplier: 1, defaultImage: null, configHash: "x", origins: TASKS.map((taskId) => ({ taskId, dataset: { name: "tbench", version }, repository: "https://example.com/tbench.git", commit: "0123abc", path: `tasks/${taskId}` })),
  }));
  await writeFile(join(dir, "results.jsonl"), results.map((r) => `${JSON.stringify(r)}\n`).join(""));
  await writeFile(join(dir, "summary.json"), JSON.stringify(summarize({ runId, results, plannedTrials: TASKS.length * attempts, attempts, startedAt, now: new Date(Date.parse(startedAt) + 60_000), status: "completed" })));
}

const run = (agent: Agent, passed: (i: number) => boolean) => TASKS.map((t, i) => trial(t, 1, passed(i), agent));

let viewer: ViewerHandle;
let browser: Browser;
const consoleErrors: string[] = [];
const foreignRequests: string[] = [];

beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), "proctor-viewer-board-"));
  await writeRun("v1-oracle", "1.0", run(oracle, () => true), "2025-03-01T10:00:00.000Z");
  await writeRun("v1-small", "1.0", run(small, (i) => i < 2), "2025-03-01T11:00:00.000Z");
  // Two attempts per task: a pass@k curve; data-b fails its second attempt.
  await writeRun("v1-large", "1.0", TASKS.flatMap((t, i) => [trial(t, 1, i < 3, large), trial(t, 2, i !== 1, large)]), "2025-03-01T12:00:00.000Z", { attempts: 2 });
  await writeRun("v2-oracle", "2.0", run(oracle, () => true), "2025-03-02T10:00:00.000Z");
  await writeRun("v2-small", "2.0", run(small, (i) => i === 0), "2025-03-02T11:00:00.000Z");
  // web-b's content changed under this run: its row is not comparable with the other two.
  await writeRun("v2-large", "2.0", run(large, () => true), "2025-03-02T12:00:00.000Z", { hashes: { "web-b": "edited" } });
  await mkdir(SHOTS, { recursive: true });
  viewer = await startViewer({ paths: [join(root, "runs")], port: 0, pollMs: 300 });
  if (haveChromium) browser = await chromium.launch({ executablePath: CHROMIUM, args: ["--headless", "--no-sandbox", "--disable-gpu"] });
});

afterAll(async () => {
  await browser?.close();
  await viewer?.close();
  await rm(root, { recursive: true, force: true });
});

async function open(path: string): Promise<Page> {
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 }, acceptDownloads: true });
  page.on("console", (m) => {
    if (m.type() === "error") consoleErrors.push(`${page.url()}: ${m.text()}`);
  });
  page.on("pageerror", (e) => consoleErrors.push(`${page.url()}: ${e.message}`));
  page.on("request", (req) => {
    const url = new URL(req.url());
    if (!["127.0.0.1", "localhost"].includes(url.hostname) && !["data:", "blob:"].includes(url.protocol)) foreignRequests.push(req.url());
  });
  await page.goto(new URL(path, viewer.url).href);
  return page;
}

describe("leaderboard API", () => {
  test("groups by dataset name@version and agent + model, flags the row whose task content differs", async () => {
    const res = await fetch(new URL("api/leaderboard", viewer.url));
    const board = (await res.json()) as { runs: number; groups: { dataset: { key: string }; comparable: boolean; rows: { agent: string; model: string | null; comparable: boolean; notComparable: string | null; costPerTask: number | null }[] }[] };
    expect(board.runs).toBe(6);
    expect(board.groups.map((g) => [g.dataset.key, g.comparable, g.rows.length])).toEqual([
      ["tbench@1.0", true, 3],
      ["tbench@2.0", false, 3],
    ]);
    const flagged = board.groups[1]?.rows.filter((r) => !r.comparable);
    expect(flagged?.map((r) => [r.model, r.notComparable])).toEqual([["model-large", "1 task with other content (hash)"]]);
    expect(board.groups[0]?.rows.map((r) => r.costPerTask)).toEqual([null, 0.1, 0.01]);
    const missing = await fetch(new URL("api/leaderboard/plots?dataset=nope", viewer.url));
    expect(missing.status).toBe(404);
  });

  test("the charting library ships with the viewer (vendored d3, the same file as the pinned package)", async () => {
    const asset = await readViewerAsset("vendor-d3.js");
    expect(asset?.headers["content-type"]).toContain("text/javascript");
    // d3's exports map names its ES module build only: dist/d3.min.js sits beside it.
    const pinned = await readFile(join(dirname(createRequire(import.meta.url).resolve("d3")), "d3.min.js"));
    expect(asset?.body.equals(pinned), "assets/vendor-d3.js differs from d3/dist/d3.min.js: copy it again after upgrading d3").toBe(true);
  });
});

describe.skipIf(!haveChromium)("leaderboard and plots in Chromium", () => {
  test("leaderboard page: one table per dataset version, rows by agent + model, cost or —, the non-comparable flag", async () => {
    const page = await open("/#/leaderboard");
    await page.locator("table.board").nth(1).waitFor();
    const v1 = page.locator('table.board[data-dataset="tbench@1.0"]');
    expect(await v1.locator("tbody tr").count()).toBe(3);
    expect(await v1.locator("tbody tr").first().innerText()).toMatch(/1\s+oracle\s+-\s+100\.0% \[51\.0%, 100\.0%\]\s+-\s+—\s+—/);
    expect(await v1.locator('tr[data-row="llm|model-large"]').innerText()).toMatch(/75\.0% \[40\.9%, 92\.9%\]\s+@1 75\.0% @2 100\.0%\s+\$0\.100\s+5\.00k/);
    const v2 = page.locator('table.board[data-dataset="tbench@2.0"]');
    expect(await v2.locator("tr.not-comparable").count()).toBe(1);
    expect(await v2.locator("tr.not-comparable").innerText()).toContain("⚠ not comparable: 1 task with other content (hash)");
    expect(await page.locator("h2.dataset").nth(1).innerText()).toContain("⚠ not all rows comparable");
    await page.screenshot({ path: join(SHOTS, "leaderboard.png"), fullPage: true });
    await page.close();
  });

  test("plots page: each plot with its marks, exports as SVG and PNG, a heat map cell opens its trial", async () => {
    const page = await open("/#/leaderboard");
    await page.locator("h2.dataset").first().getByRole("link", { name: "plots →" }).click();
    await page.locator("#plot-heatmap svg").waitFor();
    // Rows with a cost: model-small and model-large; both on the Pareto front (cheaper / better).
    expect(await page.locator("#plot-cost .mark").count()).toBe(2);
    expect(await page.locator("#plot-cost .mark.pareto").count()).toBe(2);
    expect(await page.locator("#unpriced").innerText()).toContain("oracle");
    // 2 categories x 3 runs (the newest run of each row).
    expect(await page.locator("#plot-categories .mark").count()).toBe(6);
    // One run with 2 attempts: pass@1 and pass@2.
    expect(await page.locator("#plot-passk .mark").count()).toBe(2);
    // 4 tasks x 3 runs.
    expect(await page.locator("#plot-heatmap .mark").count()).toBe(12);
    await page.screenshot({ path: join(SHOTS, "leaderboard-plots.png"), fullPage: true });

    const [svgDownload] = await Promise.all([page.waitForEvent("download"), page.locator('#plot-cost button[data-export="svg"]').click()]);
    expect(svgDownload.suggestedFilename()).toBe("tbench_1.0-cost.svg");
    const svg = await readFile((await svgDownload.path()) as string, "utf8");
    expect(svg).toMatch(/^<\?xml[^]*<svg xmlns="http:\/\/www\.w3\.org\/2000\/svg"/);
    expect(svg.match(/class="mark/g)).toHaveLength(2);
    const [pngDownload] = await Promise.all([page.waitForEvent("download"), page.locator('#plot-heatmap button[data-export="png"]').click()]);
    expect(pngDownload.suggestedFilename()).toBe("tbench_1.0-tasks.png");
    const png = await readFile((await pngDownload.path()) as string);
    expect(png.subarray(1, 4).toString()).toBe("PNG");

    // Fewer runs picked: the plots follow.
    await page.locator("#plot-runs summary").click();
    await page.locator('#plot-runs input[data-run="v1-oracle"]').uncheck();
    await page.locator("#plot-runs summary").getByText("Runs shown: 2 of 3").waitFor();
    expect(await page.locator("#plot-heatmap .mark").count()).toBe(8);
    expect(await page.locator("#plot-categories .mark").count()).toBe(4);

    // data-b failed its second attempt in v1-large: the cell opens that trial.
    await page.locator('#plot-heatmap a[data-task="data-b"][data-run="v1-large"]').click();
    await page.getByRole("heading", { name: /Trial data-b__2/ }).waitFor();
    expect(page.url()).toContain("#/run/v1-large/trial/data-b__2");
    expect(await page.locator("#first-failure").innerText()).toContain("test_data-b.py::test_it");
    await page.close();
  });

  test("a run that finishes while the leaderboard is open appears on it", async () => {
    const page = await open("/#/leaderboard");
    await page.locator("#live").getByText("live").waitFor();
    await page.locator('table.board[data-dataset="tbench@2.0"] tbody tr').nth(2).waitFor();
    expect(await page.locator('tr[data-row="codex|model-x"]').count()).toBe(0);
    await page.evaluate(() => ((globalThis as unknown as { marker: number }).marker = 7));
    await writeRun("v2-codex", "2.0", run({ name: "codex", model: "model-x", costUsd: 0.2 }, (i) => i !== 3), "2025-03-03T10:00:00.000Z");
    const row = page.locator('table.board[data-dataset="tbench@2.0"] tr[data-row="codex|model-x"]');
    await row.waitFor({ timeout: 15_000 });
    expect(await row.innerText()).toMatch(/codex\s+model-x\s+75\.0%.*\$0\.200/);
    expect(await page.locator("#board-summary").innerText()).toContain("7 runs");
    // Updated in place, not reloaded.
    expect(await page.evaluate(() => (globalThis as unknown as { marker?: number }).marker)).toBe(7);
    await page.close();
  });

  test("no console errors, nothing requested from another host", () => {
    expect(consoleErrors).toEqual([]);
    expect(foreignRequests).toEqual([]);
  });
});
