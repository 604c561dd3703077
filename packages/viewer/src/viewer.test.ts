import { createHash } from "node:crypto";
import { appendFile, mkdir, mkdtemp, rm, symlink, writeFile } from "node:fs/promises";
import { existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { chromium, type Browser, type Page } from "playwright-core";
import type { TrialResult } from "@proctor/schema";
import { summarize } from "@proctor/reward";
import { startViewer, type ViewerHandle } from "./index";

const CHROMIUM = process.env.CHROMIUM_PATH ?? "/usr/bin/chromium";
/** Screenshots land here for people to look at (gitignored). */
const SHOTS = resolve(import.meta.dirname, "..", ".tmp", "screenshots");
const haveChromium = existsSync(CHROMIUM);
if (!haveChromium && process.env.CI === "true") throw new Error(`viewer tests need Chromium at ${CHROMIUM} (.ci/run installs it)`);

function trial(taskId: string, status: TrialResult["status"], extra: Partial<TrialResult> = {}): TrialResult {
  return {
    trialId: `${taskId}__1`, taskId, attempt: 1, category: taskId.startsWith("web") ? "web" : "data", difficulty: null, status,
    reward: status === "passed" ? 1 : status === "failed" ? 0 : null, error: null, durationMs: 2400,
    startedAt: "2025-03-01T10:00:00.000Z", finishedAt: "2025-03-01T10:00:02.400Z", retries: 0,
    phases: [{ phase: "environment", durationMs: 100 }, { phase: "agent", durationMs: 1800 }, { phase: "verifier", durationMs: 500 }],
    agent: { exitCode: status === "passed" ? 0 : 1, timedOut: false, name: "oracle" }, checks: null,
    integrity: { isolation: "shared", tamperChecked: true, tampered: [], survivors: [], flagged: false, note: null },
    ...extra,
  };
}

let root: string;
let tasksDir: string;

async function writeRun(runId: string, taskIds: string[], results: TrialResult[], status: "running" | "completed", startedAt: string): Promise<string> {
  const dir = join(root, "runs", runId);
  await mkdir(dir, { recursive: true });
  await writeFile(join(dir, "run.json"), JSON.stringify({ runId, tasks: taskIds.map((id) => ({ id, hash: "h" })), sources: [tasksDir], agent: { kind: "oracle" }, agentHash: null, runtime: "local", attempts: 1, concurrency: 1, timeoutMultiplier: 1, defaultImage: null, configHash: "x", pins: pinsOf(runId, taskIds) }));
  await writeFile(join(dir, "results.jsonl"), results.map((r) => `${JSON.stringify(r)}\n`).join(""));
  await writeSummary(dir, runId, taskIds.length, results, status, startedAt);
  for (const r of results) await writeTrialFiles(dir, r);
  return dir;
}

/** Pins as a run records them: data-clean's content differs between runs (its digest names the run). */
function pinsOf(runId: string, taskIds: string[]) {
  const digest = (id: string) => (id === "data-clean" ? createHash("sha256").update(runId).digest("hex") : "0".repeat(64));
  return { proctor: "0.1.0", agent: { name: "oracle", version: null, hash: null }, model: null, tasks: Object.fromEntries(taskIds.map((id) => [id, { digest: digest(id), image: null, imageId: null }])) };
}

async function writeSummary(dir: string, runId: string, planned: number, results: TrialResult[], status: "running" | "completed", startedAt: string): Promise<void> {
  await writeFile(join(dir, "summary.json"), JSON.stringify(summarize({ runId, results, plannedTrials: planned, attempts: 1, startedAt, now: new Date(Date.parse(startedAt) + 90_000), status })));
}

async function writeTrialFiles(dir: string, r: TrialResult): Promise<void> {
  const t = join(dir, "trials", r.trialId);
  await mkdir(join(t, "agent"), { recursive: true });
  await mkdir(join(t, "verifier"), { recursive: true });
  await writeFile(join(t, "result.json"), JSON.stringify(r));
  await writeFile(join(t, "agent", "stdout.txt"), `agent output for ${r.taskId}\n<script>alert(1)</script>\n`);
  await writeFile(join(t, "verifier", "test-stdout.txt"), r.status === "passed" ? "1 passed\n" : "FAILED tests/test_outputs.py::test_file - AssertionError\n");
}

/** The shape @proctor/agents' llm agent writes (ATIF-v1.4 field names; see llm-trajectory.ts). */
const LLM_TRAJECTORY = {
  schema_version: "ATIF-v1.4",
  session_id: "data-clean__1",
  agent: { name: "proctor-llm", version: "0.1.0", model_name: "scripted-model", extra: {} },
  steps: [
    { step_id: 1, timestamp: "2025-03-02T10:00:01.000Z", source: "system", message: "You are working in a Linux sandbox." },
    { step_id: 2, timestamp: "2025-03-02T10:00:01.000Z", source: "user", message: "Do the data-clean task." },
    {
      step_id: 3,
      timestamp: "2025-03-02T10:00:02.000Z",
      source: "agent",
      model_name: "scripted-model",
      message: "Let me look at the data first.",
      tool_calls: [
        { tool_call_id: "call_1", function_name: "bash", arguments: { command: "head -n 3 data.csv" } },
        { tool_call_id: "call_2", function_name: "read_file", arguments: { path: "notes.txt" } },
      ],
      observation: { results: [{ source_call_id: "call_1", content: "exit code 0\nid,name\n1,<b>ada</b>" }, { source_call_id: "call_2", content: "clean the names" }] },
      metrics: { prompt_tokens: 120, completion_tokens: 30 },
    },
    { step_id: 4, timestamp: "2025-03-02T10:00:03.000Z", source: "agent", model_name: "scripted-model", message: "", tool_calls: [{ tool_call_id: "call_3", function_name: "submit", arguments: {} }], observation: { results: [{ source_call_id: "call_3", content: "submitted" }] }, metrics: { prompt_tokens: 180, completion_tokens: 5 } },
  ],
  final_metrics: { total_prompt_tokens: 300, total_completion_tokens: 35, total_cached_tokens: 0, total_steps: 4, extra: { requests: 2, retries: 0 } },
  extra: { stop_reason: "submit", messages: [] },
};

let viewer: ViewerHandle;
let browser: Browser;
const consoleErrors: string[] = [];
const foreignRequests: string[] = [];
const tasks = ["data-clean", "data-join", "web-server", "web-tls"];

beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), "proctor-viewer-"));
  tasksDir = join(root, "tasks");
  for (const id of tasks) {
    await mkdir(join(tasksDir, id), { recursive: true });
    await writeFile(join(tasksDir, id, "instruction.md"), `Do the ${id} task.\n`);
  }
  await writeRun("20250301-100000-oracle", tasks, [trial("data-clean", "passed"), trial("data-join", "passed"), trial("web-server", "passed", { worker: { name: "gpu-box-1", host: "node7" }, integrity: { isolation: "shared", tamperChecked: true, tampered: [], survivors: [{ pid: 7, ppid: 1, command: "nginx -g daemon off;", ports: [80] }], flagged: true, note: null } }), trial("web-tls", "passed")], "completed", "2025-03-01T10:00:00.000Z");
  const agentRun = await writeRun("20250302-100000-agent", tasks, [trial("data-clean", "failed"), trial("data-join", "error", { error: { kind: "verifier", message: "no reward file: /logs/verifier/reward.txt" } })], "running", "2025-03-02T10:00:00.000Z");
  await writeFile(join(agentRun, "trials", "data-clean__1", "agent", "trajectory.json"), JSON.stringify(LLM_TRAJECTORY, null, 2));
  // What the sandbox wrote to /logs, as collect leaves it: the tests' pytest output, the agent's own
  // log, a cut dir's note, and a link no collect makes (the API must not follow it).
  const sandboxLogs = join(agentRun, "trials", "data-clean__1", "logs");
  await mkdir(join(sandboxLogs, "verifier"), { recursive: true });
  await mkdir(join(sandboxLogs, "agent", "runs"), { recursive: true });
  await writeFile(join(sandboxLogs, "verifier", "pytest.txt"), "FAILED tests/test_clean.py::test_names - AssertionError: assert '<b>ada</b>' == 'ada'\n1 failed in 0.12s\n");
  await writeFile(join(sandboxLogs, "agent", "runs", "step-1.log"), "cleaning names\n");
  await writeFile(join(sandboxLogs, "agent.TRUNCATED"), "/logs/agent went past the 104857600 byte cap on collected logs (limits.logBytes): /logs/agent/runs/step-2.log was cut and nothing after it copied\n");
  await symlink("/etc/passwd", join(sandboxLogs, "verifier", "passwd"));
  await mkdir(SHOTS, { recursive: true });
  viewer = await startViewer({ paths: [join(root, "runs")], port: 0, pollMs: 300 });
  if (haveChromium) browser = await chromium.launch({ executablePath: CHROMIUM, args: ["--headless", "--no-sandbox", "--disable-gpu"] });
});

