import type { Sandbox, SandboxMount, SandboxRuntime } from "@proctor/sandbox";
import type { Logger, TaskSpec } from "@proctor/schema";
import type { AgentImage } from "./image";

/** What an agent gets for one trial. */
export interface AgentContext {
  /** The trial's fresh sandbox; the task's workdir is `sandbox.workdir`. */
  sandbox: Sandbox;
  task: TaskSpec;
  /** Time the agent may use from now (already scaled by the run's timeout multiplier). */
  timeoutMs: number;
  /** Epoch ms after which the agent is stopped; the same instant as now + timeoutMs. */
  deadlineMs: number;
  /** Aborted when the run is cancelled; exec calls must pass it on. */
  signal: AbortSignal;
  /** Host directory for this trial's agent logs (stdout.txt, stderr.txt land here). */
  logDir: string;
  logger?: Logger;
  /**
   * Extra env vars for the agent's processes in the sandbox (e.g. OPENAI_BASE_URL and a
   * per-trial OPENAI_API_KEY from the model proxy). Agents that start processes pass them on.
   */
  env?: Record<string, string>;
  /**
   * The trial's cost limit in USD (`--trial-max-cost`): a model-driven agent that prices its
   * usage stops once its cost passes it, and the trial is an `agent` error saying so.
   */
  maxCostUsd?: number;
}

export interface AgentRunResult {
  /** Exit code of the agent's process; null when it never ran to an exit (e.g. nop). */
  exitCode: number | null;
  timedOut: boolean;
  aborted: boolean;
  durationMs: number;
  /** True when stdout or stderr went past the capture cap and the log file was cut. */
  outputTruncated: boolean;
  /** Model the agent talked to, if any (recorded in result.json `agent.model`). */
  model?: string;
  /** Token and request counts of a model-driven agent (recorded in result.json `agent.usage`). */
  usage?: { inputTokens: number; outputTokens: number; requests: number; retries: number; cacheReadTokens?: number; cacheWriteTokens?: number; costUsd?: number; pricedAs?: string; unpriced?: string };
  /** Set when the agent was stopped for a reason of its own making (a spent model budget): an `agent` error. */
  error?: string;
  /** The kind `error` is recorded as: `agent` (default), or `setup` when the task itself is at fault (a gold patch that applies nowhere). */
  errorKind?: "agent" | "setup";
}

/**
 * An agent acts on the sandbox to solve the task. `setup` runs first (install, upload) and
 * throws AgentSetupError on failure; `run` returns how the agent ended and never throws for
 * a non-zero exit or a timeout.
 */
export interface Agent {
  readonly name: string;
  /** An agent that brings its own image: the engine builds it and makes the trial's sandbox from it. */
  readonly image?: AgentImage;
  /**
   * Host directories to bind read-only into each of the agent's sandboxes (an installed CLI),
   * asked for before the sandbox starts; the first call may install them (once per machine).
   * Throws AgentError when that fails.
   */
  sandboxMounts?(runtime: SandboxRuntime, signal: AbortSignal): Promise<readonly SandboxMount[]>;
  setup?(ctx: AgentContext): Promise<void>;
  run(ctx: AgentContext): Promise<AgentRunResult>;
  /**
   * The agent's version where it has one, recorded in each trial's result and the run's pins (an
   * installed CLI: its npm package's version as installed and bound into the sandbox).
   */
  version?(): string | null;
  /** Releases what the agent holds for the run (its model proxy). The engine calls it when the run ends. */
  close?(): Promise<void>;
}
