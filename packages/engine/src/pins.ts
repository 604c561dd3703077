import { basename } from "node:path";
import type { AgentSpec, Pins, RunConfig, TrialResult } from "@proctor/schema";
import packageJson from "../package.json" with { type: "json" };

/** The engine's version: the Proctor version a run records when its caller names none. */
export const ENGINE_VERSION: string = packageJson.version;

/** The agent's name as pins record it. */
function agentName(agent: AgentSpec): string {
  switch (agent.kind) {
    case "code":
    case "image":
      return `${agent.kind}:${basename(agent.dir)}`;
    case "installed":
    case "custom":
      return agent.name;
    default:
      return agent.kind;
  }
}

/** The model a model-driven agent is evaluated with, from its spec. */
function agentModel(agent: AgentSpec): string | null {
  if (agent.kind === "llm") return agent.model;
  if (agent.kind === "installed") return agent.modelProxy.model;
  if (agent.kind === "code") return agent.modelProxy?.model ?? null;
  return null;
}

/**
 * The pins a run starts with, from its config: Proctor's version, the agent, the model, each
 * task's content digest and origin. Images are not known yet (see `withTrialPins`).
 */
export function startPins(config: RunConfig, proctorVersion: string): Pins {
  const origins = new Map((config.origins ?? []).map(({ taskId, ...origin }) => [taskId, origin]));
  return {
    proctor: proctorVersion,
    agent: {
      name: agentName(config.agent),
      version: config.agent.kind === "installed" ? (config.agent.version ?? null) : null,
      hash: config.agentHash,
    },
    model: agentModel(config.agent),
    tasks: Object.fromEntries(
      config.tasks.map((t) => {
        const origin = origins.get(t.id);
        return [t.id, { digest: t.hash, image: null, imageId: null, ...(origin ? { origin } : {}) }];
      }),
    ),
  };
}

/** The pins with what the finished trials found: each task's image and id, the agent's version as installed, the model it used. */
export function withTrialPins(pins: Pins, results: readonly TrialResult[]): Pins {
  const tasks = { ...pins.tasks };
  let version = pins.agent.version;
  let model = pins.model;
  for (const r of results) {
    const task = tasks[r.taskId];
    if (task && r.environment) tasks[r.taskId] = { ...task, image: r.environment.image, imageId: r.environment.imageId };
    if (r.agent?.version) version = r.agent.version;
    if (model === null && r.agent?.model) model = r.agent.model;
  }
  return { ...pins, agent: { ...pins.agent, version }, model, tasks };
}
