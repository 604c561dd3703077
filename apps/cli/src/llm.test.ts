import { execFileSync } from "node:child_process";
import { afterAll, afterEach, beforeAll, describe, expect, test, vi } from "vitest";
import { mkdtemp, readFile, readdir, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startScriptedModelServer, type ScriptedReply, type ScriptedRequest, type ScriptedServer } from "@proctor/llm";
import { dockerTestGate } from "@proctor/sandbox-docker";
import { parseAgent } from "./commands/run";
import { proctor, repoRoot } from "./test-support";

const examples = join(repoRoot, "examples/tasks");
const exampleIds = (await readdir(examples)).sort();
const KEY = "sk-e2e-3b8f61d0c2a94e7f";
const KEY_ENV = "PROCTOR_E2E_MODEL_KEY";

let out: string;
let server: ScriptedServer | null = null;
beforeAll(async () => {
  out = await mkdtemp(join(tmpdir(), "proctor-cli-llm-"));
});
afterAll(() => rm(out, { recursive: true, force: true }));
afterEach(async () => {
  await server?.close();
  server = null;
});

/** Every file under dir, as text. */
async function allText(dir: string): Promise<{ path: string; text: string }[]> {
  const files: { path: string; text: string }[] = [];
  for (const entry of await readdir(dir, { recursive: true, withFileTypes: true })) {
    if (!entry.isFile()) continue;
    const path = join(entry.parentPath, entry.name);
    files.push({ path, text: await readFile(path, "latin1") });
  }
  return files;
}

const solutions = new Map<string, string>();
for (const id of exampleIds) {
  solutions.set(
    (await readFile(join(examples, id, "instruction.md"), "utf8")).trim(),
    `export PROCTOR_WORKDIR="$PWD"\n${await readFile(join(examples, id, "solution/solve.sh"), "utf8")}`,
  );
}

/**
 * The script: word-frequency is given up (no tool calls); greeting-file first sends a malformed
 * call; every other task runs its reference solution, prints its env, and submits.
 */
function script(r: ScriptedRequest): ScriptedReply {
  return scriptFor(r, "env");
}

/**
 * The same script; `look` is what the agent runs to look for the key. On the local runtime the
 * agent is a host process and can read every host process's /proc/<pid>/environ, Proctor's own
 * included (no isolation: README says so), so there it looks at its own environment only; in a
 * container it reads every process's environ too.
 */
function scriptFor(r: ScriptedRequest, look: string): ScriptedReply {
  const solve = solutions.get(r.conversation.trim());
  if (!solve) return { status: 400, body: { error: { message: "unknown conversation" } } };
  if (r.conversation.includes("top-words")) return { content: "I give up." };
  const steps: ScriptedReply[] = [
    ...(r.conversation.includes("greeting.txt") ? [{ toolCalls: [{ name: "bash", arguments: '{"command": ' }] } as ScriptedReply] : []),
    { toolCalls: [{ name: "bash", arguments: { command: solve } }] },
    { toolCalls: [{ name: "bash", arguments: { command: `${look}; echo env-done` } }] },
    { toolCalls: [{ name: "submit", arguments: {} }] },
  ];
  return steps[r.turn] ?? { content: "done" };
}

