import { afterEach, describe, expect, test } from "vitest";
import { OpenAIChatModel, type OpenAIChatModelOptions } from "./client";
import { LlmAuthError, LlmContextLengthError, LlmModelNotFoundError, LlmRetriesExhaustedError, LlmUnreachableError } from "./errors";
import { createServer } from "node:net";
import type { Clock } from "./retry";
import { startScriptedModelServer, type ScriptedServer, type ScriptedServerOptions } from "./scripted-server";

const KEY = "sk-test-SECRET-4f9a2c";
let server: ScriptedServer | null = null;
afterEach(async () => {
  await server?.close();
  server = null;
});

/** A clock whose sleeps return at once and move time forward, recording each wait. */
function fakeClock(): Clock & { sleeps: number[] } {
  let now = Date.parse("2025-01-01T00:00:00Z");
  const sleeps: number[] = [];
  return {
    sleeps,
    now: () => now,
    sleep: async (ms) => {
      sleeps.push(ms);
      now += ms;
    },
  };
}

async function setup(server_: ScriptedServerOptions, client: Partial<OpenAIChatModelOptions> = {}) {
  server = await startScriptedModelServer(server_);
  return new OpenAIChatModel({ baseUrl: server.baseUrl, model: "m", apiKey: KEY, apiKeyEnv: "TEST_KEY", ...client });
}

const hello = { messages: [{ role: "user" as const, content: "hi" }] };

