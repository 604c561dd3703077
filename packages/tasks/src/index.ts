export { TaskLoadError, UnsupportedTaskError } from "./errors";
export type { TaskLoadErrorOptions } from "./errors";
export { loadTasks, loadTaskDir, detectTaskDir } from "./sources";
export type { LoadTasksOptions, LoadTasksResult, TaskDirFormat } from "./sources";
export type { LoaderOptions, LoadedTask } from "./common";
export { loadNativeTask, NATIVE_TEST_COMMAND, NATIVE_SOLUTION_COMMAND } from "./native";
export { loadTb1Task, TB1_TEST_COMMAND, TB1_SOLUTION_COMMAND, TB1_DEFAULT_AGENT_TIMEOUT_SEC, TB1_DEFAULT_TEST_TIMEOUT_SEC } from "./tb1";
export {
  loadTermExecutorArchive,
  loadTermExecutorTask,
  isTermExecutorRoot,
  TERM_EXECUTOR_CHECK_TIMEOUT_SEC,
  TERM_EXECUTOR_INSTALL_TIMEOUT_SEC,
  TERM_EXECUTOR_SOLUTION_COMMAND,
} from "./term-executor";
export type { TermExecutorOptions, TermExecutorArchive } from "./term-executor";
export { hashTask } from "./hash";
export { defaultCacheDir } from "./tree";
export { parseSizeMb } from "./fields";
export { loadSwebenchFile, isSwebenchFile, mirrorPath, SwebenchGrading, SWEBENCH_WORKDIR, SWEBENCH_BASE_IMAGE, SWEBENCH_LOG_PARSERS } from "./swebench";
export type { SwebenchOptions, SwebenchLogParser } from "./swebench";
export { deriveTestSpec, testDirectives, SWEBENCH_SPEC_REPOS } from "./swebench-specs";
export type { DerivedTestSpec } from "./swebench-specs";
export { loadTb2File, isTb2File, TB2_ARCHIVE_LIMITS } from "./tb2";
export type { Tb2Options } from "./tb2";
export { loadCompetitionTask, isCompetitionDir, medalFor, COMPETITION_PATHS } from "./competition";
export type { Medal } from "./competition";
