import { createServer, type IncomingHttpHeaders, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { inputsOf, protocolOfPath, type WireProtocol } from "./wire";

/** What the scripted server answers one request with. */
export type ScriptedReply =
  /** A completion calling tools; `arguments` may be an object (sent as JSON) or raw text (malformed on purpose). */
  | { toolCalls: { name: string; arguments: string | Record<string, unknown>; id?: string }[]; content?: string; usage?: ScriptedUsage }
  /** A completion with text and no tool calls (the agent's loop ends). */
  | { content: string; usage?: ScriptedUsage; finishReason?: string }
  /** Any HTTP answer (errors, odd bodies). */
  | { status: number; headers?: Record<string, string>; body?: unknown }
  /** Close the connection without an answer. */
  | { reset: true }
  /** A streamed answer (of `reply`) that breaks off after `afterEvents` events: the connection is destroyed mid-stream. */
  | { cut: { afterEvents: number; reply?: ScriptedReply } };

export interface ScriptedUsage {
  /** Prompt tokens, cached ones included. */
  promptTokens: number;
  completionTokens: number;
  /** Of promptTokens, served from the cache. Default 0. */
  cachedTokens?: number;
  /** Of promptTokens, written to the cache (Anthropic's cache_creation_input_tokens; Chat Completions' prompt_tokens_details.cache_write_tokens). Default 0. */
  cacheWriteTokens?: number;
}

export interface ScriptedRequest {
  /** 0-based over every request the server got (faults included). */
  index: number;
  /** Which API the request came in on. */
  protocol: WireProtocol;
  /** True for Anthropic's /v1/messages/count_tokens (answered without the handler). */
  countTokens: boolean;
  path: string;
  headers: IncomingHttpHeaders;
  body: Record<string, unknown>;
  model: string;
  stream: boolean;
  /** Chat Completions / Anthropic: the messages; Responses: the input items. */
  messages: { role?: string; type?: string; content?: unknown; tool_calls?: unknown; tool_call_id?: string }[];
  /** Model answers already in the conversation: 0 on the first turn. */
  turn: number;
  /** The first user message's text (Chat Completions: tells conversations, i.e. tasks, apart). */
  conversation: string;
  /** Every user message's text, joined by newlines (the instruction is among them in every protocol). */
  userText: string;
  /** Tool results in the request, oldest first. */
  toolResults: { callId: string; content: string }[];
}

export interface ScriptedServerOptions {
  /** Decides each answer once `faults` are used up. */
  handler: (request: ScriptedRequest) => ScriptedReply | Promise<ScriptedReply>;
  /** Answers given first, in order, to whatever requests arrive (429s, 500s, resets...). */
  faults?: ScriptedReply[];
  /** When set, requests without the key (`Authorization: Bearer`, or `x-api-key` on /v1/messages) get 401. */
  apiKey?: string;
  /** When set, requests naming another model get 404 (as vLLM and the providers do). */
  models?: string[];
  /** false: keep no request in `requests` (a long benchmark would otherwise hold every conversation). Default true. */
  keepRequests?: boolean;
  /** Address to listen on. Default 127.0.0.1 (`baseUrl` always names 127.0.0.1). */
  host?: string;
}

export interface ScriptedServer {
  /** e.g. http://127.0.0.1:41234/v1 */
  baseUrl: string;
  /** Every request received, in order. */
  requests: ScriptedRequest[];
  /** Totals over the completions it served (200s): what a client's usage must add up to. */
  totals(): { requests: number; inputTokens: number; outputTokens: number; cachedTokens: number; errors: number };
  close(): Promise<void>;
}

/** Default usage: a quarter of the request's message characters in, 10 out. Deterministic. */
function defaultUsage(messages: unknown): ScriptedUsage {
  return { promptTokens: Math.ceil(JSON.stringify(messages).length / 4), completionTokens: 10 };
}

type Answer = Extract<ScriptedReply, { content: string } | { toolCalls: unknown[] }>;
type Call = { id: string; name: string; arguments: string };

function turnOf(protocol: WireProtocol, items: ScriptedRequest["messages"]): number {
  if (protocol === "openai-responses") return items.filter((m) => m.type === "function_call" || m.type === "custom_tool_call" || (m.type === "message" && m.role === "assistant") || (m.type === undefined && m.role === "assistant")).length;
  return items.filter((m) => m.role === "assistant").length;
}

function textOf(content: unknown): string {
  if (typeof content === "string") return content;
  if (!Array.isArray(content)) return "";
  return content.map((p) => (p && typeof p === "object" && typeof (p as { text?: unknown }).text === "string" ? (p as { text: string }).text : "")).join("\n");
}

/** The events of one streamed answer, in the protocol's own format (each a full `event:`/`data:` block). */
function streamEvents(protocol: WireProtocol, model: string, id: number, reply: Answer, calls: Call[] | undefined, usage: ScriptedUsage, includeChatUsage: boolean): string[] {
  const sse = (type: string | null, data: unknown) => `${type ? `event: ${type}\n` : ""}data: ${typeof data === "string" ? data : JSON.stringify(data)}\n\n`;
  const cached = usage.cachedTokens ?? 0;
  const written = usage.cacheWriteTokens ?? 0;
  const text = reply.content ?? "";
  if (protocol === "anthropic-messages") {
    const events = [sse("message_start", { type: "message_start", message: { id: `msg_${id}`, type: "message", role: "assistant", model, content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: usage.promptTokens - cached - written, cache_read_input_tokens: cached, cache_creation_input_tokens: written, output_tokens: 1 } } })];
    let index = 0;
    if (text !== "") {
      events.push(sse("content_block_start", { type: "content_block_start", index, content_block: { type: "text", text: "" } }));
      events.push(sse("content_block_delta", { type: "content_block_delta", index, delta: { type: "text_delta", text } }));
      events.push(sse("content_block_stop", { type: "content_block_stop", index }));
      index++;
    }
    for (const call of calls ?? []) {
      events.push(sse("content_block_start", { type: "content_block_start", index, content_block: { type: "tool_use", id: call.id, name: call.name, input: {} } }));
      const half = Math.ceil(call.arguments.length / 2);
      events.push(sse("content_block_delta", { type: "content_block_delta", index, delta: { type: "input_json_delta", partial_json: call.arguments.slice(0, half) } }));
      events.push(sse("content_block_delta", { type: "content_block_delta", index, delta: { type: "input_json_delta", partial_json: call.arguments.slice(half) } }));
      events.push(sse("content_block_stop", { type: "content_block_stop", index }));
      index++;
    }
    events.push(sse("message_delta", { type: "message_delta", delta: { stop_reason: calls ? "tool_use" : "end_turn", stop_sequence: null }, usage: { output_tokens: usage.completionTokens } }));
    events.push(sse("message_stop", { type: "message_stop" }));
    return events;
  }
  if (protocol === "openai-responses") {
    const items: Record<string, unknown>[] = [];
    if (text !== "") items.push({ type: "message", id: `msg_${id}`, role: "assistant", status: "completed", content: [{ type: "output_text", text, annotations: [] }] });
    for (const call of calls ?? []) items.push({ type: "function_call", id: `fc_${call.id}`, call_id: call.id, name: call.name, arguments: call.arguments, status: "completed" });
    const response = { id: `resp_${id}`, object: "response", created_at: Math.floor(Date.now() / 1000), model, status: "in_progress", output: [] as unknown[] };
    const events = [sse("response.created", { type: "response.created", sequence_number: 0, response })];
    items.forEach((item, output_index) => {
      events.push(sse("response.output_item.added", { type: "response.output_item.added", output_index, item: { ...item, status: "in_progress" } }));
      if (item.type === "message") events.push(sse("response.output_text.delta", { type: "response.output_text.delta", output_index, content_index: 0, item_id: item.id, delta: text }));
      events.push(sse("response.output_item.done", { type: "response.output_item.done", output_index, item }));
    });
    const usageJson = { input_tokens: usage.promptTokens, input_tokens_details: { cached_tokens: cached }, output_tokens: usage.completionTokens, output_tokens_details: { reasoning_tokens: 0 }, total_tokens: usage.promptTokens + usage.completionTokens };
    events.push(sse("response.completed", { type: "response.completed", response: { ...response, status: "completed", output: items, usage: usageJson } }));
    return events;
  }
  const chunk = (delta: unknown, finish: string | null) => ({ id: `chatcmpl-${id}`, object: "chat.completion.chunk", created: Math.floor(Date.now() / 1000), model, choices: [{ index: 0, delta, finish_reason: finish }] });
  const events = [sse(null, chunk({ role: "assistant", content: "" }, null))];
  if (text !== "") events.push(sse(null, chunk({ content: text }, null)));
  (calls ?? []).forEach((call, index) => {
    const half = Math.ceil(call.arguments.length / 2);
    events.push(sse(null, chunk({ tool_calls: [{ index, id: call.id, type: "function", function: { name: call.name, arguments: call.arguments.slice(0, half) } }] }, null)));
    events.push(sse(null, chunk({ tool_calls: [{ index, function: { arguments: call.arguments.slice(half) } }] }, null)));
  });
  events.push(sse(null, chunk({}, calls ? "tool_calls" : ("finishReason" in reply && reply.finishReason) || "stop")));
  if (includeChatUsage) {
    events.push(sse(null, { id: `chatcmpl-${id}`, object: "chat.completion.chunk", created: Math.floor(Date.now() / 1000), model, choices: [], usage: { prompt_tokens: usage.promptTokens, completion_tokens: usage.completionTokens, total_tokens: usage.promptTokens + usage.completionTokens, prompt_tokens_details: { cached_tokens: cached, ...(written > 0 ? { cache_write_tokens: written } : {}) } } }));
  }
  events.push(sse(null, "[DONE]"));
  return events;
}