afterAll(async () => {
  await browser?.close();
  await viewer?.close();
  await rm(root, { recursive: true, force: true });
});

/** A page of the viewer (a path on `viewer`, or a full URL of another viewer), watched for errors and foreign requests. */
async function open(path: string): Promise<Page> {
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  page.on("console", (m) => {
    if (m.type() === "error") consoleErrors.push(`${page.url()}: ${m.text()}`);
  });
  page.on("pageerror", (e) => consoleErrors.push(`${page.url()}: ${e.message}`));
  page.on("request", (req) => {
    const url = new URL(req.url());
    if (!["127.0.0.1", "localhost"].includes(url.hostname) && url.protocol !== "data:") foreignRequests.push(req.url());
  });
  await page.goto(new URL(path, viewer.url).href);
  return page;
}

describe.skipIf(!haveChromium)("proctor view in Chromium", () => {
  test("runs list: agent, tasks, pass rate with CI, status; compare two ticked runs", async () => {
    const page = await open("/");
    await page.getByRole("link", { name: "20250301-100000-oracle" }).waitFor();
    const text = await page.locator("main").innerText();
    expect(text).toContain("100.0% [51.0%, 100.0%]"); // 4/4, Wilson 95%
    expect(text).toMatch(/20250302-100000-agent\s+oracle\s+-\s+tasks\s+4\s+0\.0%/);
    expect(text).toContain("running");
    await page.screenshot({ path: join(SHOTS, "runs.png"), fullPage: true });
    await expect(page.locator("#compare").isDisabled()).resolves.toBe(true);
    await page.getByLabel("select 20250301-100000-oracle").check();
    await page.getByLabel("select 20250302-100000-agent").check();
    await page.locator("#compare").click();
    await page.getByText("Flips (2)").waitFor();
    const compare = await page.locator("main").innerText();
    expect(compare).toContain("0 fail → pass, 2 pass → fail");
    expect(compare).toContain("p = 0.5000 (2 discordant of 2 pairs; exact two-sided)");
    // The two runs ran different versions of data-clean: said above everything else.
    expect(await page.locator("#pins-warning").innerText()).toMatch(/^warning: pins differ: task data-clean content \([0-9a-f]{12} vs [0-9a-f]{12}\)$/);
    await page.screenshot({ path: join(SHOTS, "compare.png"), fullPage: true });
    await page.close();
  });

  test("run page: counts, categories, filters, search; updates live while the run progresses", async () => {
    const runId = "20250302-100000-agent";
    const page = await open(`/#/run/${runId}`);
    await page.locator("#finished").getByText("2/4").waitFor();
    expect(await page.locator("#errored").innerText()).toBe("1");
    expect(await page.locator("main").innerText()).toContain("no reward file: /logs/verifier/reward.txt");
    await page.getByLabel("status").selectOption("error");
    await page.locator("#page-info").getByText("1–1 of 1").waitFor();
    await page.getByLabel("status").selectOption("");
    await page.getByLabel("search task id").fill("clean");
    await page.locator("#page-info").getByText("1–1 of 1").waitFor();
    await page.getByLabel("search task id").fill("");
    await page.locator("#page-info").getByText("1–2 of 2").waitFor();
    await page.evaluate(() => ((globalThis as unknown as { marker: number }).marker = 42));

    // The run progresses: two more trials finish while the page stays open.
    const dir = join(root, "runs", runId);
    const more = [trial("web-server", "passed"), trial("web-tls", "passed")];
    const all = [trial("data-clean", "failed"), trial("data-join", "error", { error: { kind: "verifier", message: "no reward file: /logs/verifier/reward.txt" } }), ...more];
    for (const r of more) await writeTrialFiles(dir, r);
    await appendFile(join(dir, "results.jsonl"), more.map((r) => `${JSON.stringify(r)}\n`).join(""));
    await writeSummary(dir, runId, 4, all, "completed", "2025-03-02T10:00:00.000Z");
    await page.locator("#finished").getByText("4/4").waitFor({ timeout: 60_000 });
    expect(await page.locator("#passed").innerText()).toBe("2");
    expect(await page.evaluate(() => (globalThis as unknown as { marker: number }).marker)).toBe(42); // no reload
    expect(await page.locator("#live").innerText()).toBe("live");
    await page.screenshot({ path: join(SHOTS, "run.png"), fullPage: true });
    await page.close();
  });

  test("trial page: instruction, reason, phases, integrity, logs as text", async () => {
    const page = await open("/#/run/20250301-100000-oracle/trial/web-server__1");
    await page.locator("#instruction").getByText("Do the web-server task.").waitFor();
    const text = await page.locator("main").innerText();
    expect(text).toContain("survivors: 1 (nginx); flagged: passed with agent processes alive");
    expect(text).toContain("7 nginx -g daemon off; :80");
    expect(text).toMatch(/agent\s+2s/);
    expect(text).toMatch(/worker\s+gpu-box-1 on node7/); // the queue worker that ran it
    expect(text).not.toContain("null");
    await page.locator('pre[data-file="agent/stdout.txt"]').getByText("agent output for web-server").waitFor();
    expect(await page.locator('pre[data-file="agent/stdout.txt"]').innerText()).toContain("<script>alert(1)</script>"); // shown, not run
    await page.locator('pre[data-file="verifier/test-stdout.txt"]').getByText("1 passed").waitFor();
    await page.screenshot({ path: join(SHOTS, "trial.png"), fullPage: true });
    await page.close();
  });

  test("trial page: an LLM trajectory turn by turn, each tool call with its own output", async () => {
    const page = await open("/#/run/20250302-100000-agent/trial/data-clean__1");
    const trajectory = page.locator("#trajectory");
    await trajectory.getByText("Let me look at the data first.").waitFor();
    const turns = trajectory.locator(".turn");
    expect(await turns.count()).toBe(4);
    const third = turns.nth(2);
    expect(await third.locator("b").innerText()).toBe("3. agent");
    expect(await third.innerText()).toContain("120 in / 30 out tokens");
    const calls = third.locator(".call");
    expect(await calls.count()).toBe(2);
    expect(await calls.nth(0).locator(".tool-call").innerText()).toBe('→ bash({"command":"head -n 3 data.csv"})');
    expect(await calls.nth(0).locator(".tool-output").innerText()).toBe("exit code 0\nid,name\n1,<b>ada</b>"); // shown, not rendered
    expect(await calls.nth(1).locator(".tool-output").innerText()).toBe("clean the names");
    expect(await turns.nth(3).locator(".tool-call").innerText()).toBe("→ submit({})");
    await page.screenshot({ path: join(SHOTS, "trajectory.png"), fullPage: true });
    await page.close();
  });

  test("trial page: the first failing test and its message come first, above the facts", async () => {
    const page = await open("/#/run/20250302-100000-agent/trial/data-clean__1");
    const failure = page.locator("#first-failure");
    await failure.waitFor();
    expect(await failure.innerText()).toBe("First failure: tests/test_outputs.py::test_file — AssertionError");
    // Right under the title: nothing else stands between them.
    expect(await page.locator("main h1 + p#first-failure").count()).toBe(1);
    await page.close();
  });

  test("trial page: the files the sandbox wrote (the tests' pytest output), labelled as the sandbox's, with sizes and the cut marks", async () => {
    const page = await open("/#/run/20250302-100000-agent/trial/data-clean__1");
    const section = page.locator("#sandbox-files");
    await section.locator('pre[data-file="logs/verifier/pytest.txt"]').getByText("1 failed in 0.12s").waitFor();
    const text = await section.innerText();
    expect(text).toContain("Files the sandbox wrote");
    expect(text).toContain("Written to /logs by processes in the sandbox (the task's tests, the agent), not by Proctor");
    expect(text).toMatch(/logs\/verifier\/pytest\.txt \d+ bytes/);
    expect(text).toContain("logs/agent/runs/step-1.log 15 bytes");
    expect(await section.locator('p.truncated[data-dir="logs/agent"]').innerText()).toBe(
      "logs/agent is incomplete: /logs/agent went past the 104857600 byte cap on collected logs (limits.logBytes): /logs/agent/runs/step-2.log was cut and nothing after it copied",
    );
    await section.locator('pre[data-file="logs/agent/runs/step-1.log"]').getByText("cleaning names").waitFor();
    expect(text).not.toContain("passwd"); // a link is not a file the sandbox wrote
    expect(text).not.toContain(".TRUNCATED");
    await page.screenshot({ path: join(SHOTS, "trial-sandbox-files.png"), fullPage: true });
    await page.close();
  });

  test("no console errors and no request left localhost", () => {
    expect(consoleErrors).toEqual([]);
    expect(foreignRequests).toEqual([]);
  });
});

