/**
 * The three wire protocols the model proxy speaks, as far as the proxy needs them: where a
 * request's conversation is, what a response said (text, reasoning, tool calls, usage), both
 * for a JSON body and for a stream of server-sent events. Pure functions, no I/O.
 */

/** Anthropic Messages (`/v1/messages`), OpenAI Responses (`/v1/responses`), OpenAI Chat Completions (`/v1/chat/completions`). */
export type WireProtocol = "anthropic-messages" | "openai-responses" | "openai-chat";

export const WIRE_PROTOCOLS: readonly WireProtocol[] = ["anthropic-messages", "openai-responses", "openai-chat"];

/** Token counts of one response. `input` includes cached and cache-written input tokens. */
export interface WireUsage {
  input: number;
  output: number;
  /** Input tokens served from the provider's prompt cache. */
  cacheRead: number;
  /** Input tokens written to the prompt cache (Anthropic's cache_creation_input_tokens). */
  cacheWrite: number;
}

export interface WireToolCall {
  id: string;
  name: string;
  /** Parsed arguments; text that is not a JSON object is kept as `{ _raw: "<text>" }`. */
  arguments: Record<string, unknown>;
}

/** What one model response said. */
export interface WireReply {
  text: string;
  reasoning: string;
  toolCalls: WireToolCall[];
  usage: WireUsage | null;
  stopReason: string | null;
}

/** What the agent sent that the model had not seen in the conversation's previous request. */
export interface WireInputs {
  /** Text of user messages. */
  userTexts: string[];
  /** Tool results, by the id of the call they answer. */
  toolResults: { callId: string; content: string }[];
}

type Json = Record<string, unknown>;

const isObject = (v: unknown): v is Json => typeof v === "object" && v !== null && !Array.isArray(v);
const num = (v: unknown): number => (typeof v === "number" && Number.isFinite(v) ? v : 0);
const str = (v: unknown): string => (typeof v === "string" ? v : "");

function parseArguments(text: unknown): Record<string, unknown> {
  if (isObject(text)) return text;
  const raw = typeof text === "string" ? text : JSON.stringify(text ?? "");
  try {
    const parsed: unknown = JSON.parse(raw);
    return isObject(parsed) ? parsed : { _raw: raw };
  } catch {
    return { _raw: raw };
  }
}

/** The protocol a request path belongs to (with or without the /v1 prefix), or null. */
export function protocolOfPath(path: string): { protocol: WireProtocol; countTokens: boolean } | null {
  const p = path.replace(/^\/v1(?=\/)/, "");
  if (p === "/messages") return { protocol: "anthropic-messages", countTokens: false };
  if (p === "/messages/count_tokens") return { protocol: "anthropic-messages", countTokens: true };
  if (p === "/responses") return { protocol: "openai-responses", countTokens: false };
  if (p === "/chat/completions") return { protocol: "openai-chat", countTokens: false };
  return null;
}

/** The conversation items of a request body, or null when the body is not a request of this protocol. */
export function conversationOf(protocol: WireProtocol, body: Json): unknown[] | null {
  if (protocol === "openai-responses") {
    if (typeof body.input === "string") return [{ role: "user", content: body.input }];
    return Array.isArray(body.input) ? body.input : null;
  }
  return Array.isArray(body.messages) ? body.messages : null;
}

/** The body sent upstream: the pinned model, and (chat streams) usage asked for so it can be accounted. */
export function pinRequest(protocol: WireProtocol, body: Json, model: string): Json {
  const pinned: Json = { ...body, model };
  if (protocol === "openai-chat" && body.stream === true) {
    pinned.stream_options = { ...(isObject(body.stream_options) ? body.stream_options : {}), include_usage: true };
  }
  return pinned;
}

function contentText(content: unknown): string {
  if (typeof content === "string") return content;
  if (!Array.isArray(content)) return "";
  return content
    .map((part) => (isObject(part) ? str(part.text) || (part.type === "image" || part.type === "input_image" ? "[image]" : "") : ""))
    .filter((t) => t !== "")
    .join("\n");
}