/** A whole (non-streamed) answer body in the protocol's format. */
function jsonAnswer(protocol: WireProtocol, model: string, id: number, reply: Answer, calls: Call[] | undefined, usage: ScriptedUsage): unknown {
  const cached = usage.cachedTokens ?? 0;
  const written = usage.cacheWriteTokens ?? 0;
  const text = reply.content ?? "";
  if (protocol === "anthropic-messages") {
    return {
      id: `msg_${id}`,
      type: "message",
      role: "assistant",
      model,
      content: [...(text !== "" ? [{ type: "text", text }] : []), ...(calls ?? []).map((c) => ({ type: "tool_use", id: c.id, name: c.name, input: JSON.parse(c.arguments) as unknown }))],
      stop_reason: calls ? "tool_use" : "end_turn",
      stop_sequence: null,
      usage: { input_tokens: usage.promptTokens - cached - written, cache_read_input_tokens: cached, cache_creation_input_tokens: written, output_tokens: usage.completionTokens },
    };
  }
  if (protocol === "openai-responses") {
    return {
      id: `resp_${id}`,
      object: "response",
      status: "completed",
      model,
      output: [
        ...(text !== "" ? [{ type: "message", id: `msg_${id}`, role: "assistant", status: "completed", content: [{ type: "output_text", text, annotations: [] }] }] : []),
        ...(calls ?? []).map((c) => ({ type: "function_call", id: `fc_${c.id}`, call_id: c.id, name: c.name, arguments: c.arguments, status: "completed" })),
      ],
      usage: { input_tokens: usage.promptTokens, input_tokens_details: { cached_tokens: cached }, output_tokens: usage.completionTokens, total_tokens: usage.promptTokens + usage.completionTokens },
    };
  }
  return {
    id: `chatcmpl-${id}`,
    object: "chat.completion",
    created: Math.floor(Date.now() / 1000),
    model,
    choices: [
      {
        index: 0,
        message: { role: "assistant", content: reply.content ?? null, ...(calls ? { tool_calls: calls.map((c) => ({ id: c.id, type: "function", function: { name: c.name, arguments: c.arguments } })) } : {}) },
        finish_reason: calls ? "tool_calls" : ("finishReason" in reply && reply.finishReason) || "stop",
      },
    ],
    usage: { prompt_tokens: usage.promptTokens, completion_tokens: usage.completionTokens, total_tokens: usage.promptTokens + usage.completionTokens, ...(cached > 0 || written > 0 ? { prompt_tokens_details: { cached_tokens: cached, ...(written > 0 ? { cache_write_tokens: written } : {}) } } : {}) },
  };
}

