/** One tool call the model asked for (OpenAI chat-completions shape). */
export interface ToolCall {
  id: string;
  type: "function";
  /** `arguments` is the model's raw JSON text: it may be malformed, and the caller decides. */
  function: { name: string; arguments: string };
}

export type ChatMessage =
  | { role: "system"; content: string }
  | { role: "user"; content: string }
  | { role: "assistant"; content: string | null; tool_calls?: ToolCall[]; reasoning_content?: string }
  | { role: "tool"; tool_call_id: string; content: string };

export type AssistantMessage = Extract<ChatMessage, { role: "assistant" }>;

/** A function tool offered to the model; `parameters` is a JSON Schema object. */
export interface ToolDefinition {
  type: "function";
  function: { name: string; description: string; parameters: Record<string, unknown> };
}

export interface ChatRequest {
  messages: readonly ChatMessage[];
  tools?: readonly ToolDefinition[];
  toolChoice?: "auto" | "none" | "required";
  temperature?: number;
  maxOutputTokens?: number;
}

export interface TokenUsage {
  inputTokens: number;
  outputTokens: number;
  /** Prompt tokens the server served from its cache, when it says. */
  cachedTokens?: number;
  /** Prompt tokens the server wrote to its cache, when it says (OpenRouter's prompt_tokens_details.cache_write_tokens). */
  cacheWriteTokens?: number;
}

export interface ChatCompletion {
  message: AssistantMessage;
  /** "stop", "tool_calls", "length", ... as the server said; null when it did not. */
  finishReason: string | null;
  /** Token counts of this completion (zeros when the server sent no `usage`). */
  usage: TokenUsage;
  /** Attempts that failed and were retried before this one succeeded. */
  retries: number;
  /** Wall time of the whole call, retries and waits included. */
  durationMs: number;
  /** The server's id for the completion, when it sent one. */
  id?: string;
}

export interface CompleteOptions {
  /** Aborting stops the request and any wait between retries (the promise rejects with the reason). */
  signal?: AbortSignal;
}

/**
 * A chat model: what the LLM agent talks to. `OpenAIChatModel` implements it over HTTP; a
 * library user may pass any object with this shape (a local model, a cache, a fake).
 * Throw `LlmAuthError` / `LlmModelNotFoundError` for errors no retry can fix (the run stops),
 * `LlmContextLengthError` when the conversation no longer fits (the agent's loop ends).
 */
export interface ChatModel {
  /** The model's name, recorded in result.json and trajectories. */
  readonly model: string;
  /** Where the model is served (no secrets), for messages and trajectories. */
  readonly baseUrl?: string;
  complete(request: ChatRequest, options?: CompleteOptions): Promise<ChatCompletion>;
}
