import { mkdir, mkdtemp, readFile, readdir, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startScriptedModelServer, type ChatModel, type ScriptedServer, type ScriptedServerOptions } from "@proctor/llm";
import { LocalRuntime, type Sandbox } from "@proctor/sandbox";
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, test } from "vitest";
import { createAgent } from "./create";
import { RunFatalAgentError } from "./errors";
import { llmAgent } from "./llm";
import { HeadTail, parseToolCall } from "./llm-tools";
import { isoNow } from "./llm-trajectory";
import { testContext, testTask } from "./test-support";
import type { AgentContext } from "./types";

const KEY = "sk-proctor-test-7d1e0b5a9c";
const KEY_ENV = "PROCTOR_TEST_LLM_KEY";

let root: string;
let runtime: LocalRuntime;
let sandbox: Sandbox;
let logDir: string;
let server: ScriptedServer | null = null;

const task = testTask();

function context(timeoutMs = 30_000): AgentContext {
  return testContext(sandbox, task, logDir, timeoutMs);
}

async function serve(options: Omit<ScriptedServerOptions, "apiKey">, key = KEY) {
  server = await startScriptedModelServer({ apiKey: KEY, ...options });
  process.env[KEY_ENV] = key;
  const agent = createAgent({ kind: "llm", model: "scripted", baseUrl: server.baseUrl, apiKeyEnv: KEY_ENV, maxTurns: 10 });
  return agent;
}

async function trajectory() {
  return JSON.parse(await readFile(join(logDir, "trajectory.json"), "utf8"));
}

beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), "proctor-llm-agent-"));
  await mkdir(join(root, "sandboxes"));
  runtime = new LocalRuntime({ rootDir: join(root, "sandboxes") });
});
afterAll(() => rm(root, { recursive: true, force: true }));
beforeEach(async () => {
  sandbox = await runtime.create({ image: "local" });
  logDir = join(await mkdtemp(join(root, "trial-")), "agent");
});
afterEach(async () => {
  delete process.env[KEY_ENV];
  await sandbox.kill();
  await server?.close();
  server = null;
});

