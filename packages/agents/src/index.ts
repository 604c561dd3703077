export type { Agent, AgentContext, AgentRunResult } from "./types";
export type { Entrypoint } from "./code";
export { createAgent } from "./create";
export { oracleAgent, nopAgent } from "./builtin";
export { codeAgent, resolveEntrypoint, ENTRYPOINT_FILES } from "./code";
export { execLogged, DEFAULT_LOG_CAP_BYTES } from "./capture";
export { AgentError, AgentConfigError, AgentSetupError, MissingSolutionError, RunFatalAgentError } from "./errors";
