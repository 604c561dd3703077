export type { ChatModel, ChatMessage, AssistantMessage, ChatRequest, ChatCompletion, CompleteOptions, ToolCall, ToolDefinition, TokenUsage } from "./types";
export type { OpenAIChatModelOptions } from "./client";
export type { Clock, RetryPolicy } from "./retry";
export type { AdaptiveLimiterOptions, LimiterStats } from "./limiter";
export type { ScriptedReply, ScriptedRequest, ScriptedServer, ScriptedServerOptions, ScriptedUsage } from "./scripted-server";
export { OpenAIChatModel, DEFAULT_BASE_URL, DEFAULT_API_KEY_ENV } from "./client";
export { AdaptiveLimiter } from "./limiter";
export { DEFAULT_RETRY_POLICY, parseRetryAfter, backoffDelay, systemClock } from "./retry";
export { startScriptedModelServer } from "./scripted-server";
export type { ModelProxy, ModelProxyOptions, ModelProxySession, ModelProxySessionOptions, ModelProxyUsage } from "./proxy";
export { startModelProxy, upstreamRoot } from "./proxy";
export type { WireProtocol, WireReply, WireUsage, WireToolCall, WireInputs } from "./wire";
export { WIRE_PROTOCOLS, StreamReply, replyOf, inputsOf, protocolOfPath } from "./wire";
export { ATIF_VERSION } from "./proxy-session";
export {
  LlmError,
  LlmHttpError,
  LlmAuthError,
  LlmModelNotFoundError,
  LlmContextLengthError,
  LlmRetriesExhaustedError,
  LlmResponseError,
  LlmUnreachableError,
} from "./errors";
export type { TokenCounts, FlatPrices, PriceSource, PriceResult } from "./pricing";
export { PRICE_LIBRARY, CostMeter, priceRequest, isPriced, flatCost, roundUsd } from "./pricing";
