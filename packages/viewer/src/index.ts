export { startViewer } from "./server";
export type { ViewerOptions, ViewerHandle } from "./server";
export { answerApi, TRIAL_FILES, SANDBOX_LOGS_DIR, SANDBOX_FILES_MAX, LOG_CHUNK, PAGE_MAX } from "./api";
export type { RunSource, ViewerApiOptions, ApiAnswer } from "./api";
export { readViewerAsset, VIEWER_CSP } from "./assets";
export type { ViewerAsset } from "./assets";
export { RunDir } from "./run-dir";
export type { RunDirOptions } from "./run-dir";
