export { EventBus, DEFAULT_REPLAY_BUFFER } from "./bus";
export type { EventBusOptions, EventListener, GapNotice, SubscribeOptions } from "./bus";
export { JsonlSink } from "./sink";
export type { JsonlSinkOptions } from "./sink";
export { readJsonl } from "./read";
export { writeJsonAtomic } from "./write";
export type { ReadJsonlOptions, JsonlContents } from "./read";
export { RingBuffer } from "./ring";
export {
  EventsError,
  EventBusClosedError,
  ReplayGapError,
  JsonlWriteError,
  JsonlClosedError,
  JsonlReadError,
  JsonlParseError,
} from "./errors";
