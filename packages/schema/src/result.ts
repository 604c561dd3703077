import { z } from "zod";
import { Pins } from "./pins";

/**
 * infra: image, daemon, sandbox start (the only kind retried);
 * setup: the task's workspace (checkout, install) failed, or the task's own material is broken
 *   (a gold patch that applies nowhere);
 * agent: agent setup failed or timed out;
 * verifier: verifier timed out, or wrote no / a garbled reward.
 */
export const ErrorKind = z.enum(["infra", "setup", "agent", "verifier"]);
export type ErrorKind = z.infer<typeof ErrorKind>;

export const TrialError = z.object({ kind: ErrorKind, message: z.string() });
export type TrialError = z.infer<typeof TrialError>;

export const TrialStatus = z.enum(["passed", "failed", "error"]);
export type TrialStatus = z.infer<typeof TrialStatus>;

export const Phase = z.enum(["environment", "sandbox", "workspace", "agent_setup", "agent", "restore", "outputs", "grader", "verifier", "collect"]);
export type Phase = z.infer<typeof Phase>;

export const PhaseTiming = z.object({ phase: Phase, durationMs: z.number().nonnegative() });
export type PhaseTiming = z.infer<typeof PhaseTiming>;

export const CheckResult = z.object({
  name: z.string(),
  passed: z.boolean(),
  exitCode: z.number().nullable(),
  timedOut: z.boolean(),
  /** Head and tail of stdout + stderr (capped). */
  output: z.string(),
  /** The shell string that ran (absent in results written before Proctor recorded it). */
  command: z.string().optional(),
  /** Wall time of the check (absent in older results). */
  durationMs: z.number().nonnegative().optional(),
});
export type CheckResult = z.infer<typeof CheckResult>;

export const SurvivingProcess = z.object({
  pid: z.number().int(),
  ppid: z.number().int(),
  command: z.string(),
  /** TCP ports it listened on. */
  ports: z.array(z.number().int()),
});
export type SurvivingProcess = z.infer<typeof SurvivingProcess>;

/**
 * Where and how a trial was graded.
 * - "fresh": a new sandbox from the task's original image holding only the agent's outputs
 *   (`outputs`: the repository diff, the workdir, or the task's declared paths); nothing else the
 *   agent changed exists there.
 * - "shared": in the agent's own sandbox (tasks whose tests inspect it), with every file the
 *   verifier's processes loaded audited from the host.
 */
export const GradingRecord = z.object({
  mode: z.enum(["fresh", "shared"]),
  /** Why this mode: the task's setting, the run's flag, or what the task's kind implies. */
  why: z.string(),
  /** "fresh" mode: what was brought from the agent's sandbox ("repository diff", "/app", ...). */
  outputs: z.array(z.string()),
  /** "fresh" mode: the grader joined the agent sandbox's network namespace (services it started stay reachable). */
  joinedNetwork: z.boolean(),
  /** "shared" mode: whether the verifier's file accesses were audited (and the audit was complete). */
  audited: z.boolean(),
  /** Files in the agent's outputs the grading left out, with why (links, special files, bytecode...), at most 100. */
  skipped: z.array(z.string()).optional(),
  /** "fresh" mode: the tests were bound read-only at /tests (else uploaded, and checked after they ran). */
  testsReadOnly: z.boolean().optional(),
});
export type GradingRecord = z.infer<typeof GradingRecord>;

/** What Proctor did to keep the agent from rewiring the verifier, and what it found. */
export const Integrity = z.object({
  /**
   * "isolated": no agent process was alive when the verifier started (confirmed);
   * "shared": the agent's processes stayed alive through verification (listed in `survivors`).
   */
  isolation: z.enum(["isolated", "shared"]),
  /** False when the runtime could not protect the verifier from the agent's files (the local runtime: the agent's processes are host processes). */
  tamperChecked: z.boolean(),
  /** What the agent changed that would have rewired the verifier; non-empty means the trial is an `agent` error. */
  tampered: z.array(z.string()),
  /** Processes of the agent alive when the verifier started ("shared" mode). */
  survivors: z.array(SurvivingProcess),
  /** Passed, but not a clean pass: see `flags` (never counted as a clean pass). */
  flagged: z.boolean(),
  /** Why a pass is flagged (e.g. the verifier ran unaudited in the agent's sandbox). */
  flags: z.array(z.string()).optional(),
  /** Why a check could not be made, when one could not. */
  note: z.string().nullable(),
  /** How the trial was graded (absent in results written before grading modes). */
  grading: GradingRecord.optional(),
});
export type Integrity = z.infer<typeof Integrity>;

