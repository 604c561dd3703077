import { execFileSync } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdir, mkdtemp, readFile, readdir, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startScriptedModelServer, type ScriptedReply, type ScriptedRequest, type ScriptedServer } from "@proctor/llm";
import { dockerTestGate } from "@proctor/sandbox-docker";
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { startRedisServer } from "@proctor/queue";
import { describeTrials, finish, proctor, spawnProctor } from "./test-support";

const haveDocker = await dockerTestGate();
const KEY = "sk-installed-e2e-REAL-9d41c7a0e2";
const KEY_ENV = "PROCTOR_E2E_CLI_AGENT_KEY";
/** Kept between test runs: the real CLIs are 300-400 MB each, installed once per machine as users get them. */
const CACHE = join(tmpdir(), "proctor-e2e-agent-cache");

/**
 * What the model tells the CLI to run: solve the task, then record everything a process in the
 * sandbox can see (its env, every process's /proc/<pid>/environ, every file written since the
 * container started) into /logs/agent/scan.txt, which the run collects.
 */
const SOLVE_AND_SCAN = [
  "echo hello > /app/out.txt",
  `{ echo '== env'; env; echo '== environ'; for f in /proc/[0-9]*/environ; do tr '\\000' '\\n' < "$f"; echo; done 2>/dev/null;` +
    ` echo '== files'; find / -xdev \\( -path /proc -o -path /sys -o -path /dev \\) -prune -o -type f -newer /etc/hostname ! -name scan.txt -size -4M -print 2>/dev/null |` +
    ` while IFS= read -r f; do echo "-- $f"; cat "$f" 2>/dev/null; done; } > /logs/agent/scan.txt`,
  "echo scanned-$(wc -l < /logs/agent/scan.txt)-lines",
].join("\n");

async function allFiles(dir: string): Promise<string[]> {
  const entries = await readdir(dir, { withFileTypes: true, recursive: true });
  return entries.filter((e) => e.isFile()).map((e) => join(e.parentPath, e.name));
}

async function filesHolding(dir: string, needle: string): Promise<string[]> {
  const found: string[] = [];
  for (const path of await allFiles(dir)) if ((await readFile(path, "latin1")).includes(needle)) found.push(path);
  return found;
}

async function writeTask(root: string, id: string): Promise<string> {
  const dir = join(root, id);
  await mkdir(join(dir, "tests"), { recursive: true });
  await writeFile(join(dir, "task.toml"), `[agent]\ntimeout_sec = 240\n[environment]\ndocker_image = "proctor/base:bookworm"\n`);
  await writeFile(join(dir, "instruction.md"), "Write the word hello into /app/out.txt.\n");
  await writeFile(join(dir, "tests", "test.sh"), '#!/bin/sh\nif grep -qx hello /app/out.txt; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi\n');
  return dir;
}

function containersOf(runId: string): string[] {
  const out = execFileSync("docker", ["ps", "-aq", "--filter", `label=proctor.run=${runId}`], { encoding: "utf8" }).trim();
  return out === "" ? [] : out.split("\n");
}

interface Case {
  agent: string;
  model: string;
  /** The request that carries the CLI's own tool loop (side requests, e.g. titles, get plain text). */
  isMain: (r: ScriptedRequest) => boolean;
  call: ScriptedReply;
  tokenVar: string;
  sessionsGlob: RegExp;
}