describe.skipIf(!haveChromium)("a run of 10,000 trials with a 1 MB log", () => {
  let big: ViewerHandle;
  const runId = "20250303-100000-big";
  const N = 10_000;
  const statusOf = (i: number): TrialResult["status"] => (i % 10 === 0 ? "error" : i % 3 === 0 ? "failed" : "passed");

  beforeAll(async () => {
    const dir = join(root, "big", runId);
    await mkdir(dir, { recursive: true });
    const ids = Array.from({ length: N }, (_, i) => `task-${String(i).padStart(5, "0")}`);
    const results = ids.map((id, i) => trial(id, statusOf(i), { category: `cat-${i % 7}`, durationMs: 1000 + i, ...(statusOf(i) === "error" ? { error: { kind: "agent" as const, message: `agent crashed on ${id}` } } : {}) }));
    await writeFile(join(dir, "run.json"), JSON.stringify({ runId, tasks: ids.map((id) => ({ id, hash: "h" })), sources: [tasksDir], agent: { kind: "oracle" }, agentHash: null, runtime: "local", attempts: 1, concurrency: 1, timeoutMultiplier: 1, defaultImage: null, configHash: "x" }));
    await writeFile(join(dir, "results.jsonl"), results.map((r) => `${JSON.stringify(r)}\n`).join(""));
    await writeSummary(dir, runId, N, results, "completed", "2025-03-03T10:00:00.000Z");
    const t = join(dir, "trials", "task-00042__1", "agent");
    await mkdir(t, { recursive: true });
    const lines = Array.from({ length: 14_000 }, (_, i) => `line ${String(i + 1).padStart(6, "0")} ${"x".repeat(60)}`);
    await writeFile(join(t, "stdout.txt"), `${lines.join("\n")}\nTHE END OF THE LOG\n`); // ~1 MB
    big = await startViewer({ paths: [join(root, "big")], port: 0, pollMs: 300 });
  });
  afterAll(async () => {
    await big?.close();
  });

  test("the trial table pages, filters and searches on the server; page 2 holds the next 50 trials", async () => {
    const page = await open(new URL(`/#/run/${runId}`, big.url).href);
    await page.locator("#page-info").getByText("1–50 of 10000").waitFor();
    expect(await page.locator("main table").last().locator("tbody tr").count()).toBe(50);
    await page.getByRole("button", { name: "next →" }).click();
    await page.locator("#page-info").getByText("51–100 of 10000").waitFor();
    const ids = await page.locator("main table").last().locator("tbody tr td:first-child").allInnerTexts();
    expect(ids).toEqual(Array.from({ length: 50 }, (_, i) => `task-${String(50 + i).padStart(5, "0")}__1`));
    await page.getByLabel("status").selectOption("error");
    await page.locator("#page-info").getByText("1–50 of 1000").waitFor();
    await page.getByLabel("search task id").fill("task-0004");
    await page.locator("#page-info").getByText("1–1 of 1").waitFor(); // task-00040 is the only error among task-0004x
    await page.getByLabel("status").selectOption("");
    await page.locator("#page-info").getByText("1–10 of 10").waitFor();
    await page.screenshot({ path: join(SHOTS, "run-10000.png"), fullPage: true });
    await page.close();
  });

  test("a 1 MB log shows its tail first; earlier parts load on request", async () => {
    const page = await open(new URL(`/#/run/${runId}/trial/task-00042__1`, big.url).href);
    const log = page.locator('pre[data-file="agent/stdout.txt"]');
    await log.getByText("THE END OF THE LOG").waitFor();
    const tail = await log.innerText();
    expect(tail.length).toBeLessThan(70 * 1024);
    expect(tail).not.toContain("line 000001 ");
    await page.locator('button[data-more="agent/stdout.txt"]').click();
    await page.locator('button[data-more="agent/stdout.txt"]').getByText(/load earlier \(128 of \d+ KiB shown\)/).waitFor();
    expect((await log.innerText()).length).toBeGreaterThan(tail.length + 60 * 1024);
    await page.screenshot({ path: join(SHOTS, "trial-1mb-log.png") });
    await page.close();
  });

  test("no console errors and no request left localhost (10,000-trial pages)", () => {
    expect(consoleErrors).toEqual([]);
    expect(foreignRequests).toEqual([]);
  });
});

