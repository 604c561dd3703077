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
  constructor(readonly files: readonly string[], options?: { cause?: unknown }) {
    super(
      `the verifier wrote no reward: neither ${files.join(" nor ")} exists; ` +
        `tests/test.sh must write "1", "0" or a number to reward.txt, or {"reward": <number>} to reward.json`,
      options,
    );
  }
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