/** User texts and tool results among newly added conversation items. */
export function inputsOf(protocol: WireProtocol, added: readonly unknown[]): WireInputs {
  const inputs: WireInputs = { userTexts: [], toolResults: [] };
  for (const item of added) {
    if (!isObject(item)) continue;
    if (protocol === "anthropic-messages") {
      if (item.role !== "user") continue;
      if (typeof item.content === "string") inputs.userTexts.push(item.content);
      else if (Array.isArray(item.content)) {
        for (const block of item.content) {
          if (!isObject(block)) continue;
          if (block.type === "tool_result") inputs.toolResults.push({ callId: str(block.tool_use_id), content: contentText(block.content) });
          else if (block.type === "text" && str(block.text) !== "") inputs.userTexts.push(str(block.text));
        }
      }
    } else if (protocol === "openai-responses") {
      if (item.type === "function_call_output" || item.type === "custom_tool_call_output" || item.type === "local_shell_call_output") {
        inputs.toolResults.push({ callId: str(item.call_id), content: typeof item.output === "string" ? item.output : contentText(item.output) || JSON.stringify(item.output ?? "") });
      } else if ((item.type === "message" || item.type === undefined) && item.role === "user") {
        const text = contentText(item.content);
        if (text !== "") inputs.userTexts.push(text);
      }
    } else if (item.role === "tool") {
      inputs.toolResults.push({ callId: str(item.tool_call_id), content: contentText(item.content) });
    } else if (item.role === "user") {
      const text = contentText(item.content);
      if (text !== "") inputs.userTexts.push(text);
    }
  }
  return inputs;
}

function usageOf(protocol: WireProtocol, raw: unknown): WireUsage | null {
  if (!isObject(raw)) return null;
  if (protocol === "anthropic-messages") {
    const cacheRead = num(raw.cache_read_input_tokens);
    const cacheWrite = num(raw.cache_creation_input_tokens);
    return { input: num(raw.input_tokens) + cacheRead + cacheWrite, output: num(raw.output_tokens), cacheRead, cacheWrite };
  }
  if (protocol === "openai-responses") {
    const details = isObject(raw.input_tokens_details) ? raw.input_tokens_details : {};
    return { input: num(raw.input_tokens), output: num(raw.output_tokens), cacheRead: num(details.cached_tokens), cacheWrite: 0 };
  }
  const details = isObject(raw.prompt_tokens_details) ? raw.prompt_tokens_details : {};
  return { input: num(raw.prompt_tokens), output: num(raw.completion_tokens), cacheRead: num(details.cached_tokens), cacheWrite: num(details.cache_write_tokens) };
}

const emptyReply = (): WireReply => ({ text: "", reasoning: "", toolCalls: [], usage: null, stopReason: null });

/** Adds one Responses output item (a message, a reasoning summary, a tool call) to a reply. */
function addResponsesItem(reply: WireReply, item: Json): void {
  if (item.type === "message") reply.text += contentText(item.content);
  else if (item.type === "reasoning") reply.reasoning += contentText(item.summary) || contentText(item.content);
  else if (item.type === "function_call") reply.toolCalls.push({ id: str(item.call_id) || str(item.id), name: str(item.name), arguments: parseArguments(item.arguments) });
  else if (item.type === "custom_tool_call") reply.toolCalls.push({ id: str(item.call_id) || str(item.id), name: str(item.name), arguments: { input: str(item.input) } });
  else if (item.type === "local_shell_call") reply.toolCalls.push({ id: str(item.call_id) || str(item.id), name: "local_shell", arguments: isObject(item.action) ? item.action : {} });
}

