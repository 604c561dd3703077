import { afterAll, afterEach, beforeAll, describe, expect, test } from "vitest";
import { mkdtemp, readFile, readdir, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { findProvider, type ModelPrice, type TieredPrices } from "@pydantic/genai-prices";
import { startViewer } from "@proctor/viewer";
import { startScriptedModelServer, type ScriptedReply, type ScriptedRequest, type ScriptedServer, type ScriptedUsage } from "@proctor/llm";
import { dockerTestGate } from "@proctor/sandbox-docker";
import { proctor, repoRoot } from "./test-support";

const examples = join(repoRoot, "examples/tasks");
const exampleIds = (await readdir(examples)).sort();

let out: string;
let server: ScriptedServer | null = null;
beforeAll(async () => {
  out = await mkdtemp(join(tmpdir(), "proctor-cli-cost-"));
});
afterAll(() => rm(out, { recursive: true, force: true }));
afterEach(async () => {
  await server?.close();
  server = null;
});

const solutions = new Map<string, string>();
for (const id of exampleIds) {
  solutions.set((await readFile(join(examples, id, "instruction.md"), "utf8")).trim(), `export PROCTOR_WORKDIR="$PWD"\n${await readFile(join(examples, id, "solution/solve.sh"), "utf8")}`);
}

/** Two requests per trial: the reference solution with `first`'s usage, then submit with `second`'s. */
function solveThenSubmit(first: ScriptedUsage, second: ScriptedUsage) {
  return (r: ScriptedRequest): ScriptedReply => {
    const solve = solutions.get(r.conversation.trim());
    if (!solve) return { status: 400, body: { error: { message: "unknown conversation" } } };
    if (r.turn === 0) return { toolCalls: [{ name: "bash", arguments: { command: solve } }], usage: first };
    if (r.turn === 1) return { toolCalls: [{ name: "submit", arguments: {} }], usage: second };
    return { content: "done", usage: { promptTokens: 0, completionTokens: 0 } };
  };
}

/** A per-million price of the library's data at a request's input size: the base, or the highest tier the input reached. */
function perMillion(price: ModelPrice[string], inputTokens: number): number {
  if (price === undefined) throw new Error("no such price");
  if (typeof price === "number") return price;
  const tiered = price as TieredPrices;
  return tiered.tiers.filter((t) => inputTokens > t.start).reduce((p, t) => t.price, tiered.base);
}

/** The cost of one request by hand, from the price library's own data for the model. */
function byHand(providerId: string, modelId: string, u: ScriptedUsage): number {
  const model = findProvider({ providerId })?.models.find((m) => m.id === modelId);
  if (!model || Array.isArray(model.prices)) throw new Error(`no flat price data for ${providerId}/${modelId}`);
  const p = model.prices as ModelPrice;
  const read = u.cachedTokens ?? 0;
  const write = u.cacheWriteTokens ?? 0;
  const fresh = u.promptTokens - read - write;
  const cost = (tokens: number, key: string) => (tokens === 0 ? 0 : tokens * perMillion(p[key], u.promptTokens));
  return (cost(fresh, "input_mtok") + cost(read, "cache_read_mtok") + cost(write, "cache_write_mtok") + cost(u.completionTokens, "output_mtok")) / 1e6;
}

const lines = async (path: string) => (await readFile(path, "utf8")).trim().split("\n").filter(Boolean).map((l) => JSON.parse(l));

describe("cost and budgets (local runtime, scripted model)", () => {
  test("usage is priced by default from the price library: cache reads and writes, the long-context tier per request; cost per trial, task, run and pass", async () => {
    // One request past Claude Sonnet 4.5's 200k-token tier, one below it: each priced at its own tier.
    const long: ScriptedUsage = { promptTokens: 250_000, cachedTokens: 100_000, cacheWriteTokens: 50_000, completionTokens: 1_000 };
    const short: ScriptedUsage = { promptTokens: 20_000, cachedTokens: 15_000, cacheWriteTokens: 2_000, completionTokens: 300 };
    server = await startScriptedModelServer({ handler: solveThenSubmit(long, short) });
    const r = await proctor(["run", examples, "-i", "greeting-file", "-i", "fizzbuzz-python", "--runtime", "local", "-o", out, "--run-id", "priced", "--agent", "llm", "--model", "claude-sonnet-4-5", "--base-url", server.baseUrl, "-n", "1", "--json"]);
    expect(r.code, r.stderr).toBe(0);
    const perTrial = byHand("anthropic", "claude-sonnet-4-5", long) + byHand("anthropic", "claude-sonnet-4-5", short);
    // The tier matters: priced on the two requests' sum, the short one would be at the long-context price too.
    expect(perTrial).toBeLessThan(byHand("anthropic", "claude-sonnet-4-5", { promptTokens: 270_000, cachedTokens: 115_000, cacheWriteTokens: 52_000, completionTokens: 1_300 }));
    const runDir = join(out, "priced");
    for (const x of await lines(join(runDir, "results.jsonl"))) {
      expect(x.status).toBe("passed");
      expect(x.agent.usage).toMatchObject({ inputTokens: 270_000, outputTokens: 1_300, cacheReadTokens: 115_000, cacheWriteTokens: 52_000, pricedAs: "anthropic/claude-sonnet-4-5" });
      expect(x.agent.usage.costUsd).toBeCloseTo(perTrial, 6);
      const trajectory = JSON.parse(await readFile(join(runDir, "trials", x.trialId, "agent", "trajectory.json"), "utf8"));
      expect(trajectory.final_metrics.total_cost_usd).toBeCloseTo(perTrial, 6);
    }
    const summary = JSON.parse(r.stdout);
    expect(summary.cost.source).toEqual({ name: "@pydantic/genai-prices", version: expect.stringMatching(/^\d+\.\d+\.\d+/) });
    expect(summary.cost.totalUsd).toBeCloseTo(2 * perTrial, 6);
    expect(summary.cost.perPassUsd).toBeCloseTo(perTrial, 6);
    expect(summary.cost).toMatchObject({ pricedTrials: 2, unpricedTrials: 0, byTask: { "greeting-file": { trials: 1, passed: 1 }, "fizzbuzz-python": { trials: 1, passed: 1 } } });
    expect(summary.cost.byTask["greeting-file"].usd).toBeCloseTo(perTrial, 6);
    const runJson = JSON.parse(await readFile(join(runDir, "run.json"), "utf8"));
    expect(runJson.pricing.source).toEqual(summary.cost.source);
    expect(r.stderr).toMatch(/cost\s+\$\d+\.\d{4}/);

    // proctor report: a cost line and a cost per task, in every format.
    const table = await proctor(["report", runDir]);
    expect(table.code, table.stderr).toBe(0);
    expect(table.stdout).toMatch(/^cost\s+\$[\d.]+ over 2 priced trial\(s\); \$[\d.]+ per trial, \$[\d.]+ per pass; prices from @pydantic\/genai-prices \d/m);
    expect(table.stdout).toMatch(/greeting-file\s+1\s+1\s+100\.0%\s+1\.000\s+\$[\d.]+/);
    const md = await proctor(["report", runDir, "--format", "md"]);
    expect(md.stdout).toMatch(/\*\*cost\*\* \$[\d.]+ over 2 priced trial/);
    const json = JSON.parse((await proctor(["report", runDir, "--format", "json"])).stdout);
    expect(json.cost.totalUsd).toBeCloseTo(2 * perTrial, 6);
    expect(json.cost.perPassUsd).toBeCloseTo(perTrial, 6);

    // The viewer's run page gets the same, and each trial row its cost.
    const viewer = await startViewer({ paths: [runDir], port: 0 });
    try {
      const run = (await (await fetch(new URL("/api/runs/priced", viewer.url))).json()) as { cost: { totalUsd: number; perPassUsd: number } };
      expect(run.cost.totalUsd).toBeCloseTo(2 * perTrial, 6);
      const page = (await (await fetch(new URL("/api/runs/priced/trials", viewer.url))).json()) as { trials: { costUsd: number }[] };
      expect(page.trials.map((t) => t.costUsd)).toEqual([expect.closeTo(perTrial, 6), expect.closeTo(perTrial, 6)]);
    } finally {
      await viewer.close();
    }
  });

  test("a model the price library does not know is unpriced (with the reason), never $0; --price-table prices it, with --agent llm too", async () => {
    const usage: ScriptedUsage = { promptTokens: 1_000_000, cachedTokens: 400_000, completionTokens: 100_000 };
    server = await startScriptedModelServer({ handler: solveThenSubmit(usage, { promptTokens: 0, completionTokens: 0 }) });
    const unknown = await proctor(["run", examples, "-i", "greeting-file", "--runtime", "local", "-o", out, "--run-id", "unpriced", "--agent", "llm", "--model", "my-vllm-model", "--base-url", server.baseUrl, "--json"]);
    expect(unknown.code, unknown.stderr).toBe(0);
    const [result] = await lines(join(out, "unpriced", "results.jsonl"));
    expect(result.agent.usage.costUsd).toBeUndefined();
    expect(result.agent.usage.unpriced).toMatch(/no price for model "my-vllm-model" in @pydantic\/genai-prices/);
    const summary = JSON.parse(unknown.stdout);
    expect(summary.cost).toMatchObject({ totalUsd: null, tokensUsd: null, perPassUsd: null, pricedTrials: 0, unpricedTrials: 1 });
    expect(summary.cost.unpricedReasons[0]).toContain("my-vllm-model");
    expect(unknown.stderr).toMatch(/cost\s+unpriced/);
    expect(unknown.stderr).not.toMatch(/\$0\.0000/);

    const table = join(out, "prices.json");
    await writeFile(table, JSON.stringify({ "my-vllm-model": { input: 1, output: 2, cache_read: 0.5 } }));
    const priced = await proctor(["run", examples, "-i", "greeting-file", "--runtime", "local", "-o", out, "--run-id", "price-table", "--agent", "llm", "--model", "my-vllm-model", "--base-url", server.baseUrl, "--price-table", table, "--json"]);
    expect(priced.code, priced.stderr).toBe(0);
    const [tabled] = await lines(join(out, "price-table", "results.jsonl"));
    // 600k fresh at $1 + 400k cached at $0.5 + 100k out at $2, per million.
    expect(tabled.agent.usage).toMatchObject({ costUsd: 1, pricedAs: "price table" });
    expect(JSON.parse(priced.stdout).cost.source).toEqual({ name: "price-table", version: table });

    // A cost budget for a model with no price could never be reached: refused before the run.
    const refused = await proctor(["run", examples, "--runtime", "local", "-o", out, "--agent", "llm", "--model", "my-vllm-model", "--base-url", server.baseUrl, "--max-cost", "1"]);
    expect(refused.code).toBe(2);
    expect(refused.stderr).toMatch(/--max-cost \/ --trial-max-cost need a price for model "my-vllm-model"/);
  });

  test("--max-cost: no trial starts once the budget is spent; the run ends budget_exhausted (exit 6), the rest not run; --resume with a higher budget finishes it", async () => {
    // gpt-4o-mini: each trial's two requests cost the same, known amount.
    const half: ScriptedUsage = { promptTokens: 500_000, completionTokens: 0 };
    server = await startScriptedModelServer({ handler: solveThenSubmit(half, half) });
    const perTrial = 2 * byHand("openai", "gpt-4o-mini", half);
    const maxCost = (1.5 * perTrial).toFixed(4);
    const args = ["run", examples, "-x", "word-frequency", "--runtime", "local", "-o", out, "--run-id", "budget", "--agent", "llm", "--model", "gpt-4o-mini", "--base-url", server.baseUrl, "-n", "1"];
    const r = await proctor([...args, "--max-cost", maxCost, "--json"]);
    expect(r.code, r.stderr).toBe(6);
    expect(r.stderr).toContain("budget spent (--max-cost");
    expect(r.stderr).toContain("1 trial(s) not run");
    const runDir = join(out, "budget");
    // The first trial left the budget unspent, the second spent it: the third never started.
    const started = (await lines(join(runDir, "events.jsonl"))).filter((e) => e.type === "trial_started");
    expect(started).toHaveLength(2);
    const summary = JSON.parse(r.stdout);
    expect(summary.status).toBe("budget_exhausted");
    expect(summary.trials).toMatchObject({ planned: 3, total: 2, passed: 2, failed: 0, errored: 0 });
    expect(summary.budget).toMatchObject({ maxCostUsd: Number(maxCost), onBudget: "finish", notRun: 1, exhausted: expect.stringContaining("--max-cost") });
    expect(summary.budget.spentUsd).toBeCloseTo(2 * perTrial, 6);
    expect(JSON.parse(await readFile(join(runDir, "run.json"), "utf8")).budget).toEqual({ maxCostUsd: Number(maxCost) });

    // The same budget again: nothing more starts.
    const again = await proctor(["run", "--resume", runDir]);
    expect(again.code, again.stderr).toBe(6);
    expect(await lines(join(runDir, "results.jsonl"))).toHaveLength(2);

    const resumed = await proctor(["run", "--resume", runDir, "--max-cost", "10", "--json"]);
    expect(resumed.code, resumed.stderr).toBe(0);
    const done = JSON.parse(resumed.stdout);
    expect(done.status).toBe("completed");
    expect(done.trials).toMatchObject({ planned: 3, total: 3, passed: 3 });
    expect(done.budget).toMatchObject({ maxCostUsd: 10, notRun: 0, exhausted: null });
    expect(done.cost.totalUsd).toBeCloseTo(3 * perTrial, 6);
  });

  test("--on-budget stop: a trial still running when the budget is spent is stopped and counted as not run, never as a failure", async () => {
    const half: ScriptedUsage = { promptTokens: 500_000, completionTokens: 0 };
    const quick = solveThenSubmit(half, half);
    // git-first-commit's model is slow to answer: fizzbuzz-python, beside it, spends the budget first.
    server = await startScriptedModelServer({
      handler: async (r) => {
        if (r.conversation.includes("git")) await new Promise((done) => setTimeout(done, 4000));
        return quick(r);
      },
    });
    const r = await proctor(["run", examples, "-x", "word-frequency", "--runtime", "local", "-o", out, "--run-id", "stop", "--agent", "llm", "--model", "gpt-4o-mini", "--base-url", server.baseUrl, "-n", "2", "--max-cost", "0.01", "--on-budget", "stop", "--json"]);
    expect(r.code, r.stderr).toBe(6);
    const results = await lines(join(out, "stop", "results.jsonl"));
    expect(results.map((x) => [x.taskId, x.status])).toEqual([["fizzbuzz-python", "passed"]]);
    const summary = JSON.parse(r.stdout);
    expect(summary).toMatchObject({ status: "budget_exhausted", trials: { planned: 3, total: 1, failed: 0, errored: 0 }, budget: { onBudget: "stop", notRun: 2 } });
  });

  test("--max-tokens stops starting trials too; --trial-max-cost stops the llm agent's loop with an agent error", async () => {
    const half: ScriptedUsage = { promptTokens: 500_000, completionTokens: 0 };
    server = await startScriptedModelServer({ handler: solveThenSubmit(half, half) });
    const tokens = await proctor(["run", examples, "-x", "word-frequency", "--runtime", "local", "-o", out, "--run-id", "tokens", "--agent", "llm", "--model", "gpt-4o-mini", "--base-url", server.baseUrl, "-n", "1", "--max-tokens", "1000000", "--json"]);
    expect(tokens.code, tokens.stderr).toBe(6);
    expect(JSON.parse(tokens.stdout)).toMatchObject({ status: "budget_exhausted", trials: { total: 1 }, budget: { maxTokens: 1_000_000, spentTokens: 1_000_000, notRun: 2 } });

    const limit = byHand("openai", "gpt-4o-mini", half) / 2;
    const capped = await proctor(["run", examples, "-i", "greeting-file", "--runtime", "local", "-o", out, "--run-id", "trial-cap", "--agent", "llm", "--model", "gpt-4o-mini", "--base-url", server.baseUrl, "--trial-max-cost", String(limit), "--json"]);
    expect(capped.code, capped.stderr).toBe(0);
    const [result] = await lines(join(out, "trial-cap", "results.jsonl"));
    expect(result.status).toBe("error");
    expect(result.error.kind).toBe("agent");
    expect(result.error.message).toMatch(/passed its limit of \$[\d.]+ \(--trial-max-cost\) on turn 1/);
    // Stopped before running the first reply's tool calls: one request, and the solution never ran.
    expect(result.agent.usage.requests).toBe(1);

    const notLlm = await proctor(["run", examples, "--runtime", "local", "-o", out, "--agent", "oracle", "--trial-max-cost", "1"]);
    expect(notLlm.code).toBe(2);
    expect(notLlm.stderr).toContain("--trial-max-cost goes with an agent that takes a model");
  });
});

const docker = await dockerTestGate();

describe.skipIf(!docker)("compute cost on Docker", () => {
  test("--compute-price: each trial's CPU-seconds (its sandboxes' cgroup) at USD per CPU-hour; the run's cost is tokens + compute", async () => {
    const r = await proctor(["run", examples, "-i", "fizzbuzz-python", "--runtime", "docker", "-o", out, "--run-id", "compute", "--agent", "oracle", "--compute-price", "3.6", "--json"]);
    expect(r.code, r.stderr).toBe(0);
    const [result] = await lines(join(out, "compute", "results.jsonl"));
    expect(result.compute.cpuSeconds).toBeGreaterThan(0);
    expect(result.compute.costUsd).toBeCloseTo(result.compute.cpuSeconds / 1000, 6);
    const summary = JSON.parse(r.stdout);
    expect(summary.cost).toMatchObject({ tokensUsd: 0, cpuSeconds: result.compute.cpuSeconds, pricedTrials: 1 });
    expect(summary.cost.computeUsd).toBeCloseTo(result.compute.costUsd, 6);
    expect(summary.cost.totalUsd).toBeCloseTo(result.compute.costUsd, 6);
    expect(r.stderr).toMatch(/^cost\s+\$[\d.]+ \(tokens \$0\.0000 \+ compute \$[\d.]+ for [\d.]+ CPU-seconds\)/m);
  });
});
