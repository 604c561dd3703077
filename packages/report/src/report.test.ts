import { mkdtemp, mkdir, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { XMLParser, XMLValidator } from "fast-xml-parser";
import type { TrialResult } from "@proctor/schema";
import { summarize } from "@proctor/reward";
import { findRunDirs, loadRun, renderReport, withFirstFailures, type LoadedRun } from "./index";
import { pValue } from "./text";

function trial(taskId: string, status: TrialResult["status"], extra: Partial<TrialResult> = {}): TrialResult {
  return {
    trialId: `${taskId}__1`,
    taskId,
    attempt: 1,
    category: taskId.startsWith("sw") ? "software" : "data",
    difficulty: null,
    status,
    reward: status === "passed" ? 1 : status === "failed" ? 0 : null,
    error: null,
    durationMs: 1500,
    startedAt: "2025-03-01T10:00:00.000Z",
    finishedAt: "2025-03-01T10:00:01.500Z",
    retries: 0,
    phases: [{ phase: "agent", durationMs: 1000 }],
    agent: { exitCode: 0, timedOut: false, name: "oracle" },
    checks: null,
    integrity: { isolation: "shared", tamperChecked: true, tampered: [], survivors: [], flagged: false, note: null },
    ...extra,
  };
}

async function writeRun(root: string, runId: string, results: TrialResult[], files: Record<string, string> = {}, agent: Record<string, unknown> = { kind: "oracle" }): Promise<string> {
  const dir = join(root, runId);
  await mkdir(dir, { recursive: true });
  const config = { runId, tasks: [...new Set(results.map((r) => r.taskId))].sort().map((id) => ({ id, hash: "h" })), sources: ["examples/tasks"], agent, agentHash: null, runtime: "local", attempts: 1, concurrency: 2, timeoutMultiplier: 1, defaultImage: null, configHash: "x" };
  await writeFile(join(dir, "run.json"), JSON.stringify(config));
  await writeFile(join(dir, "results.jsonl"), results.map((r) => JSON.stringify(r)).join("\n") + "\n");
  const summary = summarize({ runId, results, plannedTrials: config.tasks.length, attempts: 1, startedAt: "2025-03-01T10:00:00.000Z", now: "2025-03-01T10:02:00.000Z", status: "completed" });
  await writeFile(join(dir, "summary.json"), JSON.stringify(summary));
  for (const [path, text] of Object.entries(files)) {
    await mkdir(join(dir, path, ".."), { recursive: true });
    await writeFile(join(dir, path), text);
  }
  return dir;
}

let root: string;
let a: LoadedRun;
let b: LoadedRun;

beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), "proctor-report-"));
  await writeRun(
    root,
    "20250301-a",
    [
      trial("sw-build", "passed"),
      trial("sw-fix", "passed", { integrity: { isolation: "shared", tamperChecked: true, tampered: [], survivors: [{ pid: 42, ppid: 1, command: "nginx -g daemon off;", ports: [80] }], flagged: true, note: null } }),
      trial("data-clean", "failed", { agent: { exitCode: 3, timedOut: false } }),
      trial("data-join", "error", { error: { kind: "agent", message: "tampered: /usr/bin/python3" }, integrity: { isolation: "shared", tamperChecked: true, tampered: ["/usr/bin/python3"], survivors: [], flagged: false, note: null } }),
      trial("sw-<&\"quote\">", "error", { error: { kind: "verifier", message: "no reward file: /logs/verifier/reward.txt" } }),
    ],
    {
      "trials/data-clean__1/verifier/test-stdout.txt": "FAILED test_clean.py::test_rows - assert 3 == 4\n\u0001 control char",
      "trials/sw-build__1/agent/patch.diff": "diff --git a/x b/x\n",
    },
  );
  await writeRun(root, "20250301-b", [trial("sw-build", "failed"), trial("sw-fix", "passed"), trial("data-clean", "passed"), trial("data-join", "passed"), trial("sw-<&\"quote\">", "passed")]);
  await writeFile(join(root, "not-a-run.txt"), "x");
  [a, b] = await Promise.all((await findRunDirs([root])).map(async (dir) => withFirstFailures(await loadRun(dir)))) as [LoadedRun, LoadedRun];
});

afterAll(async () => {
  await rm(root, { recursive: true, force: true });
});

