import type { RunCost } from "@proctor/schema";

/** USD with four decimals, six below a cent (a trial's compute can cost millionths). */
export const usd = (x: number) => `$${x !== 0 && Math.abs(x) < 0.01 ? x.toFixed(6) : x.toFixed(4)}`;

/**
 * A run's cost in one line: the total with its parts, per trial and per pass, and where the
 * prices come from; trials without a price are counted apart, never as $0.
 */
export function describeCost(c: RunCost): string {
  const source = c.source ? (c.source.name === "price-table" ? `prices from ${c.source.version}` : `prices from ${c.source.name} ${c.source.version}`) : null;
  const unpriced = c.unpricedTrials > 0 ? `${c.unpricedTrials} trial(s) unpriced${c.unpricedReasons[0] ? `: ${c.unpricedReasons[0]}` : ""}` : null;
  if (c.totalUsd === null) return `unpriced (${[unpriced, source].filter(Boolean).join("; ")})`;
  const parts = c.computeUsd !== null ? ` (tokens ${usd(c.tokensUsd ?? 0)} + compute ${usd(c.computeUsd)}${c.cpuSeconds !== null ? ` for ${c.cpuSeconds} CPU-seconds` : ""})` : "";
  const per = [c.perTrialUsd !== null ? `${usd(c.perTrialUsd)} per trial` : null, c.perPassUsd !== null ? `${usd(c.perPassUsd)} per pass` : "no pass to price"].filter(Boolean).join(", ");
  return `${usd(c.totalUsd)}${parts} over ${c.pricedTrials} priced trial(s); ${per}${unpriced ? `; ${unpriced}` : ""}${source ? `; ${source}` : ""}`;
}
