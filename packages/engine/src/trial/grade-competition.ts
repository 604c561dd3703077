import { mkdir, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { ImageError, SANDBOX_PATHS, type ContainerSettings, type Sandbox, type SandboxMount } from "@proctor/sandbox";
import type { TaskSpec } from "@proctor/schema";
import { COMPETITION_PATHS, medalFor } from "@proctor/tasks";
import { DEFAULT_LOG_BYTES, HOUSEKEEPING_MS, SANDBOX_START_MS, effectiveLimits, message, tail, type SandboxAttempt } from "./context";
import { adminOptions, trusted } from "../grading/sandbox-tools";

const REWARD_FILE = `${SANDBOX_PATHS.verifierLogs}/reward.json`;
const INSTRUCTIONS_FILE = "/home/instructions.md";

/** The public data, read-only at /home/data: the only part of a competition the agent's sandbox gets. */
export function competitionMounts(task: TaskSpec): SandboxMount[] {
  return task.competition ? [{ hostPath: task.competition.publicDir, sandboxPath: COMPETITION_PATHS.data, readOnly: true }] : [];
}

/** The run's container settings with the task's gpus (the run's value wins); undefined when there are none. */
export function containerSettingsFor(task: TaskSpec, run: ContainerSettings | undefined): ContainerSettings | undefined {
  const gpus = run?.gpus ?? (task.environment.gpus > 0 ? task.environment.gpus : undefined);
  const settings: ContainerSettings = { ...run, ...(gpus !== undefined ? { gpus } : {}) };
  return Object.keys(settings).length > 0 ? settings : undefined;
}

/**
 * Before the agent: the output dirs (submission, logs, code, agent) exist and belong to the
 * image's user, and the instruction is at /home/instructions.md.
 */
export async function prepareCompetition(attempt: SandboxAttempt): Promise<void> {
  const { sandbox, task, signal } = attempt;
  const who = await sandbox.exec(["sh", "-c", 'echo "$(id -u):$(id -g)"'], { timeoutMs: HOUSEKEEPING_MS, signal });
  const owner = /^\d+:\d+$/.test(who.stdout.trim()) ? who.stdout.trim() : "0:0";
  const dirs = [COMPETITION_PATHS.submission, COMPETITION_PATHS.logs, COMPETITION_PATHS.code, COMPETITION_PATHS.agent];
  const made = await sandbox.exec(trusted(sandbox, 'mkdir -p "$@" && chown "$OWNER" "$@"', dirs), { ...adminOptions(sandbox), env: { OWNER: owner }, timeoutMs: HOUSEKEEPING_MS, signal });
  if (made.exitCode !== 0) throw new Error(`creating ${dirs.join(", ")} in the sandbox failed: ${tail(made.stderr)}`);
  await sandbox.writeFile(INSTRUCTIONS_FILE, task.instruction);
}

/** What came back from the agent's sandbox. */
interface Outputs {
  files: number;
  truncated: boolean;
}

/** Copies /home/{submission,logs,code} into trials/<id>/{submission,logs,code}, sharing the run's log byte cap (submission first). */
async function collectOutputs(attempt: SandboxAttempt): Promise<Outputs> {
  const { sandbox, trialDir, env } = attempt;
  let budget = env.limits.logBytes ?? DEFAULT_LOG_BYTES;
  let submission: Outputs = { files: 0, truncated: false };
  for (const [name, from] of [["submission", COMPETITION_PATHS.submission], ["logs", COMPETITION_PATHS.logs], ["code", COMPETITION_PATHS.code]] as const) {
    await mkdir(join(trialDir, name), { recursive: true });
    const report = await sandbox.download(from, join(trialDir, name), { maxBytes: budget });
    budget = Math.max(0, budget - report.bytes);
    if (report.truncated) await writeFile(join(trialDir, `${name}.TRUNCATED`), `${from} went past the ${env.limits.logBytes ?? DEFAULT_LOG_BYTES} byte cap and was cut\n`);
    if (name === "submission") submission = { files: report.files, truncated: report.truncated };
  }
  return submission;
}

/**
 * After the agent: collect the outputs, then grade the submission in a separate sandbox (the
 * task's grader image, no network) holding grade/ at /grade, the submission at
 * /home/submission, the public data at /home/data and the private data at /private. Reads
 * reward.json {score, valid}. A missing or invalid submission is a scored, invalid trial; a
 * grader that writes no readable reward.json is a verifier error.
 */
export async function gradeCompetition(attempt: SandboxAttempt): Promise<void> {
  const { task, trialId, trialDir, state, env, signal, budgets } = attempt;
  const competition = task.competition;
  if (!competition) return;
  const submission = await collectOutputs(attempt);
  const base = {
    competitionId: task.id,
    metric: competition.metric,
    higherIsBetter: competition.higherIsBetter,
    thresholds: competition.thresholds,
    submissionPath: `trials/${trialId}/submission`,
    logsPath: `trials/${trialId}/logs`,
    codePath: `trials/${trialId}/code`,
  };
  const invalid = (note: string): void => {
    state.competition = { ...base, score: null, valid: false, medal: null, aboveMedian: false, note };
    state.reward = null;
  };
  if (submission.files === 0) return invalid(`no submission: ${COMPETITION_PATHS.submission} was empty when the agent finished`);
  if (submission.truncated) return invalid(`the submission went past the ${env.limits.logBytes ?? DEFAULT_LOG_BYTES} byte cap`);

  const grader = await startGrader(attempt);
  try {
    const upload = async (from: string, to: string) => grader.upload(from, to);
    await upload(task.verifier.testsDir ?? join(task.sourcePath, "grade"), COMPETITION_PATHS.grade);
    await upload(join(trialDir, "submission"), COMPETITION_PATHS.submission);
    if (competition.privateDir) await upload(competition.privateDir, COMPETITION_PATHS.private);
    const result = await grader.exec(
      { shell: task.verifier.mode === "reward-file" ? task.verifier.command : "false" },
      {
        ...adminOptions(grader),
        cwd: COMPETITION_PATHS.grade,
        env: {
          ...task.verifier.env,
          SUBMISSION_DIR: COMPETITION_PATHS.submission,
          PRIVATE_DIR: COMPETITION_PATHS.private,
          DATA_DIR: COMPETITION_PATHS.data,
          REWARD_FILE,
        },
        timeoutMs: budgets.verifierMs,
        signal,
        maxOutputBytes: 1024 * 1024,
      },
    );
    await writeFile(join(trialDir, "verifier", "grade-stdout.txt"), result.stdout);
    await writeFile(join(trialDir, "verifier", "grade-stderr.txt"), result.stderr);
    if (result.timedOut) {
      state.errors.push({ kind: "verifier", message: `the grader timed out after ${Math.round(budgets.verifierMs / 1000)} s` });
      return;
    }
    const raw = await grader.readFile(REWARD_FILE, { maxBytes: 64 * 1024 });
    if (raw === null) {
      state.errors.push({ kind: "verifier", message: `the grader wrote no ${REWARD_FILE} (exit ${result.exitCode})${result.stderr.trim() ? `: ${tail(result.stderr, 3)}` : ""}; see trials/${trialId}/verifier/grade-stderr.txt` });
      return;
    }
    await writeFile(join(trialDir, "verifier", "reward.json"), raw);
    const parsed = parseGraderReward(raw.toString("utf8"));
    if (typeof parsed === "string") {
      state.errors.push({ kind: "verifier", message: `${REWARD_FILE}: ${parsed}` });
      return;
    }
    if (!parsed.valid || parsed.score === null) return invalid(parsed.note ?? "the grader marked the submission invalid");
    const { medal, aboveMedian } = medalFor(parsed.score, competition);
    state.competition = { ...base, score: parsed.score, valid: true, medal, aboveMedian, note: null };
    state.reward = parsed.score;
  } finally {
    await grader.kill().catch((error: unknown) => env.logger.error("removing the grader sandbox failed", { trialId, error: message(error) }));
  }
}

/** reward.json as the grader wrote it, or what is wrong with it. */
function parseGraderReward(text: string): { score: number | null; valid: boolean; note: string | null } | string {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return `is not JSON: ${JSON.stringify(text.slice(0, 80))}`;
  }
  if (typeof value !== "object" || value === null || Array.isArray(value)) return 'must be an object {"score": <number>, "valid": <bool>}';
  const { score, valid, note } = value as Record<string, unknown>;
  if (typeof valid !== "boolean") return '"valid" must be true or false';
  if (valid && (typeof score !== "number" || !Number.isFinite(score))) return '"score" must be a finite number when "valid" is true';
  return { score: typeof score === "number" && Number.isFinite(score) ? score : null, valid, note: typeof note === "string" ? note.slice(0, 500) : null };
}

