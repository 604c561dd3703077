import type { AgentSpec } from "@proctor/schema";
import { nopAgent, oracleAgent } from "./builtin";
import { codeAgent } from "./code";
import { AgentConfigError } from "./errors";
import type { Agent } from "./types";

/** The agent an AgentSpec names. Throws AgentConfigError for a code agent without an entrypoint. */
export function createAgent(spec: AgentSpec): Agent {
  switch (spec.kind) {
    case "oracle":
      return oracleAgent();
    case "nop":
      return nopAgent();
    case "code":
      return codeAgent(spec.dir);
    case "custom":
      throw new AgentConfigError(`agent "${spec.name}" is a custom Agent object: pass the object itself to the engine, not its spec`, spec.name);
  }
}
