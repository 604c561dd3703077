export { DockerRuntime, DEFAULT_PIDS_LIMIT, DEFAULT_WARM_POOL, DROPPED_CAPABILITIES, POOLED_LABEL } from "./runtime";
export type { DockerRuntimeOptions } from "./runtime";
export { DockerSandbox } from "./sandbox";
export { BUILD_REPOSITORY } from "./image";
export { dockerAvailable, dockerTestGate } from "./gate";
export { EXEC_MARKER } from "./kill-tree";
export { currentOwnerLabel, parseOwner } from "./owner";
export type { Owner } from "./owner";