describe("viewer API", () => {
  test("refuses files outside the trial's known logs and unknown runs", async () => {
    const bad = await fetch(new URL("/api/runs/20250301-100000-oracle/trials/data-clean__1/file?name=../../run.json", viewer.url));
    expect(bad.status).toBe(400);
    // Under logs/: only regular files inside it, reached without links.
    const logFile = (name: string) => fetch(new URL(`/api/runs/20250302-100000-agent/trials/data-clean__1/file?name=${encodeURIComponent(name)}`, viewer.url));
    expect((await logFile("logs/../result.json")).status).toBe(404);
    expect((await logFile("logs/verifier/passwd")).status).toBe(404);
    expect((await logFile("logs/verifier")).status).toBe(404);
    const pytest = (await (await logFile("logs/verifier/pytest.txt")).json()) as { text: string };
    expect(pytest.text).toContain("1 failed in 0.12s");
    expect((await fetch(new URL("/api/runs/nope", viewer.url))).status).toBe(404);
    expect((await fetch(new URL("/../../etc/passwd", viewer.url))).status).toBe(404);
    const page = (await (await fetch(new URL("/api/runs/20250301-100000-oracle/trials?limit=2&offset=2", viewer.url))).json()) as { trials: { trialId: string }[] };
    expect(page).toMatchObject({ total: 4, offset: 2, limit: 2 });
    expect(page.trials.map((t) => t.trialId)).toEqual(["web-server__1", "web-tls__1"]);
  });
});
