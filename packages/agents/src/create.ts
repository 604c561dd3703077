import type { AgentSpec } from "@proctor/schema";
import { nopAgent, oracleAgent } from "./builtin";
import { codeAgent } from "./code";
import { imageAgent } from "./image";
import { AgentConfigError } from "./errors";
import { llmAgentFromSpec } from "./llm";
import { installedAgent } from "./installed";
import { builtinInstalledAgent, isBuiltinInstalledAgent, readInstalledAgent } from "./installed-def";
import type { Agent } from "./types";

/**
 * The agent an AgentSpec names. Throws AgentConfigError for a code agent without an entrypoint.
 * An llm spec reads its API key from process.env[spec.apiKeyEnv] here, in the calling process;
 * an installed spec checks that the variable is set (AgentConfigError naming it).
 */
export function createAgent(spec: AgentSpec): Agent {
  switch (spec.kind) {
    case "oracle":
      return oracleAgent();
    case "nop":
      return nopAgent();
    case "code":
      return codeAgent(spec.dir);
    case "image":
      return imageAgent(spec.dir);
    case "llm":
      return llmAgentFromSpec(spec);
    case "installed": {
      const definition = spec.dir !== undefined
        ? readInstalledAgent(spec.dir, spec.version !== undefined ? { version: spec.version } : {})
        : isBuiltinInstalledAgent(spec.name)
          ? builtinInstalledAgent(spec.name, spec.version)
          : null;
      if (!definition) throw new AgentConfigError(`agent "${spec.name}" is not a built-in installed agent (claude-code, codex); give its directory (installed:<dir>)`, spec.name);
      return installedAgent({ definition, modelProxy: spec.modelProxy });
    }
    case "custom":
      throw new AgentConfigError(`agent "${spec.name}" is a custom Agent object: pass the object itself to the engine, not its spec`, spec.name);
  }
}