/** Tests of one group (FAIL_TO_PASS or PASS_TO_PASS) that passed and that did not. */
const TestGroup = z.object({ success: z.array(z.string()), failure: z.array(z.string()) });

/** Per-test grading of a SWE-bench-style task: resolved iff every FAIL_TO_PASS and PASS_TO_PASS test passed. */
const TestGrading = z.object({
  resolved: z.boolean(),
  /** The shell string run in the repository. */
  testCommand: z.string(),
  failToPass: TestGroup,
  passToPass: TestGroup,
  /** Every test the log named, with its status (XFAIL counts as passed). */
  tests: z.record(z.string(), z.enum(["PASSED", "FAILED", "SKIPPED", "ERROR", "XFAIL"])),
});

/** A competition trial's grading: the grader's score, its validity and the medal it earns. */
const CompetitionGrading = z.object({
  competitionId: z.string(),
  metric: z.string(),
  higherIsBetter: z.boolean(),
  /** null when the submission was missing or invalid. */
  score: z.number().nullable(),
  valid: z.boolean(),
  medal: z.enum(["gold", "silver", "bronze"]).nullable(),
  aboveMedian: z.boolean(),
  thresholds: z.object({ gold: z.number(), silver: z.number(), bronze: z.number(), median: z.number() }),
  /** Why the submission is invalid (missing, the grader said so, no reward.json), when it is. */
  note: z.string().nullable(),
  /** Paths relative to the run directory. */
  submissionPath: z.string(),
  logsPath: z.string(),
  codePath: z.string(),
});
export type CompetitionGrading = z.infer<typeof CompetitionGrading>;

/**
 * The agent's outputs as fresh grading took them from its sandbox, kept in the trial directory
 * (a gzipped tar) so `proctor regrade` can grade them again without the agent.
 */
export const KeptOutputs = z.object({
  /** True when the archive is in the trial directory. */
  kept: z.boolean(),
  /** The archive's name in the trial directory (outputs.tar.gz) when kept. */
  file: z.string().optional(),
  /** Compressed size when kept; when not, how far past the cap it got before it was dropped. */
  bytes: z.number().int().nonnegative(),
  /** sha256 of the archive when kept. */
  sha256: z.string().optional(),
  /** "repository": the workdir's tree (without .git) under tree/; "paths": output i under i/<basename>. */
  layout: z.enum(["repository", "paths"]),
  /** The sandbox paths the archive holds: the workdir, or each output path in archive order. */
  paths: z.array(z.string()),
  /** Why the outputs were not kept (over the cap, the host could not write them). */
  note: z.string().optional(),
});
export type KeptOutputs = z.infer<typeof KeptOutputs>;

