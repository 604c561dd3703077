import { describe, expect, test } from "vitest";
import { findProvider } from "@pydantic/genai-prices";
import { CostMeter, PRICE_LIBRARY, flatCost, isPriced, priceRequest } from "./pricing";

/** Claude Sonnet 4.5's prices from the library's own data: [base, price past the tier] per million tokens. */
function sonnet(key: string): [number, number, number] {
  const model = findProvider({ providerId: "anthropic" })?.models.find((m) => m.id === "claude-sonnet-4-5");
  const price = (model?.prices as Record<string, { base: number; tiers: { start: number; price: number }[] }>)[key];
  if (!price?.tiers[0]) throw new Error(`no tiered ${key}`);
  return [price.base, price.tiers[0].price, price.tiers[0].start];
}

describe("pricing", () => {
  test("a request is priced from the library's data: fresh input, cache reads, cache writes and output apart, at the tier its input reached", () => {
    const [input, inputLong, start] = sonnet("input_mtok");
    const [read, readLong] = sonnet("cache_read_mtok");
    const [write, writeLong] = sonnet("cache_write_mtok");
    const [output, outputLong] = sonnet("output_mtok");
    const small = { inputTokens: 10_000, cacheReadTokens: 6_000, cacheWriteTokens: 1_000, outputTokens: 500 };
    const byHand = (3_000 * input + 6_000 * read + 1_000 * write + 500 * output) / 1e6;
    expect(priceRequest("claude-sonnet-4-5", small)).toEqual({ costUsd: expect.closeTo(byHand, 9), pricedAs: "anthropic/claude-sonnet-4-5" });
    const big = { inputTokens: start + 50_000, cacheReadTokens: 100_000, cacheWriteTokens: 20_000, outputTokens: 2_000 };
    const fresh = big.inputTokens - 120_000;
    const byHandLong = (fresh * inputLong + 100_000 * readLong + 20_000 * writeLong + 2_000 * outputLong) / 1e6;
    expect(priceRequest("claude-sonnet-4-5", big).costUsd).toBeCloseTo(byHandLong, 9);
    // A meter prices each request at its own tier: the sum is not the sum's price.
    const meter = new CostMeter("claude-sonnet-4-5");
    meter.add(small);
    meter.add(big);
    expect(meter.costUsd).toBeCloseTo(byHand + byHandLong, 6);
  });

  test("the provider comes from the base URL or a provider/ prefix; an unknown model is unpriced with the reason, never $0; a price table wins", () => {
    const usage = { inputTokens: 1_000_000, outputTokens: 0 };
    expect(priceRequest("anthropic/claude-sonnet-4.5", usage, { baseUrl: "https://openrouter.ai/api/v1" })).toMatchObject({ pricedAs: expect.stringMatching(/^openrouter\//) });
    expect(priceRequest("openai/gpt-4o", usage)).toMatchObject({ pricedAs: "openai/gpt-4o" });
    const unknown = priceRequest("my-vllm-model", usage);
    expect(unknown).toEqual({ costUsd: null, unpriced: `no price for model "my-vllm-model" in ${PRICE_LIBRARY.name} ${PRICE_LIBRARY.version} (give its prices with --price-table FILE)` });
    expect(isPriced("my-vllm-model")).toBe(false);
    const meter = new CostMeter("my-vllm-model");
    meter.add(usage);
    expect(meter.costUsd).toBeNull();
    expect(meter.fields()).toEqual({ unpriced: expect.stringContaining("my-vllm-model") });
    const prices = { input: 2, output: 8, cacheRead: 0.5 };
    expect(priceRequest("my-vllm-model", { inputTokens: 1_000_000, cacheReadTokens: 500_000, outputTokens: 100_000 }, { prices })).toEqual({ costUsd: 0.5 * 2 + 0.5 * 0.5 + 0.1 * 8, pricedAs: "price table" });
    expect(flatCost({ inputTokens: 1_000_000, cacheWriteTokens: 1_000_000, outputTokens: 0 }, { input: 3, output: 15 })).toBe(3);
    expect(PRICE_LIBRARY.version).toMatch(/^\d+\.\d+\.\d+/);
  });
});