describe("proctor run --agent llm (local runtime, scripted model)", () => {
  test("scores the scripted model exactly as scripted, retries 429/500, records trajectories and usage, leaks no key", async () => {
    const commandLines: string[] = [];
    server = await startScriptedModelServer({
      apiKey: KEY,
      models: ["scripted-1"],
      faults: [{ status: 429, headers: { "retry-after": "1" } }, { status: 500 }],
      handler: script,
    });
    const r = await proctor(
      ["run", examples, "--runtime", "local", "-o", out, "--run-id", "llm-ok", "--agent", "llm", "--model", "scripted-1", "--base-url", server.baseUrl, "--api-key-env", KEY_ENV, "--max-turns", "8", "--temperature", "0", "-n", "2", "--json"],
      // Every process's command line on the host (what `ps` shows) while the run is under way.
      { env: { [KEY_ENV]: KEY }, onStderr: () => commandLines.push(execFileSync("ps", ["-eww", "-o", "args="], { encoding: "utf8" })) },
    );
    expect(r.code, r.stderr).toBe(0);
    expect(commandLines.join("\n"), "ps saw the run").toContain("--run-id llm-ok");
    expect(commandLines.join("\n")).not.toContain(KEY);
    const summary = JSON.parse(r.stdout);
    expect(summary.trials).toMatchObject({ total: 4, passed: 3, failed: 1, errored: 0 });
    const totals = server.totals();
    expect(summary.usage).toEqual({ inputTokens: totals.inputTokens, outputTokens: totals.outputTokens, requests: totals.requests, retries: 2, trials: 4 });
    expect(r.stderr).toMatch(/tokens\s+[\d,]+ in, [\d,]+ out \(\d+ model requests, 2 retried, over 4 trials\)/);

    const runDir = join(out, "llm-ok");
    const results = (await readFile(join(runDir, "results.jsonl"), "utf8")).trim().split("\n").map((l) => JSON.parse(l));
    const byTask = Object.fromEntries(results.map((x) => [x.taskId, x]));
    expect(byTask["word-frequency"].status).toBe("failed");
    for (const x of results) {
      expect(x.agent).toMatchObject({ name: "llm", model: "scripted-1" });
      const t = JSON.parse(await readFile(join(runDir, "trials", x.trialId, "agent", "trajectory.json"), "utf8"));
      expect(t.final_metrics.total_prompt_tokens).toBe(x.agent.usage.inputTokens);
      expect(t.extra.stop_reason).toBe(x.taskId === "word-frequency" ? "no_tool_calls" : "submit");
    }
    const greeting = JSON.parse(await readFile(join(runDir, "trials", byTask["greeting-file"].trialId, "agent", "trajectory.json"), "utf8"));
    expect(greeting.steps[2].observation.results[0].content).toMatch(/^error: the arguments of bash are not valid JSON/);

    const runJson = JSON.parse(await readFile(join(runDir, "run.json"), "utf8"));
    expect(runJson.agent).toMatchObject({ kind: "llm", model: "scripted-1", baseUrl: server.baseUrl, apiKeyEnv: KEY_ENV, maxTurns: 8, temperature: 0 });
    // The env the sandbox saw went back to the model: no key, not even its variable.
    const envSeen = server.requests.flatMap((q) => q.messages).filter((m) => m.role === "tool" && String(m.content).includes("env-done"));
    expect(envSeen.length).toBe(3);
    for (const m of envSeen) expect(String(m.content)).not.toContain(KEY_ENV);
    const leaks = (await allText(runDir)).filter((f) => f.text.includes(KEY)).map((f) => f.path);
    expect(leaks).toEqual([]);
    expect(r.stdout + r.stderr).not.toContain(KEY);
  });

  test("a key rejected mid-run stops the run: exit 4, message names URL, model and env var, finished trials kept, no key anywhere", async () => {
    let revoked = false;
    server = await startScriptedModelServer({
      handler: (r) => {
        if (r.headers.authorization !== `Bearer ${KEY}` || revoked) return { status: 401, body: { error: { message: `Incorrect API key provided: ${KEY}`, code: "invalid_api_key" } } };
        const reply = script(r);
        if ("toolCalls" in reply && reply.toolCalls[0]?.name === "submit") revoked = true;
        return reply;
      },
    });
    const r = await proctor(
      ["run", examples, "-x", "word-frequency", "--runtime", "local", "-o", out, "--run-id", "llm-revoked", "--agent", "llm", "--model", "scripted-1", "--base-url", server.baseUrl, "--api-key-env", KEY_ENV, "-n", "1"],
      { env: { [KEY_ENV]: KEY } },
    );
    expect(r.code, r.stderr).toBe(4);
    expect(r.stderr).toContain(server.baseUrl);
    expect(r.stderr).toContain("scripted-1");
    expect(r.stderr).toContain(`$${KEY_ENV}`);
    const runDir = join(out, "llm-revoked");
    const results = (await readFile(join(runDir, "results.jsonl"), "utf8")).trim().split("\n").filter(Boolean);
    expect(results).toHaveLength(1);
    expect(JSON.parse(results[0] ?? "{}").status).toBe("passed");
    const summary = JSON.parse(await readFile(join(runDir, "summary.json"), "utf8"));
    expect(summary.status).toBe("failed");
    expect(summary.error).toContain(`$${KEY_ENV}`);
    expect((await allText(runDir)).filter((f) => f.text.includes(KEY)).map((f) => f.path)).toEqual([]);
    expect(r.stdout + r.stderr).not.toContain(KEY);
  });

  test("--agent llm without --model, and llm flags without --agent llm, are usage errors (exit 2)", async () => {
    const noModel = await proctor(["run", examples, "--runtime", "local", "-o", out, "--agent", "llm"]);
    expect(noModel.code).toBe(2);
    expect(noModel.stderr).toContain("--agent llm needs --model");
    const stray = await proctor(["run", examples, "--runtime", "local", "-o", out, "--agent", "nop", "--model", "x"]);
    expect(stray.code).toBe(2);
    // One grammatical line naming every agent that takes a model.
    expect(stray.stderr).toContain("proctor: --model goes with an agent that takes a model (--agent llm, claude-code, codex, installed:<dir>, or a code agent's directory with --llm-proxy); --agent nop takes no model\n");
  });
});

