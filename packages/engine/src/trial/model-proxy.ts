import { withModelProxy, type Agent, type ModelProxyAgent } from "@proctor/agents";
import type { AgentSpec, Logger } from "@proctor/schema";

/**
 * The run's model proxy, when its agent spec asks for one (`{kind: "code", modelProxy}`):
 * started before the first trial, closed when the run ends (every trial token stops working).
 * Per trial, the wrapped agent opens a session (token + budget), makes the proxy reachable in
 * the sandbox, and records usage and trajectory (see withModelProxy in @proctor/agents).
 */
export async function startRunModelProxy(spec: AgentSpec | Agent, agent: Agent, logger: Logger): Promise<ModelProxyAgent | null> {
  if (!("kind" in spec) || spec.kind !== "code" || !spec.modelProxy) return null;
  return withModelProxy(agent, spec.modelProxy, { logger });
}
