export { ReportError, RunReadError, FormatError, ReceiptError, ReceiptFormatError } from "./errors";
export { loadRun, withFirstFailures, findRunDirs, isRunDir, parseResults, agentLabel, modelLabel } from "./load";
export type { LoadedRun } from "./load";
export { buildRunReport, buildComparison, trialReason, trialFlags, fullReason } from "./model";
export type { RunReport, ComparisonReport, Problem, CategoryRow } from "./model";
export { competitionReport } from "./competition";
export type { CompetitionRow, CompetitionTotals } from "./competition";
export { renderText, renderMarkdown, formatDuration, percent, textTable } from "./text";
export { renderRunSummary } from "./summary";
export { diffPins, pinsOf, pinsWarning } from "./pins";
export { validationProblems } from "./validation";
export { batchTaskTable, createBatchProgress } from "./batch-progress";
export { createProgress } from "./progress";
export type { ProgressReporter, ProgressOptions } from "./progress";
export { EtaEstimator } from "./eta";
export { renderHtml, htmlEscape } from "./html";
export { renderCsv, renderJunit, buildSwebenchReport, xmlEscape } from "./machine";
export type { SwebenchReport } from "./machine";
export { renderReport, FORMATS } from "./render";
export type { ReportFormat, RenderOptions } from "./render";
export {
  RECEIPT_FORMAT,
  TREE_DIGEST_FORMAT,
  RECEIPT_FILES,
  buildReceipt,
  verifyReceipt,
  renderReceiptVerification,
  RECEIPT_FILE,
  readStoredReceipt,
  writeBatchReceipt,
  parseReceipt,
  readReceipt,
  canonicalJson,
  receiptMessage,
  treeDigest,
  sha256File,
} from "./receipt";
export type { Receipt, ReceiptBody, ReceiptSigner, BuildReceiptOptions, VerifyReceiptOptions, ReceiptVerification, ReceiptProblem } from "./receipt";
export { firstFailure, failureInOutput, readFirstFailure } from "./failure";
export type { FirstFailure } from "./failure";
export { buildLeaderboard, leaderboardPlots, runStats, runDataset, paretoFront, CATEGORY_RUNS_MAX, PLOT_RUNS_DEFAULT } from "./leaderboard";
export type { Leaderboard, LeaderboardGroup, LeaderboardRow, LeaderboardPlots, DatasetRef, RunStats, TaskCell, PlotRun } from "./leaderboard";
export { renderLeaderboard, formatUsd, formatTokens, LEADERBOARD_FORMATS } from "./leaderboard-render";
export type { LeaderboardFormat } from "./leaderboard-render";
export { costSvg, categorySvg, passAtKSvg, heatmapSvg, heatColor, PLOT_COLORS } from "./plots-svg";