describe("proctor report formats", () => {
  it("finds run dirs under a root and loads them", async () => {
    expect((await findRunDirs([root])).map((d) => d.slice(root.length + 1))).toEqual(["20250301-a", "20250301-b"]);
    expect(a.runId).toBe("20250301-a");
    expect(a.results).toHaveLength(5);
  });

  it("table: headline with CI, and every failed/errored/flagged trial with its reason", async () => {
    const text = await renderReport([a], "table");
    expect(text).toMatch(/pass rate\s+40\.0% \[\d+\.\d%, \d+\.\d%\] \(2\/5 finished trials/);
    expect(text).toContain("mean reward");
    // The first failure the verifier's output names, as `proctor tasks validate` and the viewer show it.
    expect(text).toMatch(/data-clean__1\s+failed\s+-\s+reward 0; agent exit code 3; first failure: test_clean\.py::test_rows: assert 3 == 4\s+trials\/data-clean__1\/verifier\/test-stdout\.txt/);
    expect(text).toMatch(/data-join__1\s+error\s+agent\s+tampered: \/usr\/bin\/python3\s+trials/);
    expect(text).toMatch(/sw-fix__1\s+passed\s+-\s+survivors: 1 \(nginx\); flagged: passed with agent processes alive/);
    expect(text).toContain("no reward file: /logs/verifier/reward.txt");
  });

  it("table and md: a per-task table; text columns left-aligned, figures right-aligned; a tiny p-value reads p < 0.0001", async () => {
    const text = await renderReport([a], "table");
    expect(text).toContain("By task (5)");
    expect(text).toMatch(/^data-clean\s+1\s+0\s+0\.0%\s+0\.000$/m);
    // The reason column starts where its header does (left-aligned), on every row.
    const lines = text.split("\n");
    const header = lines.find((l) => l.startsWith("trial ") && l.includes("reason")) ?? "";
    for (const id of ["data-clean__1", "data-join__1"]) {
      const row = lines.find((l) => l.startsWith(id)) ?? "";
      const reason = id === "data-clean__1" ? "reward 0" : "tampered";
      expect(row.indexOf(reason), row).toBe(header.indexOf("reason"));
      expect(row.indexOf("trials/"), row).toBe(header.indexOf("verifier log"));
    }
    const md = await renderReport([a], "md");
    expect(md).toContain("| task | attempts | passed | pass rate | mean reward |\n| --- | ---: | ---: | ---: | ---: |");
    expect(md).toContain("| trial | status | error kind | reason | verifier log |\n| --- | --- | --- | --- | --- |");
    expect(pValue(0.00001)).toBe("p < 0.0001");
    expect(pValue(0.625)).toBe("p = 0.6250");
  });

  it("two runs: a paired comparison with flips, McNemar and its denominator", async () => {
    const text = await renderReport([a, b], "table");
    expect(text).toContain("Comparison: B (20250301-b) against A (20250301-a)");
    expect(text).toContain("flips          3 fail->pass, 1 pass->fail");
    // b = 1, c = 3: 2 * (1 + 4) / 16 = 0.625
    expect(text).toContain("McNemar        p = 0.6250");
    expect(text).toContain("4 discordant of 5 pairs");
    expect(text).toMatch(/reward B - A\s+\+0\.400 \[/);
    const json = JSON.parse(await renderReport([a, b], "json"));
    expect(json.comparison.mcnemar).toMatchObject({ passToFail: 1, failToPass: 3, pairs: 5 });
    expect(json.comparison.mcnemar.pValue).toBeCloseTo(0.625, 12);
    const md = await renderReport([a, b], "md");
    expect(md).toContain("| task | attempt | flip | A | B |");
  });

  it("html: one self-contained file with no external reference", async () => {
    for (const html of [await renderReport([a], "html"), await renderReport([a, b], "html")]) {
      expect(html.startsWith("<!doctype html>")).toBe(true);
      expect(html).not.toMatch(/\b(?:src|href|action|srcset|poster|data)\s*=/i);
      expect(html).not.toMatch(/url\(|@import|<link|<script|<iframe|<img/i);
      expect(html).not.toMatch(/(?:https?:)?\/\/[a-z0-9]/i);
      expect(html).toContain("default-src 'none'");
      expect(html).toContain("sw-&lt;&amp;&quot;quote&quot;&gt;");
    }
  });

  it("junit: valid XML, one testcase per trial, failures and errors with reasons", async () => {
    const xml = await renderReport([a, b], "junit");
    expect(XMLValidator.validate(xml)).toBe(true);
    const doc = new XMLParser({ ignoreAttributes: false, attributeNamePrefix: "", isArray: (name) => ["testsuite", "testcase"].includes(name) }).parse(xml);
    const suites = doc.testsuites.testsuite;
    expect(doc.testsuites).toMatchObject({ tests: "10", failures: "2", errors: "2" });
    expect(suites.map((s: { name: string }) => s.name)).toEqual(["20250301-a", "20250301-b"]);
    const cases = suites[0].testcase as { name: string; classname: string; failure?: { message: string }; error?: { type: string; message: string }; "system-out"?: string }[];
    expect(cases).toHaveLength(5);
    const failed = cases.find((c) => c.name === "data-clean__1");
    expect(failed?.failure?.message).toBe("reward 0; agent exit code 3");
    expect(failed?.["system-out"]).toContain("assert 3 == 4");
    const errored = cases.find((c) => c.name === "data-join__1");
    expect(errored?.error).toMatchObject({ type: "agent", message: "tampered: /usr/bin/python3" });
    expect(cases.find((c) => c.name === 'sw-<&"quote">__1')?.error?.type).toBe("verifier");
    expect(cases.find((c) => c.name === "sw-build__1")?.failure).toBeUndefined();
  });

  it("swebench: SWE-bench's report field names and ids", async () => {
    const report = JSON.parse(await renderReport([a], "swebench"));
    expect(Object.keys(report).sort()).toEqual(
      [
        "total_instances", "submitted_instances", "completed_instances", "resolved_instances", "unresolved_instances", "empty_patch_instances", "error_instances",
        "completed_ids", "incomplete_ids", "empty_patch_ids", "submitted_ids", "resolved_ids", "unresolved_ids", "error_ids", "schema_version",
      ].sort(),
    );
    expect(report.resolved_ids).toEqual(["sw-build", "sw-fix"]);
    expect(report.unresolved_ids).toEqual(["data-clean"]);
    expect(report.error_ids).toEqual(["data-join", 'sw-<&"quote">']);
    expect(report.empty_patch_ids).toEqual([]);
    expect(report).toMatchObject({ total_instances: 5, submitted_instances: 5, completed_instances: 3, resolved_instances: 2, error_instances: 2, schema_version: 2 });
    await expect(renderReport([a, b], "swebench")).rejects.toThrow(/one run/);
  });

  it("swebench: an empty recorded patch is an empty-patch instance", async () => {
    const dir = await writeRun(root, "empty", [trial("inst-1", "failed"), trial("inst-2", "passed")], { "trials/inst-1__1/agent/patch.diff": "\n" });
    const report = JSON.parse(await renderReport([await loadRun(dir)], "swebench"));
    expect(report).toMatchObject({ empty_patch_ids: ["inst-1"], empty_patch_instances: 1, unresolved_ids: [], completed_ids: ["inst-2"] });
  });

  it("csv: one row per trial with a header, quoted where needed", async () => {
    const csv = await renderReport([a, b], "csv");
    const lines = csv.trimEnd().split("\r\n");
    expect(lines[0]).toBe("run,trial_id,task_id,attempt,category,difficulty,status,reward,error_kind,error_message,duration_ms,agent_exit_code,agent_timed_out,flags,input_tokens,output_tokens,cost_usd");
    expect(lines).toHaveLength(11);
    // Tokens and cost: an unpriced model's trial has an empty cost, never 0.
    const priced = trial("p", "passed", { agent: { exitCode: 0, timedOut: false, name: "llm", usage: { inputTokens: 1000, outputTokens: 20, requests: 1, retries: 0, costUsd: 0.0031 } }, compute: { cpuSeconds: 2, costUsd: 0.0001 } });
    const unpriced = trial("u", "passed", { agent: { exitCode: 0, timedOut: false, name: "llm", usage: { inputTokens: 5, outputTokens: 1, requests: 1, retries: 0, unpriced: "no price" } } });
    const costed = (await renderReport([await loadRun(await writeRun(root, "costed", [priced, unpriced]))], "csv")).trimEnd().split("\r\n");
    expect(costed.slice(1).map((line) => line.split(",").slice(-3).join(","))).toEqual(["1000,20,0.0032", "5,1,"]);
    expect(csv).toContain('"sw-<&""quote"">__1"');
  });

  it("a run dir without summary.json is summarized from results.jsonl, a half line skipped", async () => {
    const dir = join(root, "partial");
    await mkdir(dir);
    await writeFile(join(dir, "results.jsonl"), `${JSON.stringify(trial("t1", "passed"))}\n{"trialId": "t2__1", "ta`);
    const run = await loadRun(dir);
    expect(run).toMatchObject({ runId: "partial", skippedLines: 1 });
    expect(run.summary.trials.passed).toBe(1);
    await expect(loadRun(join(root, "nope"))).rejects.toThrow(/not a run directory/);
  });
});

describe("flaky task definitions across 3 or more runs", () => {
  // Oracle: "flip" passes, fails, passes; "steady" always passes; "broken" always fails (broken, not flaky).
  // Nop: "leaky" passes once (a nop pass means the tests accept an untouched sandbox).
  async function reference(): Promise<LoadedRun[]> {
    const dir = join(root, "flaky");
    const flip: TrialResult["status"][] = ["passed", "failed", "passed"];
    const runs: string[] = [];
    for (const [i, status] of flip.entries()) {
      runs.push(await writeRun(dir, `oracle-${i}`, [trial("flip", status), trial("steady", "passed"), trial("broken", "failed")]));
    }
    for (let i = 0; i < 3; i++) {
      runs.push(await writeRun(dir, `nop-${i}`, [trial("flip", "failed"), trial("leaky", i === 1 ? "passed" : "failed")], {}, { kind: "nop" }));
    }
    return Promise.all(runs.map((d) => loadRun(d)));
  }

  it("table, md, json and html name the tasks whose outcome flips under the oracle or nop", async () => {
    const runs = await reference();
    const text = await renderReport(runs, "table");
    expect(text).toContain("Flaky task definitions (2)");
    expect(text).toContain("over 3 oracle runs, 3 nop runs");
    expect(text).toMatch(/flip\s+oracle\s+2\/3\s+3\s+oracle should always pass/);
    expect(text).toMatch(/leaky\s+nop\s+1\/3\s+3\s+nop should never pass/);
    expect(text).not.toMatch(/^(?:steady|broken)\s+oracle/m);
    const md = await renderReport(runs, "md");
    expect(md).toContain("## Flaky task definitions (2)");
    expect(md).toContain("| flip | oracle | 2/3 | 3 | oracle should always pass |");
    const json = JSON.parse(await renderReport(runs, "json"));
    expect(json.runs).toHaveLength(6);
    expect(json.flakyTasks).toEqual({
      runs: { oracle: ["oracle-0", "oracle-1", "oracle-2"], nop: ["nop-0", "nop-1", "nop-2"], other: [] },
      checked: true,
      tasks: [
        { taskId: "flip", agent: "oracle", passed: 2, attempts: 3, runs: 3 },
        { taskId: "leaky", agent: "nop", passed: 1, attempts: 3, runs: 3 },
      ],
    });
    const html = await renderReport(runs, "html");
    expect(html).toContain("<h2>Flaky task definitions (2)</h2>");
    expect(html).toContain("<td>flip</td><td>oracle</td>");
  });

  it("says when nothing flips, and when too few reference runs were given; other agents' runs get no section", async () => {
    const runs = await reference();
    const steadyOracle = runs.slice(0, 3).map((r) => ({ ...r, results: r.results.filter((t) => t.taskId !== "flip") }));
    expect(await renderReport(steadyOracle, "table")).toContain("none: every task had the same outcome in each of 3 oracle runs");
    const mixed = [runs[0], runs[1], { ...b, runId: "llm-run", config: b.config && { ...b.config, agent: { kind: "llm", model: "m", baseUrl: "http://x", apiKeyEnv: "K" } }, results: b.results.map((t) => ({ ...t, agent: null })) }] as LoadedRun[];
    expect(await renderReport(mixed, "table")).toContain("not checked: needs 3 or more oracle runs or 3 or more nop runs of the same tasks; got 2 oracle runs, 1 run of other agents (not used)");
    const others = [1, 2, 3].map((n) => ({ ...mixed[2], runId: `llm-${n}` })) as LoadedRun[];
    const text = await renderReport(others, "table");
    expect(text).not.toContain("Flaky");
    expect(JSON.parse(await renderReport(others, "json")).flakyTasks).toBeUndefined();
  });
});
