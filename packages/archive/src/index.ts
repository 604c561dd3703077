export { packDirectory, packFiles } from "./pack";
export type { PackDirectoryOptions, PackFileEntry } from "./pack";
export {
  ArchiveError,
  UnsafePathError,
  LinkEscapeError,
  LimitExceededError,
  UnsupportedEntryError,
  CorruptArchiveError,
  UnknownFormatError,
  DestinationNotEmptyError,
  ArchiveAbortedError,
} from "./errors";
export type { ArchiveErrorCode, ArchiveErrorOptions, ArchiveFormat, LimitName } from "./errors";
export { extractArchive } from "./extract";
export type { ExtractOptions, ExtractResult } from "./extract";
export { DEFAULT_LIMITS } from "./limits";
export type { ExtractLimits } from "./limits";
