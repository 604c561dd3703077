export { startServer, isLoopback, ServerConfigError } from "./server";
export type { StartServerOptions, RunningServer } from "./server";
export type { ServerModelProxy } from "./batches";
export type { AgentImageLimits } from "./agent-image";
export type { AuthMode } from "@proctor/auth";
export { AUTH_MODES } from "@proctor/auth";
export {
  ServerError,
  BadRequestError,
  InvalidArchiveError,
  UnauthorizedError,
  ForbiddenError,
  NotFoundError,
  ConflictError,
  PayloadTooLargeError,
  ServerQueueFullError as QueueFullError,
  UnavailableError,
} from "./errors";