/** A whole (non-streamed) response body. */
export function replyOf(protocol: WireProtocol, body: unknown): WireReply {
  const reply = emptyReply();
  if (!isObject(body)) return reply;
  if (protocol === "anthropic-messages") {
    for (const block of Array.isArray(body.content) ? body.content : []) {
      if (!isObject(block)) continue;
      if (block.type === "text") reply.text += str(block.text);
      else if (block.type === "thinking") reply.reasoning += str(block.thinking);
      else if (block.type === "tool_use" || block.type === "server_tool_use") reply.toolCalls.push({ id: str(block.id), name: str(block.name), arguments: parseArguments(block.input) });
    }
    reply.usage = usageOf(protocol, body.usage);
    reply.stopReason = typeof body.stop_reason === "string" ? body.stop_reason : null;
  } else if (protocol === "openai-responses") {
    for (const item of Array.isArray(body.output) ? body.output : []) if (isObject(item)) addResponsesItem(reply, item);
    reply.usage = usageOf(protocol, body.usage);
    reply.stopReason = typeof body.status === "string" ? body.status : null;
  } else {
    const choice = Array.isArray(body.choices) && isObject(body.choices[0]) ? body.choices[0] : {};
    const message = isObject(choice.message) ? choice.message : {};
    reply.text = str(message.content);
    reply.reasoning = str(message.reasoning_content) || str(message.reasoning);
    for (const call of Array.isArray(message.tool_calls) ? message.tool_calls : []) {
      if (!isObject(call)) continue;
      const fn = isObject(call.function) ? call.function : {};
      reply.toolCalls.push({ id: str(call.id), name: str(fn.name), arguments: parseArguments(fn.arguments) });
    }
    reply.usage = usageOf(protocol, body.usage);
    reply.stopReason = typeof choice.finish_reason === "string" ? choice.finish_reason : null;
  }
  return reply;
}

/**
 * Builds a reply from a response's server-sent events as they pass. `complete` turns true when
 * the stream's final event arrived (message_stop, response.completed, [DONE]): a stream that
 * ends without it was cut.
 */
export class StreamReply {
  private readonly reply = emptyReply();
  private readonly blocks = new Map<number, { kind: string; id: string; name: string; json: string }>();
  private readonly chatCalls = new Map<number, { id: string; name: string; json: string }>();
  complete = false;
  /** An `error` event's message, if the stream carried one. */
  error: string | null = null;

  constructor(private readonly protocol: WireProtocol) {}

  /** One event: its `data` text (and the `event:` name, which the protocols repeat in data.type). */
  onEvent(data: string): void {
    if (this.protocol === "openai-chat" && data.trim() === "[DONE]") {
      this.complete = true;
      return;
    }
    let event: unknown;
    try {
      event = JSON.parse(data);
    } catch {
      return; // not JSON (a comment, a keep-alive): nothing to record
    }
    if (!isObject(event)) return;
    if (this.protocol === "anthropic-messages") this.onAnthropic(event);
    else if (this.protocol === "openai-responses") this.onResponses(event);
    else this.onChat(event);
  }

  private onAnthropic(event: Json): void {
    switch (event.type) {
      case "message_start": {
        const message = isObject(event.message) ? event.message : {};
        this.reply.usage = usageOf(this.protocol, message.usage);
        break;
      }
      case "content_block_start": {
        const block = isObject(event.content_block) ? event.content_block : {};
        const start = { kind: str(block.type), id: str(block.id), name: str(block.name), json: "" };
        if (block.type === "text") this.reply.text += str(block.text);
        if (block.type === "thinking") this.reply.reasoning += str(block.thinking);
        if ((block.type === "tool_use" || block.type === "server_tool_use") && isObject(block.input) && Object.keys(block.input).length > 0) start.json = JSON.stringify(block.input);
        this.blocks.set(num(event.index), start);
        break;
      }
      case "content_block_delta": {
        const delta = isObject(event.delta) ? event.delta : {};
        if (delta.type === "text_delta") this.reply.text += str(delta.text);
        else if (delta.type === "thinking_delta") this.reply.reasoning += str(delta.thinking);
        else if (delta.type === "input_json_delta") {
          const block = this.blocks.get(num(event.index));
          if (block) block.json += str(delta.partial_json);
        }
        break;
      }
      case "content_block_stop": {
        const block = this.blocks.get(num(event.index));
        if (block && (block.kind === "tool_use" || block.kind === "server_tool_use")) {
          this.reply.toolCalls.push({ id: block.id, name: block.name, arguments: block.json === "" ? {} : parseArguments(block.json) });
        }
        break;
      }
      case "message_delta": {
        const delta = isObject(event.delta) ? event.delta : {};
        if (typeof delta.stop_reason === "string") this.reply.stopReason = delta.stop_reason;
        // message_delta's usage is cumulative; input counts appear here too on some servers.
        if (isObject(event.usage)) {
          const late = usageOf(this.protocol, { ...this.rawAnthropicUsage(), ...event.usage });
          if (late) this.reply.usage = late;
        }
        break;
      }
      case "message_stop":
        this.complete = true;
        break;
      case "error":
        this.error = isObject(event.error) ? str(event.error.message) || str(event.error.type) : "error event";
        break;
    }
  }

