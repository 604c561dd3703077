import type { PhaseTiming } from "@proctor/schema";

interface Running {
  startedAt: number;
  /** Time spent resolving the image (pull/build) so far, finished stretches only. */
  imageMs: number;
  /** When the current image phase started, if one is under way. */
  imageSince: number | null;
}

/**
 * Estimates the time left in a run from the trials that finished, leaving out the time spent
 * getting images (pulls and builds happen once per image, so counting them would inflate every
 * later estimate: a first ETA of 1h29m for a 23-minute run). Unknown until a trial finishes.
 */
export class EtaEstimator {
  private readonly running = new Map<string, Running>();
  private workMs = 0;
  private finished = 0;
  private total = 0;
  private concurrency = 1;
  private done = 0;

  constructor(private readonly now: () => number = Date.now) {}

  /** The run's size: trials still to run (after a resume) and how many run at once. */
  start(remainingTrials: number, concurrency: number): void {
    this.total = remainingTrials;
    this.concurrency = Math.max(1, concurrency);
  }

  trialStarted(trialId: string): void {
    // A retry starts the trial over: its earlier try's time is not work toward the result.
    this.running.set(trialId, { startedAt: this.now(), imageMs: 0, imageSince: null });
  }

  /** The image phase ("environment") of a running trial started or finished. */
  imagePhase(trialId: string, status: "started" | "finished"): void {
    const r = this.running.get(trialId);
    if (!r) return;
    if (status === "started") r.imageSince ??= this.now();
    else if (r.imageSince !== null) {
      r.imageMs += this.now() - r.imageSince;
      r.imageSince = null;
    }
  }

  /** A trial finished; its duration less its image phase counts toward the mean. */
  trialFinished(trialId: string, durationMs: number, phases: readonly PhaseTiming[]): void {
    this.running.delete(trialId);
    const imageMs = phases.filter((p) => p.phase === "environment").reduce((sum, p) => sum + p.durationMs, 0);
    this.workMs += Math.max(0, durationMs - imageMs);
    this.finished += 1;
    this.done += 1;
  }

  /** Mean work time of a finished trial, null before the first finishes. */
  meanTrialMs(): number | null {
    return this.finished === 0 ? null : this.workMs / this.finished;
  }

  /**
   * Milliseconds left, or null while unknown. Each running trial has about (mean - its work so
   * far) to go, each trial not yet started a whole mean; `concurrency` of them run at once, and
   * the run cannot end before its longest running trial does.
   */
  etaMs(): number | null {
    const mean = this.meanTrialMs();
    if (mean === null) return null;
    const now = this.now();
    let longest = 0;
    let work = 0;
    for (const r of this.running.values()) {
      const image = r.imageMs + (r.imageSince !== null ? now - r.imageSince : 0);
      const left = Math.max(0, mean - Math.max(0, now - r.startedAt - image));
      longest = Math.max(longest, left);
      work += left;
    }
    const notStarted = Math.max(0, this.total - this.done - this.running.size);
    work += notStarted * mean;
    return Math.max(longest, work / this.concurrency);
  }
}