describe("OpenAIChatModel", () => {
  test("sends model, messages, tools, tool_choice, temperature and max_tokens with the bearer key; parses tool calls and usage", async () => {
    const model = await setup({ handler: () => ({ toolCalls: [{ name: "bash", arguments: { command: "ls" } }], usage: { promptTokens: 12, completionTokens: 3 } }) });
    const tools = [{ type: "function" as const, function: { name: "bash", description: "run", parameters: { type: "object" } } }];
    const result = await model.complete({ ...hello, tools, temperature: 0.2, maxOutputTokens: 100 });
    expect(result.message.tool_calls?.[0]?.function).toEqual({ name: "bash", arguments: '{"command":"ls"}' });
    expect(result.usage).toEqual({ inputTokens: 12, outputTokens: 3 });
    expect(result.retries).toBe(0);
    const sent = server?.requests[0];
    expect(sent?.headers.authorization).toBe(`Bearer ${KEY}`);
    expect(sent?.body).toMatchObject({ model: "m", tool_choice: "auto", temperature: 0.2, max_tokens: 100, tools });
  });

  test("durationMs is the call's real round trip (performance.now, not the retry clock); a server told keepRequests: false keeps none but still counts and numbers them", async () => {
    const model = await setup({ keepRequests: false, handler: (r) => ({ toolCalls: [{ name: "bash", arguments: { command: `echo ${r.index}` } }] }) });
    const started = performance.now();
    const first = await model.complete(hello);
    const elapsed = performance.now() - started;
    const second = await model.complete(hello);
    expect(first.durationMs).toBeGreaterThan(0);
    expect(first.durationMs).toBeLessThanOrEqual(elapsed + 0.001);
    expect(JSON.parse(second.message.tool_calls?.[0]?.function.arguments ?? "{}")).toEqual({ command: "echo 1" });
    expect(server?.requests).toEqual([]);
    expect(server?.totals().requests).toBe(2);
  });

  test("429 with Retry-After in seconds, then success: waits what the server asked (real time)", async () => {
    const model = await setup({ faults: [{ status: 429, headers: { "retry-after": "1" } }], handler: () => ({ content: "ok" }) });
    const started = Date.now();
    const result = await model.complete(hello);
    expect(result.message.content).toBe("ok");
    expect(result.retries).toBe(1);
    expect(Date.now() - started).toBeGreaterThanOrEqual(950);
    expect(server?.requests).toHaveLength(2);
  });

  test("Retry-After as an HTTP date and retry-after-ms are honoured; 500s and connection resets are retried with growing backoff", async () => {
    const clock = fakeClock();
    const date = new Date(clock.now() + 30_000).toUTCString();
    const model = await setup(
      {
        faults: [
          { status: 429, headers: { "retry-after": date } },
          { status: 503, headers: { "retry-after-ms": "1500" } },
          { status: 500 },
          { reset: true },
          { status: 502 },
        ],
        handler: () => ({ content: "ok" }),
      },
      { clock, random: () => 1 },
    );
    const result = await model.complete(hello);
    expect(result.retries).toBe(5);
    expect(clock.sleeps[0]).toBeGreaterThanOrEqual(29_000);
    expect(clock.sleeps[0]).toBeLessThanOrEqual(30_000);
    expect(clock.sleeps[1]).toBe(1500);
    // Backoff for retries 3, 4, 5 with jitter at its top: 4 s, 8 s, 16 s.
    expect(clock.sleeps.slice(2)).toEqual([4000, 8000, 16_000]);
  });

  test("gives up after the attempt budget with the last status, never the key", async () => {
    const clock = fakeClock();
    const model = await setup({ handler: () => ({ status: 500, body: { error: { message: `boom ${KEY}` } } }) }, { clock, retry: { maxAttempts: 3 } });
    const error = await model.complete(hello).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(LlmRetriesExhaustedError);
    expect(error).toMatchObject({ statusCode: 500, attempts: 3 });
    expect((error as Error).message).not.toContain(KEY);
    expect((error as Error).message).toContain("[redacted]");
  });

  test("a Retry-After beyond the elapsed budget gives up at once instead of sleeping past it", async () => {
    const clock = fakeClock();
    const model = await setup({ handler: () => ({ status: 429, headers: { "retry-after": "100" } }) }, { clock, retry: { maxElapsedMs: 60_000, maxRetryAfterMs: 600_000 } });
    await expect(model.complete(hello)).rejects.toBeInstanceOf(LlmRetriesExhaustedError);
    expect(clock.sleeps).toEqual([]);
  });

  test("an endpoint that never answered and refuses connections is LlmUnreachableError after 3 quick attempts, naming the URL", async () => {
    const port = await new Promise<number>((done) => {
      const s = createServer().listen(0, "127.0.0.1", () => {
        const p = (s.address() as { port: number }).port;
        s.close(() => done(p));
      });
    });
    const clock = fakeClock();
    const model = new OpenAIChatModel({ baseUrl: `http://127.0.0.1:${port}/v1`, model: "m", clock, random: () => 1 });
    const error = await model.complete(hello).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(LlmUnreachableError);
    expect((error as Error).message).toBe(`http://127.0.0.1:${port}/v1/chat/completions (model m) cannot be reached (ECONNREFUSED, 3 attempts): is the model server running there? Check --base-url`);
    // Quick retries (at most 1 s each), not the rate-limit backoff.
    expect(clock.sleeps).toEqual([1000, 1000]);
  });

  test("401 is LlmAuthError naming URL, model and env var, never the key (even when the server echoes it)", async () => {
    const model = await setup({ apiKey: "the-right-key", handler: () => ({ content: "x" }) });
    const error = await model.complete(hello).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(LlmAuthError);
    const message = (error as Error).message;
    expect(message).toContain(server?.baseUrl ?? "?");
    expect(message).toContain('"m"');
    expect(message).toContain("$TEST_KEY");
    expect(message).not.toContain(KEY);
    expect(server?.requests).toHaveLength(1);
  });

  test("an unknown model is LlmModelNotFoundError; a context overflow is LlmContextLengthError; neither is retried", async () => {
    const unknown = await setup({ models: ["other"], handler: () => ({ content: "x" }) });
    await expect(unknown.complete(hello)).rejects.toBeInstanceOf(LlmModelNotFoundError);
    await server?.close();
    const long = await setup({
      handler: () => ({ status: 400, body: { error: { message: "This model's maximum context length is 8192 tokens.", code: "context_length_exceeded" } } }),
    });
    await expect(long.complete(hello)).rejects.toBeInstanceOf(LlmContextLengthError);
    expect(server?.requests).toHaveLength(1);
  });

  test("the in-flight limit shrinks while 429s arrive and grows back after", async () => {
    let inFlight = 0;
    let peak = 0;
    let rateLimited = true;
    const peaks: number[] = [];
    const model = await setup(
      {
        handler: async () => {
          inFlight++;
          peak = Math.max(peak, inFlight);
          await new Promise((r) => setTimeout(r, 20));
          inFlight--;
          return rateLimited ? { status: 429, headers: { "retry-after-ms": "30" } } : { content: "ok" };
        },
      },
      { maxConcurrency: 8, rateLimitCooldownMs: 50 },
    );
    const batch = () => Promise.all(Array.from({ length: 16 }, () => model.complete(hello)));
    const first = batch();
    // The limit comes down while 429s arrive (polled: on a loaded machine the first 429s come late),
    // and the requests let in before it did finish.
    const settled = () => model.limiter.stats().limit <= 2 && model.limiter.stats().inFlight <= model.limiter.stats().limit;
    const deadline = Date.now() + 10_000;
    while (!settled() && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    expect(model.limiter.stats().limit).toBeLessThanOrEqual(2);
    expect(model.limiter.stats().inFlight).toBeLessThanOrEqual(2);
    peak = 0;
    await new Promise((r) => setTimeout(r, 200));
    peaks.push(peak); // while 429s still arrive
    rateLimited = false;
    await first;
    // Successes grow the limit back to the maximum.
    for (let i = 0; i < 6 && model.limiter.stats().limit < 8; i++) await batch();
    expect(peaks[0]).toBeLessThanOrEqual(2);
    expect(model.limiter.stats().limit).toBe(8);
    peak = 0;
    await batch();
    expect(peak).toBeGreaterThan(4);
  });

  test("aborting stops a retry wait at once", async () => {
    const model = await setup({ handler: () => ({ status: 429, headers: { "retry-after": "30" } }) });
    const controller = new AbortController();
    setTimeout(() => controller.abort(new Error("stop")), 100);
    const started = Date.now();
    await expect(model.complete(hello, { signal: controller.signal })).rejects.toThrow("stop");
    expect(Date.now() - started).toBeLessThan(5000);
  });
});
