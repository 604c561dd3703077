export { startServer, isLoopback, ServerConfigError } from "./server";
export type { StartServerOptions, RunningServer } from "./server";
export { submitBatch, uploadArchive, followBatch, requestJson, authHeaders } from "./client";
export type { SubmitBatchOptions, ClientAuth, BatchStatusJson } from "./client";
export type { SubmitResult, ServerModelProxy } from "./batches";
export type { AuthMode } from "./auth";
export { AUTH_MODES } from "./auth";
export type { WireEnvelope, WireEventName, BatchStatus } from "./wire";
export {
  ServerError,
  BadRequestError,
  InvalidArchiveError,
  UnauthorizedError,
  ForbiddenError,
  NotFoundError,
  ConflictError,
  PayloadTooLargeError,
  QueueFullError,
  UnavailableError,
  ClientError,
} from "./errors";
