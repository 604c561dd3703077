/** Base class of every error an agent throws. */
export class AgentError extends Error {
  override name = "AgentError";
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
  }
}

/**
 * The agent cannot be used as given: a code agent directory that is missing, has no
 * entrypoint, or has an invalid agent.toml. Thrown by createAgent / resolveEntrypoint before
 * any sandbox is touched, so callers can report it as bad usage.
 */
export class AgentConfigError extends AgentError {
  override name = "AgentConfigError";
  constructor(message: string, readonly path: string, options?: { cause?: unknown }) {
    super(message, options);
  }
}

/** The oracle agent was asked to run a task that ships no reference solution. */
export class MissingSolutionError extends AgentError {
  override name = "MissingSolutionError";
  constructor(readonly taskId: string, options?: { cause?: unknown }) {
    super(`task "${taskId}" has no solution (solution/solve.sh), so the oracle agent cannot run it`, options);
  }
}

/**
 * The agent's setup step (agent.toml `setup`, or uploading its files) failed or timed out.
 * The engine records it as an `agent` error and still runs the verifier.
 */
export class AgentSetupError extends AgentError {
  override name = "AgentSetupError";
  constructor(
    message: string,
    readonly exitCode: number | null,
    readonly timedOut: boolean,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

/**
 * An error no later trial can avoid (a rejected model API key, an unknown model): the engine
 * stops the whole run at once, keeps every finished trial, and the CLI exits with code 4.
 * Its message must name what to fix and never carry a secret.
 */
export class RunFatalAgentError extends AgentError {
  override name = "RunFatalAgentError";
}
