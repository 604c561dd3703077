import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { calcPrice } from "@pydantic/genai-prices";

/** Token counts of one model request; `inputTokens` includes the cached ones (read and written). */
export interface TokenCounts {
  inputTokens: number;
  outputTokens: number;
  cacheReadTokens?: number;
  cacheWriteTokens?: number;
}

/** Flat prices of one model in USD per million tokens (`--price-table`); cache prices default to the input price. */
export interface FlatPrices {
  input: number;
  output: number;
  cacheRead?: number;
  cacheWrite?: number;
}

/** Where prices come from, as recorded in run.json and summary.json. */
export interface PriceSource {
  /** "@pydantic/genai-prices", or "price-table" for a `--price-table` file. */
  name: string;
  /** The library's version (its bundled price data), or the price table's path. */
  version: string;
}

/** What one request (or a sum of them) cost: a number, or why there is none. Never $0 for "unknown". */
export type PriceResult = { costUsd: number; pricedAs: string } | { costUsd: null; unpriced: string };

/** The price library's package version: the data its bundled prices were published with. */
function libraryVersion(): string {
  try {
    // The package's exports map has no ./package.json: find it beside the entry it resolves to.
    const entry = createRequire(import.meta.url).resolve("@pydantic/genai-prices");
    const pkg = JSON.parse(readFileSync(join(dirname(entry), "..", "package.json"), "utf8")) as { version?: unknown };
    return typeof pkg.version === "string" ? pkg.version : "unknown";
  } catch {
    return "unknown";
  }
}

/** The maintained price table Proctor prices models with by default. */
export const PRICE_LIBRARY: PriceSource = Object.freeze({ name: "@pydantic/genai-prices", version: libraryVersion() });

/** Rounds to a millionth of a dollar (sums of float prices drift below that). */
export function roundUsd(usd: number): number {
  return Math.round(usd * 1e6) / 1e6;
}

/** The cost of `usage` at flat per-million prices. */
export function flatCost(usage: TokenCounts, prices: FlatPrices): number {
  const read = usage.cacheReadTokens ?? 0;
  const write = usage.cacheWriteTokens ?? 0;
  const fresh = Math.max(0, usage.inputTokens - read - write);
  const micro = fresh * prices.input + read * (prices.cacheRead ?? prices.input) + write * (prices.cacheWrite ?? prices.input) + usage.outputTokens * prices.output;
  return micro / 1e6;
}

/**
 * What one model request cost. With `prices` (a `--price-table` entry) at those flat prices;
 * otherwise from @pydantic/genai-prices' data: the provider is matched by the request's base URL
 * (OpenAI, Anthropic, OpenRouter, ...), else by the model's name (`provider/name` names the
 * provider); its cache-read, cache-write and long-context tier prices apply per request, as
 * providers bill them. A model the data does not know is unpriced, with the reason.
 */
export function priceRequest(model: string, usage: TokenCounts, options: { prices?: FlatPrices; baseUrl?: string } = {}): PriceResult {
  if (options.prices) return { costUsd: flatCost(usage, options.prices), pricedAs: "price table" };
  const counts = {
    input_tokens: usage.inputTokens,
    output_tokens: usage.outputTokens,
    ...(usage.cacheReadTokens ? { cache_read_tokens: usage.cacheReadTokens } : {}),
    ...(usage.cacheWriteTokens ? { cache_write_tokens: usage.cacheWriteTokens } : {}),
  };
  const slash = model.indexOf("/");
  const attempts: { name: string; options: { providerApiUrl?: string; providerId?: string } }[] = [
    ...(options.baseUrl ? [{ name: model, options: { providerApiUrl: options.baseUrl } }] : []),
    { name: model, options: {} },
    ...(slash > 0 ? [{ name: model.slice(slash + 1), options: { providerId: model.slice(0, slash) } }] : []),
  ];
  for (const attempt of attempts) {
    let found: ReturnType<typeof calcPrice> = null;
    try {
      found = calcPrice(counts, attempt.name, attempt.options);
    } catch {
      // usage the data cannot split (e.g. cache counts above the input count): try the next match
    }
    if (found) return { costUsd: found.total_price, pricedAs: `${found.provider.id}/${found.model.id}` };
  }
  return { costUsd: null, unpriced: `no price for model "${model}" in ${PRICE_LIBRARY.name} ${PRICE_LIBRARY.version} (give its prices with --price-table FILE)` };
}

/** Whether `model` has a price (from `prices`, or the price library). */
export function isPriced(model: string, options: { prices?: FlatPrices; baseUrl?: string } = {}): boolean {
  return priceRequest(model, { inputTokens: 1, outputTokens: 1 }, options).costUsd !== null;
}

/**
 * Sums the cost of a trial's requests, each priced on its own (long-context tiers apply per
 * request). One unpriced request makes the whole unpriced: a partial sum would read as the cost.
 */
export class CostMeter {
  private total = 0;
  private unpriced: string | null = null;
  private pricedAs: string | null = null;

  constructor(
    private readonly model: string,
    private readonly options: { prices?: FlatPrices; baseUrl?: string } = {},
  ) {}

  /** Adds one request's usage; returns its cost (null when unpriced). */
  add(usage: TokenCounts): number | null {
    if (usage.inputTokens === 0 && usage.outputTokens === 0) return 0;
    const priced = priceRequest(this.model, usage, this.options);
    if (priced.costUsd === null) {
      this.unpriced ??= priced.unpriced;
      return null;
    }
    this.pricedAs ??= priced.pricedAs;
    this.total += priced.costUsd;
    return priced.costUsd;
  }

  /** The cost so far in USD; null once a request was unpriced. */
  get costUsd(): number | null {
    return this.unpriced === null ? roundUsd(this.total) : null;
  }

  /** Fields for result.json's `agent.usage`: `costUsd` and `pricedAs`, or `unpriced` with its reason. */
  fields(): { costUsd: number; pricedAs?: string } | { unpriced: string } {
    if (this.unpriced !== null) return { unpriced: this.unpriced };
    return { costUsd: roundUsd(this.total), ...(this.pricedAs ? { pricedAs: this.pricedAs } : {}) };
  }
}
