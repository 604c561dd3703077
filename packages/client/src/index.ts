export { ProctorClient, submitBatch, uploadArchive, followBatch, requestJson, authHeaders } from "./client";
export type { ClientAuth, SubmitBatchOptions, FollowOptions } from "./client";
export { ClientError } from "./errors";
export {
  BatchStatus,
  WireEventName,
  WireEnvelope,
  ErrorBody,
  BatchParams,
  TaskParams,
  WsQuery,
  submitQuery,
  BudgetFields,
  SubmitResponse,
  BatchStatusResponse,
  TaskJson,
  BatchTasksResponse,
  TaskDetailResponse,
  BatchListResponse,
  HealthResponse,
  StatusResponse,
  SnapshotData,
  DROPPABLE_EVENTS,
  toWire,
  taskCompleteData,
  batchCompleteData,
} from "./wire";
export { batchStatusJson, taskJson, taskDetailJson, batchFeed } from "./batch-views";
export type { BatchStateView, TaskStateView, BatchUpdateView, LiveBatchView } from "./batch-views";
export { SlotsClient, Slot, SlotCreated, SlotExecResult, SlotTestResult, SlotVerifyResult, PoolStats } from "./slots";
export type { SlotCreateOptions, SlotExecOptions } from "./slots";
export { WsHub, DEFAULT_WS_OPTIONS, CLOSE_CODES } from "./ws-hub";
export type { WsFeed, WsHubOptions, WsHubMetrics } from "./ws-hub";