  /** The usage seen so far, back in Anthropic's raw field names (to merge a message_delta into). */
  private rawAnthropicUsage(): Json {
    const u = this.reply.usage;
    if (!u) return {};
    return { input_tokens: u.input - u.cacheRead - u.cacheWrite, output_tokens: u.output, cache_read_input_tokens: u.cacheRead, cache_creation_input_tokens: u.cacheWrite };
  }

  private onResponses(event: Json): void {
    switch (event.type) {
      case "response.output_item.done":
        if (isObject(event.item)) addResponsesItem(this.reply, event.item);
        break;
      case "response.completed":
      case "response.incomplete":
      case "response.failed": {
        const response = isObject(event.response) ? event.response : {};
        this.reply.usage = usageOf(this.protocol, response.usage) ?? this.reply.usage;
        this.reply.stopReason = str(response.status) || String(event.type).slice("response.".length);
        if (event.type === "response.failed") {
          const error = isObject(response.error) ? response.error : {};
          this.error = str(error.message) || "response.failed";
        }
        this.complete = true;
        break;
      }
      case "error":
        this.error = str(event.message) || (isObject(event.error) ? str(event.error.message) : "") || "error event";
        break;
    }
  }

  private onChat(event: Json): void {
    if (isObject(event.usage)) this.reply.usage = usageOf(this.protocol, event.usage);
    if (isObject(event.error)) this.error = str(event.error.message) || "error";
    const choice = Array.isArray(event.choices) && isObject(event.choices[0]) ? event.choices[0] : null;
    if (!choice) return;
    const delta = isObject(choice.delta) ? choice.delta : {};
    this.reply.text += str(delta.content);
    this.reply.reasoning += str(delta.reasoning_content) || str(delta.reasoning);
    for (const part of Array.isArray(delta.tool_calls) ? delta.tool_calls : []) {
      if (!isObject(part)) continue;
      const index = num(part.index);
      const call = this.chatCalls.get(index) ?? { id: "", name: "", json: "" };
      const fn = isObject(part.function) ? part.function : {};
      call.id ||= str(part.id);
      call.name ||= str(fn.name);
      call.json += str(fn.arguments);
      this.chatCalls.set(index, call);
    }
    if (typeof choice.finish_reason === "string") this.reply.stopReason = choice.finish_reason;
  }

  result(): WireReply {
    if (this.protocol === "openai-chat" && this.chatCalls.size > 0 && this.reply.toolCalls.length === 0) {
      for (const [, call] of [...this.chatCalls].sort(([a], [b]) => a - b)) this.reply.toolCalls.push({ id: call.id, name: call.name, arguments: parseArguments(call.json) });
    }
    return this.reply;
  }
}

/** An error body in the protocol's own shape, so the agent's client shows the message. */
export function errorBody(protocol: WireProtocol | null, status: number, code: string, message: string): string {
  if (protocol === "anthropic-messages") {
    const type = status === 401 ? "authentication_error" : status === 404 ? "not_found_error" : status === 429 ? "rate_limit_error" : status >= 500 ? "api_error" : "invalid_request_error";
    return JSON.stringify({ type: "error", error: { type, message } });
  }
  return JSON.stringify({ error: { message, type: code, code } });
}
