import { availableParallelism, totalmem } from "node:os";
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

/** What this host offers trials: its CPUs and memory (the cgroup's limit when lower). */
export interface HostCapacity {
  cpus: number;
  memoryMb: number;
}

export function hostCapacity(): HostCapacity {
  const total = totalmem();
  const constrained = typeof process.constrainedMemory === "function" ? process.constrainedMemory() : 0;
  const bytes = constrained && constrained > 0 && constrained < total ? constrained : total;
  return { cpus: availableParallelism(), memoryMb: Math.floor(bytes / 2 ** 20) };
}

/** `-n`'s default: never warned about, whatever the host. */
const DEFAULT_CONCURRENCY = 4;

/**
 * The warning for a `-n` larger than the host holds, or null. The host holds as many trials at
 * once as its CPUs and its memory fit at the run's default limits per trial (a trial without a
 * CPU limit counted as one CPU; without a memory limit, memory is not counted). Only trials that
 * can start together count (`-n` past the run's trial count starts no more), and the default
 * `-n` is never warned about.
 */
export function concurrencyWarning(concurrency: number, trials: number, limits: TrialLimits, host: HostCapacity): string | null {
  if (concurrency <= DEFAULT_CONCURRENCY) return null;
  const atOnce = Math.min(concurrency, trials);
  const cpusPerTrial = limits.cpus ?? 1;
  const byCpus = Math.floor(host.cpus / cpusPerTrial);
  const byMemory = limits.memoryMb !== undefined ? Math.floor(host.memoryMb / limits.memoryMb) : null;
  const holds = Math.max(1, byMemory === null ? byCpus : Math.min(byCpus, byMemory));
  if (atOnce <= holds) return null;
  const plural = (n: number, word: string) => `${n} ${word}${n === 1 ? "" : "s"}`;
  const perTrial = [limits.cpus === undefined ? "1 CPU (no CPU limit)" : plural(limits.cpus, "CPU"), ...(limits.memoryMb !== undefined ? [`${limits.memoryMb} MB`] : [])].join(" and ");
  const fits = [`${plural(host.cpus, "CPU")}: ${byCpus}`, ...(byMemory !== null ? [`${host.memoryMb} MB memory: ${byMemory}`] : [])].join("; ");
  const which = atOnce < concurrency ? `all of the run's ${plural(trials, "trial")}` : `of the run's ${trials}`;
  return (
    `warning: -n ${concurrency}: ${atOnce} trials would run at once (${which}), but this host holds about ${holds} at ${perTrial} per trial (${fits}); ` +
    `past that, trials share CPUs and memory, run slower and may time out or run out of memory. Going on (-n ${holds} fits)`
  );
}