const docker = await dockerTestGate();

describe.skipIf(!docker)("proctor run --agent llm on Docker", () => {
  test("the scripted model passes in containers; env and /proc/*/environ inside hold no key", async () => {
    server = await startScriptedModelServer({ apiKey: KEY, handler: (r) => scriptFor(r, "env; for f in /proc/[0-9]*/environ; do tr '\\0' '\\n' < $f; done 2>/dev/null") });
    const r = await proctor(
      ["run", examples, "-i", "greeting-file", "-i", "fizzbuzz-python", "--runtime", "docker", "-o", out, "--run-id", "llm-docker", "--agent", "llm", "--model", "m", "--base-url", server.baseUrl, "--api-key-env", KEY_ENV, "--json"],
      { env: { [KEY_ENV]: KEY } },
    );
    expect(r.code, r.stderr).toBe(0);
    expect(JSON.parse(r.stdout).trials).toMatchObject({ total: 2, passed: 2 });
    const envSeen = server.requests.flatMap((q) => q.messages).filter((m) => m.role === "tool" && String(m.content).includes("env-done"));
    expect(envSeen.length).toBe(2);
    for (const m of envSeen) {
      expect(String(m.content)).toContain("PATH=");
      expect(String(m.content)).not.toContain(KEY);
      expect(String(m.content)).not.toContain(KEY_ENV);
    }
    expect((await allText(join(out, "llm-docker"))).filter((f) => f.text.includes(KEY)).map((f) => f.path)).toEqual([]);
  });
});

test("--llm-proxy turns a code agent's --model/--base-url/--api-key-env into a modelProxy spec; misplaced flags are usage errors", () => {
  const dir = tmpdir();
  // A variable named with --api-key-env must be set (else exit 2 before any trial).
  expect(() => parseAgent(dir, null, { llmProxy: true, model: "m", apiKeyEnv: "K" })).toThrow(/\$K is not set \(--api-key-env K\)/);
  vi.stubEnv("K", "k");
  const spec = parseAgent(dir, null, { llmProxy: true, model: "m", baseUrl: "http://127.0.0.1:9/v1", apiKeyEnv: "K", llmBudgetTokens: 100 });
  expect(spec).toEqual({ kind: "code", dir, modelProxy: { model: "m", baseUrl: "http://127.0.0.1:9/v1", apiKeyEnv: "K", budgetTokens: 100 } });
  expect(() => parseAgent("llm", null, { model: "m", llmProxy: true })).toThrow(/--llm-proxy goes with a code agent/);
  expect(() => parseAgent(dir, null, { llmProxy: true, model: "m", maxTurns: 3 })).toThrow(/--max-turns only goes with --agent llm/);
  expect(() => parseAgent("oracle", null, { llmProxy: true, model: "m" })).toThrow(/use it with --agent <agent-dir>/);
  expect(() => parseAgent(dir, null, { llmBudgetTokens: 5 })).toThrow(/--llm-budget-tokens goes with an agent that takes a model through the model proxy \(--agent claude-code, codex, installed:<dir>, or a code agent's directory with --llm-proxy\); a code agent takes one only with --llm-proxy: add it/);
  vi.unstubAllEnvs();
});
