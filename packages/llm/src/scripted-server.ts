import { createServer, type IncomingHttpHeaders } from "node:http";
import type { AddressInfo } from "node:net";

/** What the scripted server answers one request with. */
export type ScriptedReply =
  /** A completion calling tools; `arguments` may be an object (sent as JSON) or raw text (malformed on purpose). */
  | { toolCalls: { name: string; arguments: string | Record<string, unknown>; id?: string }[]; content?: string; usage?: ScriptedUsage }
  /** A completion with text and no tool calls (the agent's loop ends). */
  | { content: string; usage?: ScriptedUsage; finishReason?: string }
  /** Any HTTP answer (errors, odd bodies). */
  | { status: number; headers?: Record<string, string>; body?: unknown }
  /** Close the connection without an answer. */
  | { reset: true };

export interface ScriptedUsage {
  promptTokens: number;
  completionTokens: number;
}

export interface ScriptedRequest {
  /** 0-based over every request the server got (faults included). */
  index: number;
  headers: IncomingHttpHeaders;
  body: Record<string, unknown>;
  model: string;
  messages: { role: string; content?: unknown; tool_calls?: unknown; tool_call_id?: string }[];
  /** Assistant messages already in the conversation: 0 on the first turn. */
  turn: number;
  /** The first user message: tells conversations (tasks) apart. */
  conversation: string;
}

export interface ScriptedServerOptions {
  /** Decides each answer once `faults` are used up. */
  handler: (request: ScriptedRequest) => ScriptedReply | Promise<ScriptedReply>;
  /** Answers given first, in order, to whatever requests arrive (429s, 500s, resets...). */
  faults?: ScriptedReply[];
  /** When set, requests without `Authorization: Bearer <apiKey>` get 401. */
  apiKey?: string;
  /** When set, requests naming another model get 404 model_not_found (as vLLM does). */
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
  totals(): { requests: number; inputTokens: number; outputTokens: number; errors: number };
  close(): Promise<void>;
}

/** Default usage: a quarter of the request's message characters in, 10 out. Deterministic. */
function defaultUsage(messages: unknown): ScriptedUsage {
  return { promptTokens: Math.ceil(JSON.stringify(messages).length / 4), completionTokens: 10 };
}

/**
 * An OpenAI-compatible chat-completions server for tests: real HTTP on 127.0.0.1, answers
 * from a script. `POST /v1/chat/completions` only; `GET /v1/models` lists `models`.
 */
export async function startScriptedModelServer(options: ScriptedServerOptions): Promise<ScriptedServer> {
  const requests: ScriptedRequest[] = [];
  const faults = [...(options.faults ?? [])];
  const totals = { requests: 0, inputTokens: 0, outputTokens: 0, errors: 0 };
  let id = 0;
  let received = 0;

  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      void (async () => {
        const send = (status: number, body: unknown, headers: Record<string, string> = {}) => {
          const text = typeof body === "string" ? body : JSON.stringify(body);
          res.writeHead(status, { "content-type": "application/json", ...headers });
          res.end(text);
        };
        if (req.method === "GET" && req.url === "/v1/models") {
          return send(200, { object: "list", data: (options.models ?? []).map((m) => ({ id: m, object: "model" })) });
        }
        if (req.method !== "POST" || req.url !== "/v1/chat/completions") return send(404, { error: { message: `no route ${req.method} ${req.url}` } });
        let body: Record<string, unknown>;
        try {
          body = JSON.parse(Buffer.concat(chunks).toString("utf8")) as Record<string, unknown>;
        } catch {
          return send(400, { error: { message: "body is not JSON" } });
        }
        const messages = (Array.isArray(body.messages) ? body.messages : []) as ScriptedRequest["messages"];
        const firstUser = messages.find((m) => m.role === "user");
        const request: ScriptedRequest = {
          index: received++,
          headers: req.headers,
          body,
          model: String(body.model ?? ""),
          messages,
          turn: messages.filter((m) => m.role === "assistant").length,
          conversation: typeof firstUser?.content === "string" ? firstUser.content : "",
        };
        if (options.keepRequests !== false) requests.push(request);
        if (options.apiKey !== undefined && req.headers.authorization !== `Bearer ${options.apiKey}`) {
          totals.errors++;
          return send(401, { error: { message: "Incorrect API key provided.", type: "invalid_request_error", code: "invalid_api_key" } });
        }
        if (options.models && !options.models.includes(request.model)) {
          totals.errors++;
          return send(404, { error: { message: `The model \`${request.model}\` does not exist.`, type: "NotFoundError", code: "model_not_found" } });
        }
        const reply = faults.shift() ?? (await options.handler(request));
        if ("reset" in reply) {
          totals.errors++;
          req.socket.destroy();
          return;
        }
        if ("status" in reply) {
          totals.errors++;
          return send(reply.status, reply.body ?? { error: { message: `scripted ${reply.status}` } }, reply.headers);
        }
        const usage = reply.usage ?? defaultUsage(messages);
        totals.requests++;
        totals.inputTokens += usage.promptTokens;
        totals.outputTokens += usage.completionTokens;
        const toolCalls =
          "toolCalls" in reply
            ? reply.toolCalls.map((call, i) => ({
                id: call.id ?? `call_${request.index}_${i}`,
                type: "function",
                function: { name: call.name, arguments: typeof call.arguments === "string" ? call.arguments : JSON.stringify(call.arguments) },
              }))
            : undefined;
        return send(200, {
          id: `chatcmpl-${++id}`,
          object: "chat.completion",
          created: Math.floor(Date.now() / 1000),
          model: request.model,
          choices: [
            {
              index: 0,
              message: { role: "assistant", content: reply.content ?? null, ...(toolCalls ? { tool_calls: toolCalls } : {}) },
              finish_reason: toolCalls ? "tool_calls" : ("finishReason" in reply && reply.finishReason) || "stop",
            },
          ],
          usage: { prompt_tokens: usage.promptTokens, completion_tokens: usage.completionTokens, total_tokens: usage.promptTokens + usage.completionTokens },
        });
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
