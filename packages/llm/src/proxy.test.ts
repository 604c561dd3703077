import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { request } from "undici";
import { afterEach, describe, expect, test } from "vitest";
import { startModelProxy, type ModelProxy } from "./proxy";
import { startScriptedModelServer, type ScriptedServer } from "./scripted-server";
import type { WireProtocol } from "./wire";

const KEY = "sk-real-secret-key-0123456789";

const PATHS: Record<WireProtocol, string> = { "anthropic-messages": "/messages", "openai-responses": "/responses", "openai-chat": "/chat/completions" };

async function call(baseUrl: string, token: string, body: Record<string, unknown>, path = "/chat/completions", protocol: WireProtocol = "openai-chat") {
  const auth: Record<string, string> = protocol === "anthropic-messages" ? { "x-api-key": token, "anthropic-version": "2023-06-01" } : { authorization: `Bearer ${token}` };
  const res = await request(`${baseUrl}${path}`, { method: "POST", headers: { "content-type": "application/json", ...auth }, body: JSON.stringify(body) });
  let text = "";
  let cut: Error | null = null;
  try {
    text = await res.body.text();
  } catch (error) {
    cut = error as Error;
  }
  let json: Record<string, any> = {};
  try {
    json = JSON.parse(text) as Record<string, any>;
  } catch {
    // not JSON (a stream): the test looks at text
  }
  return { status: res.statusCode, headers: res.headers, text, json, cut };
}

/** The `data:` payloads of an SSE body, JSON-parsed where they are JSON. */
function events(text: string): any[] {
  return text
    .split("\n")
    .filter((l) => l.startsWith("data: "))
    .map((l) => {
      const data = l.slice(6);
      try {
        return JSON.parse(data) as unknown;
      } catch {
        return data;
      }
    });
}

/** A first request and its follow-up carrying the tool's result, in each protocol's shape. */
function conversation(protocol: WireProtocol, first: string, callId: string, result: string): [Record<string, unknown>, Record<string, unknown>] {
  if (protocol === "anthropic-messages") {
    const user = { role: "user", content: first };
    return [
      { model: "claude-x", max_tokens: 100, stream: true, messages: [user] },
      { model: "claude-x", max_tokens: 100, stream: true, messages: [user, { role: "assistant", content: [{ type: "tool_use", id: callId, name: "Bash", input: { command: "ls" } }] }, { role: "user", content: [{ type: "tool_result", tool_use_id: callId, content: result }] }] },
    ];
  }
  if (protocol === "openai-responses") {
    const user = { type: "message", role: "user", content: [{ type: "input_text", text: first }] };
    return [
      { model: "gpt-x", stream: true, input: [user] },
      { model: "gpt-x", stream: true, input: [user, { type: "function_call", call_id: callId, name: "exec_command", arguments: '{"cmd":"ls"}' }, { type: "function_call_output", call_id: callId, output: result }] },
    ];
  }
  const user = { role: "user", content: first };
  return [
    { model: "gpt-x", stream: true, messages: [user] },
    { model: "gpt-x", stream: true, messages: [user, { role: "assistant", content: null, tool_calls: [{ id: callId, type: "function", function: { name: "bash", arguments: '{"command":"ls"}' } }] }, { role: "tool", tool_call_id: callId, content: result }] },
  ];
}

