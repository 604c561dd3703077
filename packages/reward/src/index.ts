export { RewardError, MissingRewardError, GarbledRewardError, NoTestsToGradeError } from "./errors";
export { parseReward, isPass } from "./parse";
export type { RewardFiles, ParsedReward } from "./parse";
export { summarize, passAtK, latestResults, scoredReward, UNCATEGORIZED, UNKNOWN_DIFFICULTY } from "./summary";
export type { SummarizeInput } from "./summary";
export { passAtKEstimate, mean, standardError } from "./stats";
export { parsePytestLog, gradeTests, testPassed } from "./pytest";
export type { PytestStatus, TestListOutcome, GradeDetails } from "./pytest";