/** One line of results.jsonl and the body of trials/<id>/result.json. */
export const TrialResult = z.object({
  trialId: z.string(),
  taskId: z.string(),
  attempt: z.number().int().positive(),
  category: z.string().nullable(),
  difficulty: z.string().nullable(),
  status: TrialStatus,
  reward: z.number().nullable(),
  error: TrialError.nullable(),
  durationMs: z.number().nonnegative(),
  startedAt: z.string(),
  finishedAt: z.string(),
  /** How many times infra errors made the engine start this trial again. */
  retries: z.number().int().nonnegative(),
  phases: z.array(PhaseTiming),
  agent: z
    .object({
      exitCode: z.number().nullable(),
      timedOut: z.boolean(),
      /** The agent's name (oracle, nop, code:<dir>, llm, ...). */
      name: z.string().optional(),
      /** Model a model-driven agent talked to. */
      model: z.string().optional(),
      /** The agent's version where it has one (an installed CLI: its package's version as installed). */
      version: z.string().optional(),
      usage: z
        .object({
          inputTokens: z.number(),
          outputTokens: z.number(),
          requests: z.number(),
          retries: z.number(),
          /** Prompt tokens served from the provider's cache (part of inputTokens). */
          cacheReadTokens: z.number().optional(),
          /** Prompt tokens written to the provider's cache (part of inputTokens). */
          cacheWriteTokens: z.number().optional(),
          /** What the usage cost in USD: each request priced by the price library (or the run's `--price-table`). */
          costUsd: z.number().optional(),
          /** The price entry used: `<provider>/<model>` of the price library, or "price table". */
          pricedAs: z.string().optional(),
          /** Why there is no cost (a model the price library does not know): never read as $0. */
          unpriced: z.string().optional(),
        })
        .optional(),
    })
    .nullable(),
  checks: z.array(CheckResult).nullable(),
  /** Absent in results written before Proctor checked integrity. */
  integrity: Integrity.nullable().optional(),
  /** SWE-bench-style tasks: the per-test table and which FAIL_TO_PASS / PASS_TO_PASS tests failed. */
  grading: TestGrading.optional(),
  /** Competition tasks: score, validity, medal; the trial passed iff it earned a medal. */
  competition: CompetitionGrading.optional(),
  /** The image the trial's sandboxes ran on: the reference and the runtime's content id (Docker's image id). */
  environment: z.object({ image: z.string(), imageId: z.string().nullable() }).optional(),
  /** Fresh grading: the agent's outputs, kept for `proctor regrade` (or why not). */
  outputs: KeptOutputs.optional(),
  /** Queued runs (`--queue`): the worker that ran the trial (its --name, and its host's name). */
  worker: z.object({ name: z.string(), host: z.string() }).optional(),
  /**
   * Sandbox compute: CPU-seconds the trial's sandboxes used (null where the runtime cannot say,
   * e.g. the local runtime), and their cost at the run's `--compute-price` (USD per CPU-hour).
   */
  compute: z.object({ cpuSeconds: z.number().nonnegative().nullable(), costUsd: z.number().nonnegative().optional() }).optional(),
});
export type TrialResult = z.infer<typeof TrialResult>;

/**
 * A pass that counts as one: passed, and not flagged for audit (a flagged pass is reported, never
 * counted as a clean pass: in summaries, reports, the server's counts and receipts).
 */
export function isCleanPass(result: Pick<TrialResult, "status" | "integrity">): boolean {
  // Results written before flags existed marked passes with agent processes alive as flagged, and
  // counted them: they keep counting.
  return result.status === "passed" && !(result.integrity?.flagged === true && result.integrity.flags !== undefined);
}

/** Cost of a group of trials. `usd` is null when none of them is priced. */
export const CostGroup = z.object({
  trials: z.number().int(),
  passed: z.number().int(),
  /** Model tokens + compute, over the priced trials. */
  usd: z.number().nullable(),
  /** Trials whose model usage has no price (their tokens are not in `usd`). */
  unpriced: z.number().int(),
});
export type CostGroup = z.infer<typeof CostGroup>;

export const RunCost = z.object({
  /** Where the prices come from: the price library and its version, or a `--price-table` file. */
  source: z.object({ name: z.string(), version: z.string() }).nullable(),
  /** Model tokens + compute over the priced trials; null when no trial is priced. */
  totalUsd: z.number().nullable(),
  tokensUsd: z.number().nullable(),
  /** Sandbox compute at `--compute-price` (null without one). */
  computeUsd: z.number().nullable(),
  /** CPU-seconds of the trials' sandboxes where the runtime measured them. */
  cpuSeconds: z.number().nullable(),
  pricedTrials: z.number().int(),
  /** Trials with model usage and no price; why (the first reasons) in `unpricedReasons`. */
  unpricedTrials: z.number().int(),
  unpricedReasons: z.array(z.string()),
  /** totalUsd / priced trials. */
  perTrialUsd: z.number().nullable(),
  /** totalUsd / clean passes (null with no pass, or nothing priced). */
  perPassUsd: z.number().nullable(),
  byTask: z.record(z.string(), CostGroup),
});
export type RunCost = z.infer<typeof RunCost>;