describe("llm agent", () => {
  test("a scripted model solves the task with write_file, bash and submit; trajectory and usage match the server", async () => {
    const agent = await serve({
      handler: (r) =>
        [
          { content: "I'll write the file.", toolCalls: [{ name: "write_file", arguments: { path: "answer.txt", content: "42\n" } }] },
          { toolCalls: [{ name: "bash", arguments: { command: "cat answer.txt; echo err >&2; exit 3" } }] },
          { toolCalls: [{ name: "read_file", arguments: { path: "answer.txt" } }, { name: "submit", arguments: {} }] },
        ][r.turn] ?? { content: "done" },
    });
    const result = await agent.run(context());
    expect(result).toMatchObject({ exitCode: 0, timedOut: false, aborted: false, model: "scripted" });
    expect((await sandbox.readFile(`${sandbox.workdir}/answer.txt`))?.toString()).toBe("42\n");
    const totals = server?.totals();
    // "scripted" has no price: the usage says so instead of a cost.
    expect(result.usage).toEqual({ inputTokens: totals?.inputTokens, outputTokens: totals?.outputTokens, requests: 3, retries: 0, unpriced: expect.stringContaining('no price for model "scripted"') });

    // The model saw the tool results, with the time left on the last one.
    const third = server?.requests[2]?.messages ?? [];
    const bashResult = third.find((m) => m.role === "tool" && String(m.content).includes("[exit code 3]"));
    expect(bashResult?.content).toMatch(/^42\nerr\n\[exit code 3\]\n\[proctor: \d+ s of \d+ s left; turn 2 of 10\]$/);
    const system = server?.requests[0]?.messages[0];
    expect(system?.content).toMatch(/You have \d+ seconds in total/);
    expect(server?.requests[0]?.body.tools).toHaveLength(4);

    const t = await trajectory();
    expect(t.schema_version).toBe("ATIF-v1.4");
    expect(t.agent).toMatchObject({ name: "proctor-llm", model_name: "scripted" });
    expect(t.steps.map((s: { source: string }) => s.source)).toEqual(["system", "user", "agent", "agent", "agent"]);
    const last = t.steps[4];
    expect(last.tool_calls.map((c: { function_name: string }) => c.function_name)).toEqual(["read_file", "submit"]);
    expect(last.observation.results[0].content).toBe("42\n");
    expect(last.metrics.prompt_tokens).toBeGreaterThan(0);
    expect(last.extra.request).toMatchObject({ message_count: 6, retries: 0, finish_reason: "tool_calls" });
    expect(t.extra.stop_reason).toBe("submit");
    expect(t.final_metrics).toMatchObject({ total_prompt_tokens: totals?.inputTokens, total_completion_tokens: totals?.outputTokens });
    // Every request's messages are a prefix of the recorded conversation.
    for (const [i, req] of (server?.requests ?? []).entries()) {
      expect(t.extra.messages.slice(0, req.messages.length)).toEqual(req.messages);
      expect(t.steps[2 + i].extra.request.message_count).toBe(req.messages.length);
    }
    expect(await readFile(join(logDir, "stdout.txt"), "utf8")).toContain("[turn 2] bash");
  });

  test("malformed tool calls get an error tool message and the loop goes on", async () => {
    const agent = await serve({
      handler: (r) =>
        [
          {
            toolCalls: [
              { name: "bash", arguments: '{"command": "ls' },
              { name: "launch_rockets", arguments: {} },
              { name: "write_file", arguments: { path: "x.txt" } },
              { name: "bash", arguments: "[1]" },
            ],
          },
          { toolCalls: [{ name: "bash", arguments: { command: "echo recovered > ok.txt" } }] },
          { content: "finished" },
        ][r.turn] ?? { content: "?" },
    });
    const result = await agent.run(context());
    expect(result.exitCode).toBe(0);
    const replies = (server?.requests[1]?.messages ?? []).filter((m) => m.role === "tool").map((m) => String(m.content));
    expect(replies).toHaveLength(4);
    expect(replies[0]).toMatch(/^error: the arguments of bash are not valid JSON/);
    expect(replies[1]).toMatch(/^error: unknown tool "launch_rockets"; the tools are bash, read_file, write_file, submit/);
    expect(replies[2]).toMatch(/^error: bad arguments for write_file: content: missing/);
    expect(replies[3]).toMatch(/^error: the arguments of bash must be a JSON object/);
    expect((await sandbox.readFile(`${sandbox.workdir}/ok.txt`))?.toString()).toBe("recovered\n");
    const t = await trajectory();
    expect(t.extra.stop_reason).toBe("no_tool_calls");
    expect(t.steps[2].tool_calls[0].arguments).toEqual({ _raw: '{"command": "ls' });
    expect(t.steps[2].extra.tools[1].error).toMatch(/unknown tool/);
  });

  test("long output keeps head and tail and says what was cut", async () => {
    const agent = await serve({
      handler: (r) => (r.turn === 0 ? { toolCalls: [{ name: "bash", arguments: { command: "echo START; head -c 100000 /dev/zero | tr '\\0' x; echo; echo END" } }] } : { content: "ok" }),
    });
    await agent.run(context());
    const content = String(server?.requests[1]?.messages.find((m) => m.role === "tool")?.content);
    expect(content.startsWith("START\nxxx")).toBe(true);
    expect(content).toMatch(/\[\.\.\. \d+ bytes of output cut here \(100011 in all\); the start and the end are kept \.\.\.\]/);
    expect(content).toMatch(/x\nEND\n\[exit code 0\]/);
    expect(content.length).toBeLessThan(17_000);
    expect((await trajectory()).steps[2].extra.tools[0]).toMatchObject({ output_bytes: 100011, truncated: true, exit_code: 0 });
  });

  test("429 with Retry-After and a 500 are retried inside one turn and counted", async () => {
    const agent = await serve({
      faults: [{ status: 429, headers: { "retry-after": "1" } }, { status: 500 }],
      handler: () => ({ content: "nothing to do" }),
    });
    const result = await agent.run(context());
    expect(result.usage).toMatchObject({ requests: 1, retries: 2 });
    expect(server?.requests).toHaveLength(3);
    expect((await trajectory()).steps[2].extra.request.retries).toBe(2);
  });

  test("a context-length error ends the loop with the reason recorded, not an exception", async () => {
    const agent = await serve({
      handler: (r) =>
        r.turn === 0
          ? { toolCalls: [{ name: "bash", arguments: { command: "echo hi" } }] }
          : { status: 400, body: { error: { message: "This model's maximum context length is 4096 tokens. However, your messages resulted in 5000 tokens.", code: "context_length_exceeded" } } },
    });
    const result = await agent.run(context());
    expect(result).toMatchObject({ exitCode: 0, timedOut: false });
    const t = await trajectory();
    expect(t.extra.stop_reason).toBe("context_length");
    expect(t.notes).toMatch(/maximum context length/);
  });

  test("a wrong key throws RunFatalAgentError naming base URL, model and env var; the key is nowhere", async () => {
    const agent = await serve({ handler: () => ({ content: "x" }) }, "sk-wrong-key-0000");
    const error = await agent.run(context()).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(RunFatalAgentError);
    const message = (error as Error).message;
    expect(message).toContain(server?.baseUrl ?? "?");
    expect(message).toContain("scripted");
    expect(message).toContain(`$${KEY_ENV}`);
    expect(message).not.toContain("sk-wrong-key-0000");
    const t = await trajectory();
    expect(t.extra.stop_reason).toBe("fatal");
    expect(JSON.stringify(t)).not.toContain("sk-wrong-key-0000");
  });

  test("an unknown model is fatal too", async () => {
    const agent = await serve({ models: ["another-model"], handler: () => ({ content: "x" }) });
    await expect(agent.run(context())).rejects.toBeInstanceOf(RunFatalAgentError);
  });

  test("the key never reaches the sandbox: env and /proc/*/environ seen from inside hold no key", async () => {
    const agent = await serve({
      handler: (r) =>
        r.turn === 0
          ? { toolCalls: [{ name: "bash", arguments: { command: "env; cat /proc/self/environ /proc/$$/environ | tr '\\0' '\\n'; echo marker-done" } }] }
          : { content: "ok" },
    });
    await agent.run(context());
    const seen = String(server?.requests[1]?.messages.find((m) => m.role === "tool")?.content);
    expect(seen).toContain("marker-done");
    expect(seen).toContain("PATH=");
    expect(seen).not.toContain(KEY);
    expect(seen).not.toContain(KEY_ENV);
    for (const file of await readdir(logDir)) expect(await readFile(join(logDir, file), "utf8")).not.toContain(KEY);
  });

  test("the deadline ends the loop: timedOut, the running command killed", async () => {
    const agent = await serve({ handler: () => ({ toolCalls: [{ name: "bash", arguments: { command: "sleep 20" } }] }) });
    const started = Date.now();
    const result = await agent.run(context(1500));
    expect(Date.now() - started).toBeLessThan(8000);
    expect(result).toMatchObject({ timedOut: true, exitCode: null });
    expect((await trajectory()).extra.stop_reason).toBe("deadline");
  });

  test("max turns ends the loop", async () => {
    const agent = await serve({ handler: () => ({ toolCalls: [{ name: "bash", arguments: { command: "true" } }] }) });
    const result = await agent.run(context());
    expect(result.usage?.requests).toBe(10);
    expect((await trajectory()).extra.stop_reason).toBe("max_turns");
  });

  test("a library user's own ChatModel object drives the loop", async () => {
    const calls: number[] = [];
    const model: ChatModel = {
      model: "my-model",
      async complete(request) {
        calls.push(request.messages.length);
        return calls.length === 1
          ? { message: { role: "assistant", content: null, tool_calls: [{ id: "a", type: "function", function: { name: "submit", arguments: "{}" } }] }, finishReason: "tool_calls", usage: { inputTokens: 5, outputTokens: 1 }, retries: 0, durationMs: 1 }
          : { message: { role: "assistant", content: "?" }, finishReason: "stop", usage: { inputTokens: 0, outputTokens: 0 }, retries: 0, durationMs: 1 };
      },
    };
    const result = await llmAgent({ model }).run(context());
    expect(calls).toEqual([2]);
    expect(result).toMatchObject({ model: "my-model", usage: { inputTokens: 5, outputTokens: 1, requests: 1, retries: 0 } });
  });
});

test("parseToolCall accepts empty arguments for submit; HeadTail keeps everything under the limit", () => {
  expect(parseToolCall({ id: "1", type: "function", function: { name: "submit", arguments: "" } })).toMatchObject({ ok: true, name: "submit" });
  const h = new HeadTail(10);
  h.push(Buffer.from("abc"));
  h.push(Buffer.from("def"));
  expect(h.text()).toBe("abcdef");
  const big = new HeadTail(10);
  for (const c of "0123456789ABCDEFGHIJ") big.push(Buffer.from(c));
  expect(big.text()).toBe("01234\n[... 10 bytes of output cut here (20 in all); the start and the end are kept ...]\nFGHIJ");
});

test("trajectory timestamps carry microseconds and read back as the same instant", () => {
  const before = Date.now();
  const stamp = isoNow();
  const after = Date.now();
  expect(stamp).toMatch(/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$/);
  const ms = Date.parse(stamp);
  expect(ms).toBeGreaterThanOrEqual(before - 3);
  expect(ms).toBeLessThanOrEqual(after + 3);
  // Python's datetime.fromisoformat and JS both read six digits; the first three are the milliseconds.
  expect(new Date(ms).toISOString().slice(0, 23)).toBe(stamp.slice(0, 23));
});
