import { request } from "undici";
import { afterEach, describe, expect, test } from "vitest";
import { startModelProxy, type ModelProxy } from "./proxy";
import { startScriptedModelServer, type ScriptedServer } from "./scripted-server";

const KEY = "sk-real-secret-key-0123456789";

async function call(baseUrl: string, token: string, body: Record<string, unknown>) {
  const res = await request(`${baseUrl}/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json", authorization: `Bearer ${token}` },
    body: JSON.stringify(body),
  });
  const text = await res.body.text();
  let json: Record<string, any> = {};
  try {
    json = JSON.parse(text) as Record<string, any>;
  } catch {
    // not JSON: the test looks at text
  }
  return { status: res.statusCode, text, json };
}

describe("model proxy", () => {
  let server: ScriptedServer;
  let proxy: ModelProxy;
  afterEach(async () => {
    await proxy?.close();
    await server?.close();
  });

  test("forwards with the real key and the forced model, records usage and an ATIF trajectory; a closed session's token gets 401 JSON", async () => {
    server = await startScriptedModelServer({ apiKey: KEY, models: ["real-model"], handler: (r) => (r.turn === 0 ? { toolCalls: [{ name: "bash", arguments: { command: "ls" } }] } : { content: "done" }) });
    proxy = await startModelProxy({ upstreamBaseUrl: server.baseUrl, apiKey: KEY, apiKeyEnv: "TEST_KEY", model: "real-model" });
    const session = proxy.openSession({ label: "t1" });
    expect(session.token).not.toContain(KEY);
    const first = await call(proxy.tcpBaseUrl, session.token, { model: "gpt-4o", messages: [{ role: "user", content: "hi" }] });
    expect(first.status).toBe(200);
    expect(first.json.choices[0].message.tool_calls[0].function.name).toBe("bash");
    const second = await call(proxy.tcpBaseUrl, session.token, {
      model: "gpt-4o",
      messages: [{ role: "user", content: "hi" }, first.json.choices[0].message, { role: "tool", tool_call_id: "x", content: "a b" }],
    });
    expect(second.json.choices[0].message.content).toBe("done");
    expect(server.requests.map((r) => r.headers.authorization)).toEqual([`Bearer ${KEY}`, `Bearer ${KEY}`]);
    expect(server.requests.map((r) => r.model)).toEqual(["real-model", "real-model"]);
    const totals = server.totals();
    expect(session.usage()).toEqual({ inputTokens: totals.inputTokens, outputTokens: totals.outputTokens, requests: 2, retries: 0 });
    const trajectory = session.trajectory() as { steps: { tool_calls?: unknown[]; metrics: unknown; extra: { request: Record<string, unknown> } }[] };
    expect(trajectory).toMatchObject({ schema_version: "ATIF-v1.4", session_id: "t1", final_metrics: { total_prompt_tokens: totals.inputTokens, total_steps: 2 } });
    expect(trajectory.steps[0]?.tool_calls).toEqual([{ tool_call_id: expect.any(String), function_name: "bash", arguments: { command: "ls" } }]);
    expect(trajectory.steps[0]?.extra.request).toMatchObject({ requested_model: "gpt-4o", reused_messages: 0 });
    expect(trajectory.steps[1]?.extra.request).toMatchObject({ message_count: 3, reused_messages: 1 });

    session.close();
    const after = await call(proxy.tcpBaseUrl, session.token, { messages: [{ role: "user", content: "again" }] });
    expect(after.status).toBe(401);
    expect(after.json.error.code).toBe("invalid_api_key");
    expect((await call(proxy.tcpBaseUrl, "guess", { messages: [] })).status).toBe(401);
    expect(server.requests).toHaveLength(2);
  });

  test("the token budget answers 402 budget_exceeded (not retryable) and stops the session; stream: true is refused", async () => {
    server = await startScriptedModelServer({ handler: () => ({ content: "x", usage: { promptTokens: 60, completionTokens: 10 } }) });
    proxy = await startModelProxy({ upstreamBaseUrl: server.baseUrl, model: "m" });
    const session = proxy.openSession({ budgetTokens: 200 });
    const streamed = await call(proxy.tcpBaseUrl, session.token, { stream: true, messages: [{ role: "user", content: "s" }] });
    expect(streamed).toMatchObject({ status: 400, json: { error: { code: "stream_unsupported" } } });
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

  test("a rejected key is fatal and never echoed: the upstream's 401 (which repeats the key) becomes a 502 without it", async () => {
    server = await startScriptedModelServer({
      handler: () => ({ content: "unused" }),
      faults: [{ status: 401, body: { error: { message: `Incorrect API key provided: ${KEY}` } } }, { status: 500, body: `boom ${KEY}` }],
    });
    proxy = await startModelProxy({ upstreamBaseUrl: server.baseUrl, apiKey: KEY, apiKeyEnv: "TEST_KEY", model: "m" });
    const session = proxy.openSession();
    const denied = await call(proxy.tcpBaseUrl, session.token, { messages: [{ role: "user", content: "a" }] });
    expect(denied.status).toBe(502);
    expect(denied.text).not.toContain(KEY);
    expect(denied.text).toContain("$TEST_KEY");
    expect(session.fatal).toMatch(/answered 401 to Proctor's key from \$TEST_KEY/);
    const failed = await call(proxy.tcpBaseUrl, session.token, { messages: [{ role: "user", content: "b" }] });
    expect(failed.status).toBe(500);
    expect(failed.text).toBe("boom [redacted]");
    expect(JSON.stringify(session.trajectory())).not.toContain(KEY);
    expect(session.usage().retries).toBe(1);
  });
});
