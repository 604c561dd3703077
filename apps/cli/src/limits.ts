import { DEFAULT_TRIAL_LIMITS, type RunLimits, type TrialLimits } from "@proctor/engine";
import type { ContainerConfig } from "@proctor/sandbox-docker";

/** `--memory-mb`, `--cpus`, `--pids-limit`, `--storage-mb` as given (0 = no limit, except processes). */
export interface LimitFlags {
  memoryMb?: number;
  cpus?: number;
  pidsLimit?: number;
  storageMb?: number;
}

type Key = keyof TrialLimits;
const KEYS: readonly Key[] = ["memoryMb", "cpus", "pidsLimit", "storageMb"];
const FLAG: Record<Key, string> = { memoryMb: "--memory-mb", cpus: "--cpus", pidsLimit: "--pids-limit", storageMb: "--storage-mb" };

/** A run's default limits and where each came from (for the run's header). */
export interface ResolvedLimits {
  /** Passed to the engine; undefined: the run has none (a resumed run that was started without). */
  limits: RunLimits | undefined;
  from: Partial<Record<Key, string>>;
}

/**
 * The default limits of a new `proctor run`, the server's (DEFAULT_TRIAL_LIMITS), changed by the
 * container config (`mem_limit`, `nano_cpus`, `pids_limit`; `mem_limit: null` = no memory limit),
 * then by the flags (0 = no limit). A task's own `[environment]` values still win in the engine.
 */
export function resolveRunLimits(flags: LimitFlags, container: ContainerConfig | undefined): ResolvedLimits {
  const defaults: TrialLimits = { ...DEFAULT_TRIAL_LIMITS };
  const from: Partial<Record<Key, string>> = Object.fromEntries(KEYS.map((k) => [k, "default"]));
  const set = (key: Key, value: number | null, source: string) => {
    if (value === null || value === 0) delete defaults[key];
    else defaults[key] = value;
    from[key] = source;
  };
  if (container?.memoryMb !== undefined) set("memoryMb", container.memoryMb, "--container-config");
  if (container?.cpus !== undefined) set("cpus", container.cpus, "--container-config");
  if (container?.pidsLimit !== undefined) set("pidsLimit", container.pidsLimit, "--container-config");
  for (const key of KEYS) {
    const value = flags[key];
    if (value !== undefined) set(key, value, FLAG[key]);
  }
  return { limits: { defaults }, from };
}

/** A resumed run's limits, exactly as run.json stored them. */
export function storedRunLimits(stored: Record<string, unknown> | undefined): ResolvedLimits {
  if (stored === undefined) return { limits: undefined, from: {} };
  const limits = stored as RunLimits;
  return { limits, from: Object.fromEntries(KEYS.filter((k) => limits.defaults?.[k] !== undefined).map((k) => [k, "run.json"])) };
}

/**
 * The run header's line, e.g. `limits per trial: memory 2048 MB (default), 4 CPUs
 * (--container-config), 1024 processes (default), disk none (--storage-mb); a task's own
 * [environment] values win`.
 */
export function describeLimits(resolved: ResolvedLimits, enforced: boolean): string {
  const d = resolved.limits?.defaults ?? {};
  const part = (key: Key, shown: (n: number) => string, none: string) => {
    const value = d[key];
    const source = resolved.from[key];
    return `${value === undefined ? none : shown(value)}${source ? ` (${source})` : ""}`;
  };
  const parts = [
    part("memoryMb", (n) => `memory ${n} MB`, "memory unlimited"),
    part("cpus", (n) => `${n} CPU${n === 1 ? "" : "s"}`, "CPUs unlimited"),
    part("pidsLimit", (n) => `${n} processes`, "processes: the runtime's cap"),
    part("storageMb", (n) => `disk ${n} MB`, "disk unlimited"),
  ];
  return `limits per trial: ${parts.join(", ")}; a task's own [environment] values win${enforced ? "" : " (not enforced on the local runtime)"}`;
}
