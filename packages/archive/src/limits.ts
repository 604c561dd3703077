import type { LimitName } from "./errors";

/** Bounds one extraction enforces. Byte sizes are bytes; every limit is checked while streaming. */
export interface ExtractLimits {
  /** Size of the archive as uploaded (compressed), counted as bytes arrive. Default 500 MiB. */
  maxCompressedBytes: number;
  /** Sum of all extracted file sizes. Default 2 GiB. */
  maxTotalBytes: number;
  /** Number of entries (files, directories, links). Default 100,000. */
  maxEntries: number;
  /** Size of any one extracted file. Default 1 GiB. */
  maxFileBytes: number;
  /** Uncompressed : compressed bytes over the whole archive (zip bombs). Default 1000. */
  maxCompressionRatio: number;
  /** The ratio is only enforced once this many uncompressed bytes came out. Default 8 MiB. */
  compressionRatioGraceBytes: number;
  /** Directory levels in one entry path. Default 64. */
  maxPathDepth: number;
  /** Bytes (UTF-8) in one path component. Default 255. */
  maxNameLength: number;
  /** Bytes (UTF-8) in a whole entry path or link target. Default 4096. */
  maxPathLength: number;
}

const MiB = 1024 * 1024;

export const DEFAULT_LIMITS: Readonly<ExtractLimits> = Object.freeze({
  maxCompressedBytes: 500 * MiB,
  maxTotalBytes: 2048 * MiB,
  maxEntries: 100_000,
  maxFileBytes: 1024 * MiB,
  maxCompressionRatio: 1000,
  compressionRatioGraceBytes: 8 * MiB,
  maxPathDepth: 64,
  maxNameLength: 255,
  maxPathLength: 4096,
});

/** Defaults overlaid with the caller's values; throws a TypeError for a value that is not a positive number. */
export function resolveLimits(limits: Partial<ExtractLimits> = {}): ExtractLimits {
  const resolved: ExtractLimits = { ...DEFAULT_LIMITS };
  for (const [key, value] of Object.entries(limits) as [keyof ExtractLimits, unknown][]) {
    if (value === undefined) continue;
    if (!(key in DEFAULT_LIMITS)) throw new TypeError(`unknown archive limit "${key}"; known limits: ${Object.keys(DEFAULT_LIMITS).join(", ")}`);
    if (typeof value !== "number" || Number.isNaN(value) || value < 0) {
      throw new TypeError(`archive limit ${key} must be a non-negative number, got ${String(value)}`);
    }
    resolved[key] = value;
  }
  return resolved;
}

export type { LimitName };
