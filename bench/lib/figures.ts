/**
 * How a bench reports what it measured: one `BENCH_RESULT {json}` line per figure on stdout.
 * `bench/run.ts` (`pnpm bench`) collects these lines from every bench into one table, so the
 * table is built from the measurements of that run, never from numbers written down earlier.
 */

/** A measured value and its unit ("ms", "s", "/s", "MB"). */
export interface Measured {
  value: number;
  unit: string;
}

/** What a figure must reach: `on` the ratio or on Proctor's own value. */
export interface Target {
  on: "ratio" | "proctor";
  op: ">=" | "<=" | "<" | ">";
  value: number;
  unit?: string;
}

export interface BenchFigure {
  /** Which bench measured it (the folder name under bench/). */
  bench: string;
  /** What is measured, e.g. "exec `true`, p50 (runtime vs docker exec)". */
  figure: string;
  /** Proctor's value. */
  proctor: Measured;
  /** The baseline measured in the same run, and what it is. */
  baseline: (Measured & { label: string }) | null;
  /** The ratio the bench's README names (its direction is in `ratioMeaning`). */
  ratio: number | null;
  /** e.g. "proctor / docker CLI" or "reference time / package time". */
  ratioMeaning: string;
  target: Target | null;
  /** Set when the figure could not be measured here; says why. */
  skipped?: string;
}

export const RESULT_PREFIX = "BENCH_RESULT ";

/** Writes one figure as a machine-readable line for `pnpm bench`. */
export function reportFigure(figure: BenchFigure): void {
  process.stdout.write(`${RESULT_PREFIX}${JSON.stringify(figure)}\n`);
}

/** Whether the figure meets its target; null when it has none or was not measured. */
export function targetMet(figure: BenchFigure): boolean | null {
  const { target } = figure;
  if (target === null || figure.skipped !== undefined) return null;
  const value = target.on === "ratio" ? figure.ratio : figure.proctor.value;
  if (value === null || !Number.isFinite(value)) return null;
  switch (target.op) {
    case ">=":
      return value >= target.value;
    case "<=":
      return value <= target.value;
    case "<":
      return value < target.value;
    case ">":
      return value > target.value;
  }
}