describe("model proxy", () => {
  let server: ScriptedServer;
  let proxy: ModelProxy;
  let raw: Server | null = null;
  afterEach(async () => {
    await proxy?.close();
    await server?.close();
    if (raw) await new Promise<void>((r) => raw?.close(() => r()));
    raw = null;
  });

  test("forwards with the real key and the forced model, records usage and an ATIF trajectory; a closed session's token gets 401 JSON", async () => {
    server = await startScriptedModelServer({ apiKey: KEY, models: ["real-model"], handler: (r) => (r.turn === 0 ? { toolCalls: [{ name: "bash", arguments: { command: "ls" }, id: "c1" }] } : { content: "done" }) });
    proxy = await startModelProxy({ upstreamBaseUrl: server.baseUrl, apiKey: KEY, apiKeyEnv: "TEST_KEY", model: "real-model" });
    const session = proxy.openSession({ label: "t1" });
    expect(session.token).not.toContain(KEY);
    const first = await call(proxy.tcpBaseUrl, session.token, { model: "gpt-4o", messages: [{ role: "user", content: "hi" }] });
    expect(first.status).toBe(200);
    expect(first.json.choices[0].message.tool_calls[0].function.name).toBe("bash");
    const second = await call(proxy.tcpBaseUrl, session.token, {
      model: "gpt-4o",
      messages: [{ role: "user", content: "hi" }, first.json.choices[0].message, { role: "tool", tool_call_id: "c1", content: "a b" }],
    });
    expect(second.json.choices[0].message.content).toBe("done");
    expect(server.requests.map((r) => r.headers.authorization)).toEqual([`Bearer ${KEY}`, `Bearer ${KEY}`]);
    expect(server.requests.map((r) => r.model)).toEqual(["real-model", "real-model"]);
    const totals = server.totals();
    expect(session.usage()).toEqual({ inputTokens: totals.inputTokens, outputTokens: totals.outputTokens, requests: 2, retries: 0 });
    const trajectory = session.trajectory() as { steps: any[] };
    expect(trajectory).toMatchObject({ schema_version: "ATIF-v1.4", session_id: "t1", final_metrics: { total_prompt_tokens: totals.inputTokens, total_steps: 3 } });
    expect(trajectory.steps.map((s) => s.source)).toEqual(["user", "agent", "agent"]);
    expect(trajectory.steps[1].tool_calls).toEqual([{ tool_call_id: "c1", function_name: "bash", arguments: { command: "ls" } }]);
    expect(trajectory.steps[1].observation).toEqual({ results: [{ source_call_id: "c1", content: "a b" }] });
    expect(trajectory.steps[1].extra.request).toMatchObject({ protocol: "openai-chat", requested_model: "gpt-4o", reused_messages: 0, stream: false });
    expect(trajectory.steps[2].extra.request).toMatchObject({ message_count: 3, reused_messages: 1 });

    session.close();
    const after = await call(proxy.tcpBaseUrl, session.token, { messages: [{ role: "user", content: "again" }] });
    expect(after.status).toBe(401);
    expect(after.json.error.code).toBe("invalid_api_key");
    expect((await call(proxy.tcpBaseUrl, "guess", { messages: [] })).status).toBe(401);
    expect(server.requests).toHaveLength(2);
  });

  test("the token budget answers 402 budget_exceeded (not retryable) and stops the session", async () => {
    server = await startScriptedModelServer({ handler: () => ({ content: "x", usage: { promptTokens: 60, completionTokens: 10 } }) });
    proxy = await startModelProxy({ upstreamBaseUrl: server.baseUrl, model: "m" });
    const session = proxy.openSession({ budgetTokens: 200 });
    const statuses: number[] = [];
    for (let i = 0; i < 6; i++) statuses.push((await call(proxy.tcpBaseUrl, session.token, { messages: [{ role: "user", content: `q${i}` }] })).status);
    expect(statuses).toEqual([200, 200, 200, 402, 402, 402]);
    expect(server.totals().requests).toBe(3);
    expect(session.exceeded).toMatch(/model budget exceeded: this trial used 210 of its 200 tokens \(--llm-budget-tokens\)/);
    expect(session.stopped.aborted).toBe(true);
    const refused = await call(proxy.tcpBaseUrl, session.token, { messages: [{ role: "user", content: "z" }] });
    expect(refused.json.error).toMatchObject({ code: "budget_exceeded" });
    // Another trial's session has its own budget.
    expect((await call(proxy.tcpBaseUrl, proxy.openSession({ budgetRequests: 1 }).token, { messages: [{ role: "user", content: "o" }] })).status).toBe(200);
  });

  test("an upstream that never answered and refuses connections is fatal after 3 attempts: 502 upstream_unreachable naming the URL", async () => {
    const port = await new Promise<number>((done) => {
      const s = createServer().listen(0, "127.0.0.1", () => {
        const p = (s.address() as AddressInfo).port;
        s.close(() => done(p));
      });
    });
    const slept: number[] = [];
    proxy = await startModelProxy({ upstreamBaseUrl: `http://127.0.0.1:${port}/v1`, apiKey: KEY, model: "m", clock: { now: () => 0, sleep: async (ms) => void slept.push(ms) } });
    const session = proxy.openSession();
    const refused = await call(proxy.tcpBaseUrl, session.token, { messages: [{ role: "user", content: "a" }] });
    expect(refused.status).toBe(502);
    expect(refused.json.error).toMatchObject({ code: "upstream_unreachable" });
    expect(session.fatal).toBe(`the model endpoint http://127.0.0.1:${port}/v1/chat/completions cannot be reached (ECONNREFUSED, 3 attempts): is the model server running there? Check --base-url`);
    expect(slept).toHaveLength(2);
    for (const ms of slept) expect(ms).toBeLessThanOrEqual(1000);
  });

  test("a rejected key is fatal and never echoed: the upstream's 401 (which repeats the key) becomes a 502 without it", async () => {
    server = await startScriptedModelServer({
      handler: () => ({ content: "unused" }),
      faults: [{ status: 401, body: { error: { message: `Incorrect API key provided: ${KEY}` } } }, { status: 500, body: `boom ${KEY}` }],
    });
    proxy = await startModelProxy({ upstreamBaseUrl: server.baseUrl, apiKey: KEY, apiKeyEnv: "TEST_KEY", model: "m", retry: { maxAttempts: 1 } });
    const session = proxy.openSession();
    const denied = await call(proxy.tcpBaseUrl, session.token, { messages: [{ role: "user", content: "a" }] });
    expect(denied.status).toBe(502);
    expect(denied.text).not.toContain(KEY);
    expect(denied.text).toContain("$TEST_KEY");
    expect(session.fatal).toMatch(/answered 401 to Proctor's key from \$TEST_KEY/);
    const failed = await call(proxy.tcpBaseUrl, session.token, { messages: [{ role: "user", content: "b" }] });
    expect(failed.status).toBe(500);
    expect(failed.text).toContain("boom [redacted]");
    expect(failed.text).not.toContain(KEY);
    expect(JSON.stringify(session.trajectory())).not.toContain(KEY);
    expect(session.usage().retries).toBe(1);
  });

  for (const protocol of ["anthropic-messages", "openai-responses", "openai-chat"] as const) {
    test(`${protocol}: a streamed exchange passes through event for event, with the key swapped, the model pinned, usage and tool calls recorded`, async () => {
      server = await startScriptedModelServer({
        apiKey: KEY,
        models: ["pinned"],
        handler: (r) => (r.toolResults.length === 0 ? { toolCalls: [{ name: "run", arguments: { cmd: "make test", n: 2 }, id: "call-7" }], usage: { promptTokens: 120, completionTokens: 30, cachedTokens: 20 } } : { content: "all green", usage: { promptTokens: 200, completionTokens: 5, cachedTokens: 100 } }),
      });
      proxy = await startModelProxy({ upstreamBaseUrl: server.baseUrl, apiKey: KEY, model: "pinned" });
      const session = proxy.openSession({ label: protocol });
      const [first, second] = conversation(protocol, "fix the build", "call-7", "2 passed");
      const a = await call(proxy.tcpBaseUrl, session.token, first, PATHS[protocol], protocol);
      expect(a.status).toBe(200);
      expect(a.headers["content-type"]).toContain("text/event-stream");
      const b = await call(proxy.tcpBaseUrl, session.token, second, PATHS[protocol], protocol);
      expect(b.cut).toBeNull();
      // The agent got the upstream's events unchanged (the last data line ends each protocol's stream).
      expect(events(a.text).length).toBeGreaterThan(3);
      expect(JSON.stringify(events(b.text))).toContain("all green");
      const last = events(b.text).at(-1);
      expect(protocol === "openai-chat" ? last : last.type).toBe(protocol === "openai-chat" ? "[DONE]" : protocol === "anthropic-messages" ? "message_stop" : "response.completed");
      expect(server.requests.map((r) => r.model)).toEqual(["pinned", "pinned"]);
      expect(server.requests.map((r) => (protocol === "anthropic-messages" ? r.headers["x-api-key"] : r.headers.authorization))).toEqual(protocol === "anthropic-messages" ? [KEY, KEY] : [`Bearer ${KEY}`, `Bearer ${KEY}`]);
      expect(server.requests.every((r) => !JSON.stringify(r.headers).includes(session.token))).toBe(true);
      expect(session.usage()).toEqual({ inputTokens: 320, outputTokens: 35, requests: 2, retries: 0, cacheReadTokens: 120, cacheWriteTokens: 0 });
      const trajectory = session.trajectory() as { steps: any[]; final_metrics: any };
      expect(trajectory.steps.map((s) => s.source)).toEqual(["user", "agent", "agent"]);
      expect(trajectory.steps[0].message).toBe("fix the build");
      expect(trajectory.steps[1]).toMatchObject({
        tool_calls: [{ tool_call_id: "call-7", function_name: "run", arguments: { cmd: "make test", n: 2 } }],
        observation: { results: [{ source_call_id: "call-7", content: "2 passed" }] },
        metrics: { prompt_tokens: 120, completion_tokens: 30, cached_tokens: 20 },
        extra: { request: { protocol, stream: true, status: 200, attempts: 1 } },
      });
      expect(trajectory.steps[2]).toMatchObject({ message: "all green", metrics: { prompt_tokens: 200, completion_tokens: 5, cached_tokens: 100 } });
      expect(trajectory.final_metrics).toMatchObject({ total_prompt_tokens: 320, total_completion_tokens: 35, total_cached_tokens: 120, total_steps: 3 });
    });

    test(`${protocol}: a stream cut midway is cut for the agent too, recorded, and the next request works`, async () => {
      server = await startScriptedModelServer({ faults: [{ cut: { afterEvents: 2, reply: { content: "never finished" } } }], handler: () => ({ content: "second try" }) });
      proxy = await startModelProxy({ upstreamBaseUrl: server.baseUrl, model: "m" });
      const session = proxy.openSession();
      const [first] = conversation(protocol, "go", "c", "r");
      const cut = await call(proxy.tcpBaseUrl, session.token, first, PATHS[protocol], protocol);
      expect(cut.status).toBe(200);
      expect(cut.cut).not.toBeNull(); // the agent's client sees a broken stream, not a clean end
      const again = await call(proxy.tcpBaseUrl, session.token, first, PATHS[protocol], protocol);
      expect(again.cut).toBeNull();
      expect(JSON.stringify(events(again.text))).toContain("second try");
      expect(session.usage()).toMatchObject({ requests: 1, retries: 1 });
      const steps = (session.trajectory() as { steps: any[] }).steps.filter((s) => s.source === "agent");
      expect(steps[0].extra.error).toMatch(/stream cut|ended before its final event/);
      expect(steps[1].message).toBe("second try");
    });
  }

  test("a 429 storm is ridden out inside the proxy (Retry-After honoured, the shared limit halved), and one longer than the policy reaches the agent with its Retry-After", async () => {
    const storm = Array.from({ length: 15 }, () => ({ status: 429, headers: { "retry-after": "0" } }));
    server = await startScriptedModelServer({ faults: storm, handler: () => ({ content: "finally" }) });
    proxy = await startModelProxy({ upstreamBaseUrl: server.baseUrl, model: "m", maxConcurrency: 4, retry: { maxAttempts: 20, baseDelayMs: 1, maxDelayMs: 5 } });
    const session = proxy.openSession();
    const [first] = conversation("openai-responses", "q", "c", "r");
    const ok = await call(proxy.tcpBaseUrl, session.token, first, "/responses", "openai-responses");
    expect(ok.status).toBe(200);
    expect(JSON.stringify(events(ok.text))).toContain("finally");
    expect(session.usage()).toMatchObject({ requests: 1, retries: 15 });
    expect(proxy.limiter.stats().limit).toBeLessThan(4);
    expect((session.trajectory() as { steps: any[] }).steps.at(-1).extra.request.attempts).toBe(16);
    await server.close();

    server = await startScriptedModelServer({ faults: Array.from({ length: 5 }, () => ({ status: 429, headers: { "retry-after": "0" }, body: { type: "error", error: { type: "rate_limit_error", message: "slow down" } } })), handler: () => ({ content: "late" }) });
    await proxy.close();
    proxy = await startModelProxy({ upstreamBaseUrl: server.baseUrl, model: "m", retry: { maxAttempts: 3, baseDelayMs: 1 } });
    const s2 = proxy.openSession();
    const [msg] = conversation("anthropic-messages", "q", "c", "r");
    const limited = await call(proxy.tcpBaseUrl, s2.token, msg, "/messages", "anthropic-messages");
    expect(limited.status).toBe(429);
    expect(limited.headers["retry-after"]).toBe("0");
    expect(limited.json).toMatchObject({ type: "error", error: { type: "rate_limit_error" } });
    expect(s2.usage().retries).toBe(3);
  });

  test("a stream is passed on as it arrives, not buffered whole", async () => {
    let release: () => void = () => undefined;
    const held = new Promise<void>((r) => (release = r));
    raw = createServer((req, res) => {
      req.resume();
      res.writeHead(200, { "content-type": "text/event-stream" });
      res.write(`event: message_start\ndata: ${JSON.stringify({ type: "message_start", message: { usage: { input_tokens: 5, output_tokens: 0 } } })}\n\n`);
      void held.then(() => {
        res.write(`event: message_delta\ndata: ${JSON.stringify({ type: "message_delta", delta: { stop_reason: "end_turn" }, usage: { output_tokens: 3 } })}\n\n`);
        res.end(`event: message_stop\ndata: {"type":"message_stop"}\n\n`);
      });
    });
    await new Promise<void>((r) => raw?.listen(0, "127.0.0.1", r));
    proxy = await startModelProxy({ upstreamBaseUrl: `http://127.0.0.1:${(raw.address() as AddressInfo).port}`, model: "m" });
    const session = proxy.openSession();
    const res = await request(`${proxy.tcpBaseUrl}/messages`, { method: "POST", headers: { "x-api-key": session.token, "content-type": "application/json" }, body: JSON.stringify({ stream: true, max_tokens: 5, messages: [{ role: "user", content: "x" }] }) });
    const reader = res.body[Symbol.asyncIterator]();
    const firstChunk = await reader.next();
    // The upstream is still holding the rest: the first event reached the agent on its own.
    expect(String(firstChunk.value)).toContain("message_start");
    release();
    let rest = "";
    for (let next = await reader.next(); !next.done; next = await reader.next()) rest += String(next.value);
    expect(rest).toContain("message_stop");
    expect(session.usage()).toMatchObject({ inputTokens: 5, outputTokens: 3, requests: 1 });
  });

  test("count_tokens is forwarded with the pinned model and not counted as a completion; Claude Code's /api/hello check answers", async () => {
    server = await startScriptedModelServer({ apiKey: KEY, handler: () => ({ content: "x" }) });
    proxy = await startModelProxy({ upstreamBaseUrl: server.baseUrl, apiKey: KEY, model: "pinned" });
    const session = proxy.openSession();
    const counted = await call(proxy.tcpBaseUrl, session.token, { model: "other", messages: [{ role: "user", content: "count me" }] }, "/messages/count_tokens", "anthropic-messages");
    expect(counted.status).toBe(200);
    expect(counted.json.input_tokens).toBeGreaterThan(0);
    expect(server.requests[0]).toMatchObject({ countTokens: true, model: "pinned" });
    expect(session.usage().requests).toBe(0);
    const hello = await request(`${proxy.tcpBaseUrl.replace(/\/v1$/, "")}/api/hello`, { method: "HEAD" });
    expect(hello.statusCode).toBe(200);
    await hello.body.dump();
  });
});
