import type { TrialLimits } from "./trial/context";

/**
 * The limits a trial's sandbox gets when neither its task nor the run sets one: what the server
 * gives every upload and `proctor run` gives every task. A task's own `[environment]` values win.
 */
export const DEFAULT_TRIAL_LIMITS: Readonly<Required<TrialLimits>> = Object.freeze({ memoryMb: 2048, cpus: 2, pidsLimit: 1024, storageMb: 5120 });