export const RunBudgetState = z.object({
  maxCostUsd: z.number().positive().optional(),
  maxTokens: z.number().int().positive().optional(),
  trialMaxCostUsd: z.number().positive().optional(),
  /** What happens to running trials at a run budget: "finish" (default) or "stop". */
  onBudget: z.enum(["finish", "stop"]),
  spentUsd: z.number(),
  spentTokens: z.number(),
  /** Which budget stopped the run, in words; null while none has. */
  exhausted: z.string().nullable(),
  /** Planned trials that never ran because of it (not failures). */
  notRun: z.number().int(),
});
export type RunBudgetState = z.infer<typeof RunBudgetState>;

const Rate = z.object({
  /** numerator / denominator, null when the denominator is 0 */
  value: z.number().nullable(),
  numerator: z.number(),
  denominator: z.number(),
  /** what the denominator counts, e.g. "all trials" or "scored trials (errors excluded)" */
  of: z.string(),
});
export type Rate = z.infer<typeof Rate>;

export const GroupSummary = z.object({
  total: z.number().int(),
  /** clean passes (see isCleanPass) */
  passed: z.number().int(),
  /** passes flagged for audit: in total, not in passed (absent in summaries written before flags) */
  flagged: z.number().int().optional(),
  failed: z.number().int(),
  errored: z.number().int(),
  /** passed / total: errors and flagged passes count as not passed */
  passRate: z.number().nullable(),
  meanReward: z.number().nullable(),
});
export type GroupSummary = z.infer<typeof GroupSummary>;

export const RunSummary = z.object({
  runId: z.string(),
  /** budget_exhausted: a run budget (`--max-cost`, `--max-tokens`) was spent and no more trials started; the rest are not run (resume with a higher budget). */
  status: z.enum(["running", "completed", "interrupted", "failed", "budget_exhausted"]),
  trials: z.object({
    /** planned trials: tasks x attempts */
    planned: z.number().int(),
    total: z.number().int(),
    /** clean passes: flagged passes are counted apart */
    passed: z.number().int(),
    /** passes flagged for audit (in total, not in passed) */
    flagged: z.number().int().optional(),
    failed: z.number().int(),
    errored: z.number().int(),
  }),
  /** passed / finished trials; errors count as not passed */
  passRate: z.number().nullable(),
  /** mean reward over finished trials, an error scoring 0 */
  meanReward: z.number().nullable(),
  rates: z.object({
    passRate: Rate,
    passRateScored: Rate,
    meanReward: Rate,
  }),
  /** mean reward with its standard error over tasks, when attempts > 1 or tasks > 1 */
  meanRewardStdErr: z.number().nullable(),
  byCategory: z.record(z.string(), GroupSummary),
  byDifficulty: z.record(z.string(), GroupSummary),
  errorsByKind: z.record(z.string(), z.number().int()),
  /** unbiased pass@k over tasks for k = 1..attempts, present when attempts > 1 */
  passAtK: z.record(z.string(), z.number()).nullable(),
  /** Trials to audit: passes with agent processes alive, tampering found, tampering not checkable. */
  integrity: z
    .object({
      passedWithSurvivors: z.number().int(),
      tampered: z.number().int(),
      unchecked: z.number().int(),
      /** passes flagged for audit (their reasons are in each result.json's integrity.flags) */
      flagged: z.number().int().optional(),
    })
    .optional(),
  startedAt: z.string(),
  updatedAt: z.string(),
  durationMs: z.number().nonnegative(),
  /** Model usage summed over finished trials whose agent reported it (model-driven agents only). */
  usage: z
    .object({ inputTokens: z.number(), outputTokens: z.number(), requests: z.number(), retries: z.number(), trials: z.number().int(), cacheReadTokens: z.number().optional(), cacheWriteTokens: z.number().optional(), costUsd: z.number().optional() })
    .optional(),
  /** What the run was pinned to (Proctor, agent, model, each task's content and image); absent in runs made before pins. */
  pins: Pins.optional(),
  /** `proctor regrade`: the run whose kept outputs this run graded again. */
  regradeOf: z.string().optional(),
  /** Why a run with status "failed" stopped (a fatal agent error such as a rejected model key). */
  error: z.string().optional(),
  /** What the finished trials cost (absent in summaries written before Proctor priced runs). */
  cost: RunCost.optional(),
  /** The run's budgets, what is spent of them, and whether one stopped the run (absent: no budget). */
  budget: RunBudgetState.optional(),
});
export type RunSummary = z.infer<typeof RunSummary>;
