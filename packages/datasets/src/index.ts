export { DatasetError, SourceSpecError, RegistryError, UnknownDatasetError, FetchError } from "./errors";
export { parseSourceSpec, parseDatasetName, isCommitId } from "./spec";
export type { SourceSpec } from "./spec";
export { parseRegistry, loadRegistry, findDataset, DEFAULT_REGISTRY_URL } from "./registry";
export type { Registry, RegistryDataset, RegistryTask, LoadRegistryOptions } from "./registry";
export { DatasetCache, defaultCacheDir, formatBytes } from "./cache";
export type { Pin, CacheEntry, EnsureOptions } from "./cache";
export { resolveSources, datasetVersion } from "./resolve";
export type { ResolvedDir, ResolveOptions } from "./resolve";