/**
 * A model server for tests speaking the three APIs the model proxy serves: real HTTP on
 * 127.0.0.1, answers from a script. `POST /v1/chat/completions`, `/v1/responses`,
 * `/v1/messages` (+ `/v1/messages/count_tokens`), each streamed when the request says
 * `stream: true`; `GET /v1/models` lists `models`.
 */
export async function startScriptedModelServer(options: ScriptedServerOptions): Promise<ScriptedServer> {
  const requests: ScriptedRequest[] = [];
  const faults = [...(options.faults ?? [])];
  const totals = { requests: 0, inputTokens: 0, outputTokens: 0, cachedTokens: 0, errors: 0 };
  let id = 0;
  let received = 0;

  const answer = async (res: ServerResponse, request: ScriptedRequest, reply: ScriptedReply, cutAfter: number | null): Promise<void> => {
    const send = (status: number, body: unknown, headers: Record<string, string> = {}) => {
      res.writeHead(status, { "content-type": "application/json", ...headers });
      res.end(typeof body === "string" ? body : JSON.stringify(body));
    };
    if ("reset" in reply) {
      totals.errors++;
      res.socket?.destroy();
      return;
    }
    if ("cut" in reply) return answer(res, request, reply.cut.reply ?? { content: "this answer is cut off" }, reply.cut.afterEvents);
    if ("status" in reply) {
      totals.errors++;
      const body = reply.body ?? (request.protocol === "anthropic-messages" ? { type: "error", error: { type: "api_error", message: `scripted ${reply.status}` } } : { error: { message: `scripted ${reply.status}` } });
      return send(reply.status, body, reply.headers);
    }
    const usage = reply.usage ?? defaultUsage(request.messages);
    const n = ++id;
    const calls = "toolCalls" in reply ? reply.toolCalls.map((call, i) => ({ id: call.id ?? `call_${request.index}_${i}`, name: call.name, arguments: typeof call.arguments === "string" ? call.arguments : JSON.stringify(call.arguments) })) : undefined;
    if (!request.stream) {
      totals.requests++;
      totals.inputTokens += usage.promptTokens;
      totals.outputTokens += usage.completionTokens;
      totals.cachedTokens += usage.cachedTokens ?? 0;
      return send(200, jsonAnswer(request.protocol, request.model, n, reply, calls, usage));
    }
    const includeUsage = Boolean((request.body.stream_options as { include_usage?: boolean } | undefined)?.include_usage);
    const events = streamEvents(request.protocol, request.model, n, reply, calls, usage, includeUsage);
    res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" });
    for (const [i, event] of events.entries()) {
      if (cutAfter !== null && i >= cutAfter) {
        totals.errors++;
        // Let what was written leave first, then break the connection without ending the body.
        await new Promise((r) => setTimeout(r, 20));
        res.socket?.destroy();
        return;
      }
      res.write(event);
    }
    totals.requests++;
    totals.inputTokens += usage.promptTokens;
    totals.outputTokens += usage.completionTokens;
    totals.cachedTokens += usage.cachedTokens ?? 0;
    res.end();
  };

  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      void (async () => {
        const send = (status: number, body: unknown, headers: Record<string, string> = {}) => {
          res.writeHead(status, { "content-type": "application/json", ...headers });
          res.end(typeof body === "string" ? body : JSON.stringify(body));
        };
        const path = (req.url ?? "").split("?")[0] ?? "";
        if (req.method === "GET" && path === "/v1/models") {
          return send(200, { object: "list", data: (options.models ?? []).map((m) => ({ id: m, object: "model" })) });
        }
        const route = req.method === "POST" ? protocolOfPath(path) : null;
        if (!route || !path.startsWith("/v1/")) return send(404, { error: { message: `no route ${req.method} ${req.url}` } });
        let body: Record<string, unknown>;
        try {
          body = JSON.parse(Buffer.concat(chunks).toString("utf8")) as Record<string, unknown>;
        } catch {
          return send(400, { error: { message: "body is not JSON" } });
        }
        const { protocol } = route;
        const raw = protocol === "openai-responses" ? (typeof body.input === "string" ? [{ role: "user", content: body.input }] : body.input) : body.messages;
        const messages = (Array.isArray(raw) ? raw : []) as ScriptedRequest["messages"];
        const inputs = inputsOf(protocol, messages);
        const firstUser = messages.find((m) => m.role === "user");
        const request: ScriptedRequest = {
          index: received++,
          protocol,
          countTokens: route.countTokens,
          path,
          headers: req.headers,
          body,
          model: String(body.model ?? ""),
          stream: body.stream === true,
          messages,
          turn: turnOf(protocol, messages),
          conversation: firstUser ? textOf(firstUser.content) : "",
          userText: inputs.userTexts.join("\n"),
          toolResults: inputs.toolResults,
        };
        if (options.keepRequests !== false) requests.push(request);
        const key = protocol === "anthropic-messages" ? req.headers["x-api-key"] : /^Bearer (.*)$/.exec(req.headers.authorization ?? "")?.[1];
        if (options.apiKey !== undefined && key !== options.apiKey) {
          totals.errors++;
          if (protocol === "anthropic-messages") return send(401, { type: "error", error: { type: "authentication_error", message: "invalid x-api-key" } });
          return send(401, { error: { message: "Incorrect API key provided.", type: "invalid_request_error", code: "invalid_api_key" } });
        }
        if (options.models && !options.models.includes(request.model)) {
          totals.errors++;
          if (protocol === "anthropic-messages") return send(404, { type: "error", error: { type: "not_found_error", message: `model: ${request.model}` } });
          return send(404, { error: { message: `The model \`${request.model}\` does not exist.`, type: "NotFoundError", code: "model_not_found" } });
        }
        if (route.countTokens) return send(200, { input_tokens: defaultUsage(messages).promptTokens });
        const reply = faults.shift() ?? (await options.handler(request));
        await answer(res, request, reply, null);
      })().catch((error: unknown) => {
        if (!res.headersSent) res.writeHead(500, { "content-type": "application/json" });
        res.end(JSON.stringify({ error: { message: `scripted server handler failed: ${(error as Error).message}` } }));
      });
    });
  });
  await new Promise<void>((resolve) => server.listen(0, options.host ?? "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    baseUrl: `http://127.0.0.1:${port}/v1`,
    requests,
    totals: () => ({ ...totals }),
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
