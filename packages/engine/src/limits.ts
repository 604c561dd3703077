import { DEFAULT_TRIAL_LIMITS as SCHEMA_DEFAULT_TRIAL_LIMITS } from "@proctor/schema";
import type { TrialLimits } from "./trial/context";

/** The limits a trial's sandbox gets when neither its task nor its run sets one (defined with the run config's schema). */
export const DEFAULT_TRIAL_LIMITS: Readonly<Required<TrialLimits>> = SCHEMA_DEFAULT_TRIAL_LIMITS;
