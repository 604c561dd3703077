export { startViewer } from "./server";
export type { ViewerOptions, ViewerHandle } from "./server";
