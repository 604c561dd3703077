/** Base class of every error @proctor/reward throws. */
export class RewardError extends Error {
  override name = "RewardError";
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
  }
}

/**
 * Neither reward.json nor reward.txt exists. Thrown by parseReward; the engine records it as a
 * `verifier` error (never as a pass or a fail by exit code).
 */
export class MissingRewardError extends RewardError {
  override name = "MissingRewardError";
  constructor(
    readonly files: readonly string[],
    /** `because`: why, said right after "no reward" (see noRewardMessage). */
    options?: { cause?: unknown; because?: string },
  ) {
    super(
      `the verifier wrote no reward${options?.because ? ` (${options.because})` : ""}: neither ${files.join(" nor ")} exists; ` +
        `tests/test.sh must write "1", "0" or a number to reward.txt, or {"reward": <number>} to reward.json`,
      options?.cause === undefined ? undefined : { cause: options.cause },
    );
  }
}

/** The longest stderr line quoted in a message. */
const MAX_REASON = 200;

/**
 * The line of the tests' stderr that most likely says why they wrote no reward: bash's syntax
 * error, else a `$'\r': command not found` (CRLF line endings), else the last line; null when
 * stderr holds nothing. Long lines are cut at a word.
 */
export function stderrReason(stderr: string): string | null {
  const lines = stderr.split("\n").map((l) => l.replace(/\s+/g, " ").trim()).filter((l) => l !== "");
  const line = lines.find((l) => /syntax error/.test(l)) ?? lines.find((l) => l.includes("$'\\r'")) ?? lines.at(-1);
  if (line === undefined) return null;
  if (line.length <= MAX_REASON) return line;
  const cut = line.slice(0, MAX_REASON - 3);
  const space = cut.lastIndexOf(" ");
  return `${space > MAX_REASON / 2 ? cut.slice(0, space) : cut}...`;
}

/**
 * What a trial's verifier error says when the tests wrote no reward: the exit code and, when the
 * tests wrote to stderr, the line that says why (their stdout is often empty then: a syntax error
 * or CRLF line endings stop bash before the first echo).
 */
export function noRewardMessage(error: MissingRewardError, exitCode: number, stderr: string): string {
  const why = stderrReason(stderr);
  if (why === null) return `${error.message}${exitCode !== 0 ? ` (the verifier exited with ${exitCode})` : ""}`;
  return new MissingRewardError(error.files, { because: `exit ${exitCode}; test-stderr.txt: "${why}"` }).message;
}

/**
 * A reward file exists but does not hold one finite number (empty, not JSON, NaN, Infinity,
 * text, a JSON object without a numeric "reward"). Thrown by parseReward; `content` is the
 * offending text trimmed to about 200 characters.
 */
export class GarbledRewardError extends RewardError {
  override name = "GarbledRewardError";
  constructor(
    readonly file: string,
    readonly content: string,
    readonly reason: string,
    options?: { cause?: unknown },
  ) {
    super(`${file}: ${reason}, got ${JSON.stringify(content)}; write "1", "0" or a finite number`, options);
  }
}

/**
 * gradeTests was asked to grade an instance that lists no FAIL_TO_PASS and no PASS_TO_PASS
 * tests: with nothing to check, "resolved" would be a pass by default.
 */
export class NoTestsToGradeError extends RewardError {
  override name = "NoTestsToGradeError";
  constructor(options?: { cause?: unknown }) {
    super("cannot grade: FAIL_TO_PASS and PASS_TO_PASS are both empty; an instance with no tests to check is an error, not a pass", options);
  }
}