/** The grader's sandbox: [grading].image, else the task's environment, else the run's default image; no network. */
async function startGrader(attempt: SandboxAttempt): Promise<Sandbox> {
  const { task, env, signal, budgets, trialId } = attempt;
  const competition = task.competition;
  const spec = task.environment;
  const wanted = competition?.graderImage ?? spec.dockerImage ?? (spec.buildContext ? null : env.defaultImage);
  const image = await env.runtime.resolveImage({
    image: wanted,
    buildContext: competition?.graderImage ? null : spec.buildContext,
    ...(spec.buildContextExclude ? { contextExclude: spec.buildContextExclude } : {}),
    buildTimeoutMs: budgets.buildMs,
    signal: AbortSignal.any([signal, AbortSignal.timeout(budgets.buildMs + HOUSEKEEPING_MS)]),
    onProgress: (line) => env.logger.debug(line, { trialId }),
  }).catch((error: unknown) => {
    throw error instanceof ImageError ? new Error(`the grader's image: ${error.message}`, { cause: error }) : error;
  });
  const limits = effectiveLimits(task, env.limits);
  return env.runtime.create({
    image,
    ...(limits.cpus !== undefined ? { cpus: limits.cpus } : {}),
    ...(limits.memoryMb !== undefined ? { memoryMb: limits.memoryMb } : {}),
    network: false,
    mounts: competitionMounts(task),
    labels: { "proctor.run": env.runId, "proctor.trial": trialId, "proctor.role": "grader" },
    lifetimeMs: budgets.verifierMs + SANDBOX_START_MS + HOUSEKEEPING_MS,
    signal: AbortSignal.any([signal, AbortSignal.timeout(SANDBOX_START_MS)]),
  });
}
