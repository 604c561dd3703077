import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { chromium, type Browser } from "playwright-core";
import type { TrialResult } from "@proctor/schema";
import { summarize } from "@proctor/reward";
import { startViewer, type ViewerHandle } from "./index";

const CHROMIUM = process.env.CHROMIUM_PATH ?? "/usr/bin/chromium";
const haveChromium = existsSync(CHROMIUM);

/** A finished llm trial whose usage is priced (or not, with the reason). */
function trial(taskId: string, status: "passed" | "failed", usage: { costUsd: number } | { unpriced: string }): TrialResult {
  return {
    trialId: `${taskId}__1`, taskId, attempt: 1, category: null, difficulty: null, status, reward: status === "passed" ? 1 : 0, error: null, durationMs: 1000,
    startedAt: "2025-03-01T10:00:00.000Z", finishedAt: "2025-03-01T10:00:01.000Z", retries: 0, phases: [],
    agent: { exitCode: 0, timedOut: false, name: "llm", model: "m", usage: { inputTokens: 1000, outputTokens: 10, requests: 1, retries: 0, ...usage } }, checks: null,
  };
}

let root: string;
let viewer: ViewerHandle;
let browser: Browser | undefined;

beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), "proctor-viewer-cost-"));
  const dir = join(root, "priced");
  const results = [trial("alpha", "passed", { costUsd: 0.25 }), trial("beta", "failed", { costUsd: 0.5 }), trial("gamma", "failed", { unpriced: 'no price for model "m"' })];
  await mkdir(dir, { recursive: true });
  await writeFile(join(dir, "results.jsonl"), results.map((r) => `${JSON.stringify(r)}\n`).join(""));
  const source = { name: "@pydantic/genai-prices", version: "0.1.8" };
  await writeFile(join(dir, "summary.json"), JSON.stringify(summarize({ runId: "priced", results, plannedTrials: 4, attempts: 1, startedAt: "2025-03-01T10:00:00.000Z", now: "2025-03-01T10:01:00.000Z", status: "budget_exhausted", priceSource: source, budget: { maxCostUsd: 0.7, onBudget: "finish", exhausted: "--max-cost $0.7: the finished trials cost $0.7500" } })));
  viewer = await startViewer({ paths: [dir], port: 0 });
  if (haveChromium) browser = await chromium.launch({ executablePath: CHROMIUM, args: ["--headless", "--no-sandbox", "--disable-gpu"] });
});

afterAll(async () => {
  await browser?.close();
  await viewer?.close();
  await rm(root, { recursive: true, force: true });
});

describe.skipIf(!haveChromium)("run page cost", () => {
  test("cost, per trial and per pass, unpriced trials apart, each trial's cost, and the spent budget", async () => {
    const page = await (browser as Browser).newPage();
    const errors: string[] = [];
    page.on("pageerror", (e) => errors.push(e.message));
    page.on("console", (m) => (m.type() === "error" ? errors.push(m.text()) : undefined));
    await page.goto(new URL("/#/run/priced", viewer.url).href);
    const cost = page.locator("#cost");
    await cost.waitFor();
    const text = await cost.innerText();
    expect(text).toContain("$0.7500");
    expect(text).toContain("1 trials unpriced");
    expect(text).toContain("$0.3750"); // per priced trial
    expect(text).toContain("$0.7500"); // per pass: one pass
    expect(await page.locator("#budget").innerText()).toContain("1 trials not run");
    const main = await page.locator("main").innerText();
    expect(main).toContain("prices from @pydantic/genai-prices 0.1.8");
    expect(main).toMatch(/gamma__1[\s\S]*unpriced/);
    expect(errors).toEqual([]);
    await page.close();
  });
});
