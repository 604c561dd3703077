export {
  TaskId, TASK_ID_PATTERN, TaskFormat, EnvironmentSpec, CheckSpec, VerifierSpec, SolutionSpec, WorkspaceSpec, TaskSpec,
  CompetitionSpec, MedalThresholds,
  DEFAULT_AGENT_TIMEOUT_SEC, DEFAULT_VERIFIER_TIMEOUT_SEC, DEFAULT_BUILD_TIMEOUT_SEC, COMMIT_ID,
} from "./task";
export { AgentSpec, ModelProxySpec } from "./agent";
export type { ModelPrices } from "./agent";
export { ErrorKind, TrialError, TrialStatus, Phase, PhaseTiming, CheckResult, TrialResult, KeptOutputs, GroupSummary, RunSummary, Integrity, GradingRecord, isCleanPass, SurvivingProcess } from "./result";
export type { Rate, CompetitionGrading, RunCost, RunBudgetState, CostGroup } from "./result";
export { EventBody } from "./event";
export type { EventType, ProctorEvent } from "./event";
export { RunConfig, DEFAULT_TRIAL_LIMITS } from "./run";
export { Pins, TaskPin, TaskOrigin } from "./pins";
export type { Logger } from "./logger";
export { silentLogger } from "./logger";
export { dockerfileInstructions } from "./dockerfile";
