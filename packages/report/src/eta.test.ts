import { describe, expect, test } from "vitest";
import { EtaEstimator } from "./eta";

function fakeClock(start = 1_000_000) {
  let t = start;
  return { now: () => t, advance: (ms: number) => (t += ms) };
}

describe("EtaEstimator", () => {
  test("unknown until the first trial finishes", () => {
    const clock = fakeClock();
    const eta = new EtaEstimator(clock.now);
    eta.start(10, 2);
    eta.trialStarted("a");
    clock.advance(60_000);
    expect(eta.etaMs()).toBeNull();
    expect(eta.meanTrialMs()).toBeNull();
  });

  test("image builds are left out: a long first build does not inflate the estimate", () => {
    const clock = fakeClock();
    const eta = new EtaEstimator(clock.now);
    eta.start(4, 1);
    eta.trialStarted("a__1");
    eta.imagePhase("a__1", "started");
    clock.advance(120_000); // a 2-minute build
    eta.imagePhase("a__1", "finished");
    clock.advance(10_000); // 10 s of work
    eta.trialFinished("a__1", 130_000, [{ phase: "environment", durationMs: 120_000 }, { phase: "agent", durationMs: 8_000 }]);
    expect(eta.meanTrialMs()).toBe(10_000);
    // 3 trials left, one at a time, 10 s each.
    expect(eta.etaMs()).toBe(30_000);
  });

  test("running trials count what they have left; concurrency divides the rest", () => {
    const clock = fakeClock();
    const eta = new EtaEstimator(clock.now);
    eta.start(6, 2);
    eta.trialStarted("a");
    eta.trialStarted("b");
    clock.advance(20_000);
    eta.trialFinished("a", 20_000, []);
    eta.trialStarted("c");
    clock.advance(5_000);
    // mean 20 s; b has 20 - 25 -> 0 left, c has 15 s left; 3 not started: 60 s; over 2 at once.
    expect(eta.etaMs()).toBe((0 + 15_000 + 60_000) / 2);
  });

  test("the run cannot end before its longest running trial, and a trial still building has all of its work ahead", () => {
    const clock = fakeClock();
    const eta = new EtaEstimator(clock.now);
    eta.start(2, 4);
    eta.trialStarted("a");
    eta.trialStarted("b");
    eta.imagePhase("b", "started");
    clock.advance(30_000);
    eta.trialFinished("a", 30_000, []);
    clock.advance(60_000); // b still building
    expect(eta.etaMs()).toBe(30_000);
  });

  test("a retry starts the trial's clock over", () => {
    const clock = fakeClock();
    const eta = new EtaEstimator(clock.now);
    eta.start(3, 1);
    eta.trialStarted("a");
    clock.advance(10_000);
    eta.trialFinished("a", 10_000, []);
    eta.trialStarted("b");
    clock.advance(9_000);
    eta.trialStarted("b"); // infra retry
    clock.advance(1_000);
    // b has 9 s left (not 0), c is a whole 10 s.
    expect(eta.etaMs()).toBe(19_000);
  });
});