const CASES: Case[] = [
  {
    agent: "codex",
    model: "gpt-scripted",
    isMain: (r) => r.protocol === "openai-responses",
    call: { toolCalls: [{ name: "exec_command", arguments: { cmd: SOLVE_AND_SCAN, yield_time_ms: 30_000 }, id: "call_solve" }], usage: { promptTokens: 900, completionTokens: 40, cachedTokens: 300 } },
    tokenVar: "OPENAI_API_KEY=proctor-",
    sessionsGlob: /sessions\/.*rollout-.*\.jsonl$/,
  },
  {
    agent: "claude-code",
    model: "claude-scripted",
    isMain: (r) => r.protocol === "anthropic-messages" && Array.isArray(r.body.tools) && (r.body.tools as { name?: string }[]).some((t) => t.name === "Bash"),
    call: { toolCalls: [{ name: "Bash", arguments: { command: SOLVE_AND_SCAN, description: "solve and scan" }, id: "toolu_solve" }], usage: { promptTokens: 900, completionTokens: 40, cachedTokens: 300 } },
    tokenVar: "ANTHROPIC_API_KEY=proctor-",
    sessionsGlob: /sessions\/projects\/.*\.jsonl$/,
  },
];

describe.skipIf(!haveDocker)("proctor run --agent codex / claude-code (the real CLIs from npm, Docker, scripted models)", () => {
  let out: string;
  let tasks: string;
  beforeAll(async () => {
    out = await mkdtemp(join(tmpdir(), "proctor-cli-installed-"));
    tasks = join(out, "tasks");
    await writeTask(tasks, "hello");
  });
  afterAll(async () => {
    for (const c of CASES) {
      const left = containersOf(`e2e-${c.agent}-${process.pid}`);
      if (left.length > 0) execFileSync("docker", ["rm", "-f", ...left]);
    }
    await rm(out, { recursive: true, force: true });
  });

  for (const c of CASES) {
    test(`${c.agent}: installed once into the cache, passes the task through the proxy, the real key reaches only the model server`, async () => {
      let server: ScriptedServer | null = null;
      try {
        server = await startScriptedModelServer({
          apiKey: KEY,
          models: [c.model],
          handler: (r) => {
            if (!c.isMain(r)) return { content: "ok", usage: { promptTokens: 10, completionTokens: 2 } };
            if (r.toolResults.length === 0) return c.call;
            // Codex hands back a still-running command's session after its yield time (a loaded
            // machine): poll it as a model would until the scan's last line arrives.
            const running = /Process running with session ID (\d+)/.exec(r.toolResults.at(-1)?.content ?? "");
            if (running) return { toolCalls: [{ name: "write_stdin", arguments: { session_id: Number(running[1]), chars: "", yield_time_ms: 30_000 }, id: `call_poll_${r.toolResults.length}` }], usage: { promptTokens: 10, completionTokens: 2 } };
            return { content: "Done: /app/out.txt holds hello.", usage: { promptTokens: 1000, completionTokens: 12 } };
          },
        });
        const runId = `e2e-${c.agent}-${process.pid}`;
        const env = { [KEY_ENV]: KEY, PROCTOR_CACHE_DIR: CACHE };
        const prices = join(out, `prices-${c.agent}.json`);
        await writeFile(prices, JSON.stringify({ [c.model]: { input: 3, output: 15, cache_read: 0.3 } }));
        const r = await proctor(["run", tasks, "--runtime", "docker", "-o", out, "--run-id", runId, "--agent", c.agent, "--model", c.model, "--base-url", server.baseUrl, "--api-key-env", KEY_ENV, "--price-table", prices, "--json"], { env });
        expect(r.code, r.stderr).toBe(0);
        expect(r.stderr).toMatch(new RegExp(`agent ${c.agent} [\\d.]+: (installed in [\\d.]+ s|cached) `));
        const summary = JSON.parse(r.stdout);
        expect(summary.trials, `${describeTrials(join(out, runId))}\n${r.stderr.split("\n").slice(-40).join("\n")}`).toMatchObject({ total: 1, passed: 1, errored: 0 });
        // The pins name the CLI's npm package version as installed and bound into the sandbox, and the model.
        const installedVersion = new RegExp(`agent ${c.agent} ([\\d.]+): `).exec(r.stderr)?.[1];
        expect(summary.pins).toMatchObject({ agent: { name: c.agent, version: installedVersion }, model: c.model });

        // Every request the model server got carried the real key and the pinned model; none the sandbox's token.
        const main = server.requests.filter(c.isMain);
        expect(main.length).toBeGreaterThanOrEqual(2);
        for (const q of server.requests) {
          expect(q.protocol === "anthropic-messages" ? q.headers["x-api-key"] : q.headers.authorization).toBe(q.protocol === "anthropic-messages" ? KEY : `Bearer ${KEY}`);
          expect(q.model).toBe(c.model);
        }
        const results = main.flatMap((q) => q.toolResults.map((t) => t.content));
        expect(results.some((t) => /scanned-\d+-lines/.test(t)), results.join("\n---\n")).toBe(true);

        const runDir = join(out, runId);
        const [trialId] = await readdir(join(runDir, "trials"));
        const trialDir = join(runDir, "trials", trialId as string);
        // The scan ran inside the sandbox and saw the per-trial token, never the key.
        const scan = await readFile(join(trialDir, "logs", "agent", "scan.txt"), "utf8");
        expect(scan).toContain(c.tokenVar);
        expect(scan).toContain("== files");
        expect(scan).not.toContain(KEY);
        expect(scan).not.toContain(KEY_ENV);
        expect(await filesHolding(runDir, KEY)).toEqual([]);
        expect(r.stdout + r.stderr).not.toContain(KEY);
        expect(await filesHolding(CACHE, KEY)).toEqual([]);

        // One trajectory, whichever CLI: the tool call with the tool's result, and usage summed.
        const trajectory = JSON.parse(await readFile(join(trialDir, "agent", "trajectory.json"), "utf8"));
        expect(trajectory).toMatchObject({ schema_version: "ATIF-v1.4", agent: { name: c.agent } });
        const calling = trajectory.steps.find((s: { tool_calls?: unknown[] }) => s.tool_calls?.length);
        expect(calling.tool_calls[0]).toMatchObject({ function_name: (c.call as { toolCalls: { name: string }[] }).toolCalls[0]?.name });
        const observed = trajectory.steps.flatMap((s: { observation?: { results: { content: string }[] } }) => s.observation?.results.map((o) => o.content) ?? []);
        expect(observed.some((t: string) => /scanned-\d+-lines/.test(t))).toBe(true);
        const totals = server.totals();
        const result = JSON.parse(await readFile(join(trialDir, "result.json"), "utf8"));
        expect(result.agent).toMatchObject({ name: expect.stringContaining(c.agent), model: c.model, usage: { inputTokens: totals.inputTokens, outputTokens: totals.outputTokens, requests: totals.requests, cacheReadTokens: totals.cachedTokens } });
        expect(summary.usage).toMatchObject({ inputTokens: totals.inputTokens, outputTokens: totals.outputTokens, requests: totals.requests, trials: 1 });
        // The price table's cost: fresh input at 3, cached at 0.3, output at 15 USD per million tokens.
        const cost = Math.round((totals.inputTokens - totals.cachedTokens) * 3 + totals.cachedTokens * 0.3 + totals.outputTokens * 15) / 1e6;
        expect(result.agent.usage.costUsd).toBe(cost);
        expect(summary.usage.costUsd).toBe(cost);
        expect(r.stderr).toMatch(/^cost\s+\$\d+\.\d{4,6} over 1 priced trial\(s\); .*prices from .*prices-[a-z-]+\.json$/m);
        // The CLI's own session log came back beside it.
        expect((await allFiles(join(trialDir, "logs", "agent"))).some((f) => c.sessionsGlob.test(f))).toBe(true);

        // A second run starts without installing.
        const again = await proctor(["run", tasks, "--runtime", "docker", "-o", out, "--run-id", `${runId}-again`, "--agent", c.agent, "--model", c.model, "--base-url", server.baseUrl, "--api-key-env", KEY_ENV, "--json"], { env });
        expect(again.code, again.stderr).toBe(0);
        expect(again.stderr).toContain(`agent ${c.agent}`);
        expect(again.stderr).toMatch(/: cached in /);
        expect(again.stderr).not.toMatch(/npm (ci|install)/);
        expect(containersOf(runId)).toEqual([]);
      } finally {
        await server?.close();
      }
      // A hang guard, not a speed check: two runs of a real CLI on 2 shared cores.
    }, 900_000);
  }

  test("failures are explained: a rejected key stops the run (exit 4), a CLI exiting non-zero is an agent error with its output's tail, a hung one is killed at the agent timeout", async () => {
    let server: ScriptedServer | null = null;
    try {
      // 401 to Proctor's key: no trial can succeed, the run stops.
      server = await startScriptedModelServer({ apiKey: "sk-another-key", handler: () => ({ content: "unused" }) });
      const env = { [KEY_ENV]: KEY, PROCTOR_CACHE_DIR: CACHE };
      const denied = await proctor(["run", tasks, "--runtime", "docker", "-o", out, "--run-id", "fail-401", "--agent", "codex", "--model", "m", "--base-url", server.baseUrl, "--api-key-env", KEY_ENV], { env });
      expect(denied.code, denied.stderr).toBe(4);
      expect(denied.stderr).toContain(`$${KEY_ENV}`);
      expect(denied.stderr).toContain(server.baseUrl);
      expect(denied.stdout + denied.stderr).not.toContain(KEY);
      await server.close();

      // A request the model rejects (400): Codex gives up and exits non-zero.
      server = await startScriptedModelServer({ handler: () => ({ status: 400, body: { error: { message: "scripted: this request is malformed", type: "invalid_request_error" } } }) });
      const crashed = await proctor(["run", tasks, "--runtime", "docker", "-o", out, "--run-id", "fail-exit", "--agent", "codex", "--model", "m", "--base-url", server.baseUrl, "--api-key-env", KEY_ENV, "--json"], { env });
      expect(crashed.code, crashed.stderr).toBe(0);
      const [result] = (await readFile(join(out, "fail-exit", "results.jsonl"), "utf8")).trim().split("\n").map((l) => JSON.parse(l));
      expect(result.status).toBe("error");
      expect(result.error.kind).toBe("agent");
      expect(result.error.message).toMatch(/^codex@0\.171\.0 exited with [1-9]\d*: /);
      expect(result.error.message).toContain("scripted: this request is malformed");
      await server.close();

      // A model that never answers: Codex would wait for ever; the agent timeout kills it.
      const hung = join(out, "hung-tasks");
      await writeTask(hung, "hello");
      await writeFile(join(hung, "hello", "task.toml"), `[agent]\ntimeout_sec = 8\n[environment]\ndocker_image = "proctor/base:bookworm"\n`);
      server = await startScriptedModelServer({ handler: () => new Promise<ScriptedReply>(() => undefined) });
      const slow = await proctor(["run", hung, "--runtime", "docker", "-o", out, "--run-id", "fail-hang", "--agent", "codex", "--model", "m", "--base-url", server.baseUrl, "--api-key-env", KEY_ENV], { env });
      expect(slow.code, slow.stderr).toBe(0);
      const [hang] = (await readFile(join(out, "fail-hang", "results.jsonl"), "utf8")).trim().split("\n").map((l) => JSON.parse(l));
      expect(hang.agent).toMatchObject({ timedOut: true, exitCode: null });
      expect(hang.status).toBe("failed");
      expect(hang.phases.find((p: { phase: string }) => p.phase === "agent").durationMs).toBeLessThan(60_000);
      for (const id of ["fail-401", "fail-exit", "fail-hang"]) expect(containersOf(id)).toEqual([]);
    } finally {
      await server?.close();
    }
  });

  test("an image the binary cannot run on is a clear per-task error naming the image and why (Claude Code's glibc build in a busybox image)", async () => {
    const server = await startScriptedModelServer({ handler: () => ({ content: "unused" }) });
    try {
      const musl = join(out, "busybox-tasks");
      await writeTask(musl, "hello");
      await writeFile(join(musl, "hello", "task.toml"), `[environment]\ndocker_image = "proctor/busybox:latest"\n`);
      const r = await proctor(["run", musl, "--runtime", "docker", "-o", out, "--run-id", "fail-libc", "--agent", "claude-code", "--model", "m", "--base-url", server.baseUrl, "--api-key-env", KEY_ENV], { env: { [KEY_ENV]: KEY, PROCTOR_CACHE_DIR: CACHE } });
      expect(r.code, r.stderr).toBe(0);
      const [result] = (await readFile(join(out, "fail-libc", "results.jsonl"), "utf8")).trim().split("\n").map((l) => JSON.parse(l));
      expect(result.error).toEqual({ kind: "agent", message: expect.stringMatching(/^claude-code@2\.1\.332 cannot run in proctor\/busybox:latest: its binary needs the dynamic loader \/lib64\/ld-linux-x86-64\.so\.2 \(glibc\), which the image does not have/) });
      expect(server.requests).toEqual([]);
    } finally {
      await server.close();
    }
  });

  test("proctor run --queue: a worker installs Codex on first use and runs it with the key from its own environment", async () => {
    const redis = await startRedisServer();
    const server = await startScriptedModelServer({ apiKey: KEY, handler: (r) => (r.toolResults.length === 0 && CASES[0] ? CASES[0].call : { content: "done" }) });
    const workerCache = join(out, "worker-cache");
    const worker = spawnProctor(["worker", "--queue", redis.url, "--runtime", "docker", "--name", "cli-agent-worker", "--work-dir", join(out, "worker-work")], { [KEY_ENV]: KEY, PROCTOR_CACHE_DIR: workerCache });
    const exited = finish(worker);
    try {
      const r = await proctor(["run", tasks, "--queue", redis.url, "--runtime", "docker", "-o", out, "--run-id", "queued-codex", "--agent", "codex", "--model", "m", "--base-url", server.baseUrl, "--api-key-env", KEY_ENV, "--json"], { env: { [KEY_ENV]: "not-the-key-the-dispatcher-has" } });
      expect(r.code, r.stderr).toBe(0);
      expect(JSON.parse(r.stdout).trials).toMatchObject({ total: 1, passed: 1 });
      // The worker installed it into its own cache; the dispatcher installed nothing.
      expect((await readdir(join(workerCache, "agents"))).some((d) => d.startsWith("codex-"))).toBe(true);
      expect(r.stderr).not.toContain("agent codex");
      expect(server.requests.every((q) => q.headers.authorization === `Bearer ${KEY}`)).toBe(true);
      const runDir = join(out, "queued-codex");
      const [trialId] = await readdir(join(runDir, "trials"));
      const trajectory = JSON.parse(await readFile(join(runDir, "trials", trialId as string, "agent", "trajectory.json"), "utf8"));
      expect(trajectory.steps.some((s: { tool_calls?: unknown[] }) => s.tool_calls?.length)).toBe(true);
      expect(await filesHolding(runDir, KEY)).toEqual([]);
    } finally {
      worker.kill("SIGTERM");
      await exited;
      await server.close();
      await redis.stop();
    }
  });

  test("a missing key variable is exit 2 naming it, before any trial", async () => {
    const r = await proctor(["run", tasks, "--runtime", "docker", "-o", out, "--run-id", "no-key", "--agent", "codex", "--model", "m", "--api-key-env", "PROCTOR_E2E_UNSET_KEY"], { env: { PROCTOR_CACHE_DIR: CACHE } });
    expect(r.code).toBe(2);
    expect(r.stderr).toContain("$PROCTOR_E2E_UNSET_KEY is not set");
    expect(existsSync(join(out, "no-key", "results.jsonl"))).toBe(false);
  });
});
