import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, test } from "vitest";
import { AgentConfigError } from "./errors";
import { installedAgent } from "./installed";
import { installKey } from "./installed-cache";
import { builtinInstalledAgent, hostArch, readInstalledAgent } from "./installed-def";
import { readPriceTable, withCost } from "./model-proxy";

const GOOD = `name = "mycli"
version = "1.2.3"
protocol = "openai-chat"
bin = "node_modules/mycli/bin/mycli-{arch}"
command = ["{bin}", "--model", "{model}", "--", "{instruction}"]
logs = ["{state_dir}/logs"]
[install]
npm = ["mycli@{version}"]
[env]
MYCLI_HOME = "{state_dir}"
`;

describe("agent.toml of installed agents", () => {
  let dir: string;
  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), "proctor-installed-def-"));
  });
  afterEach(() => rm(dir, { recursive: true, force: true }));

  test("a valid definition: version and arch filled where they install, run placeholders kept for each trial", async () => {
    await writeFile(join(dir, "agent.toml"), GOOD);
    const def = readInstalledAgent(dir);
    expect(def).toMatchObject({ name: "mycli", version: "1.2.3", protocol: "openai-chat", npm: ["mycli@1.2.3"], bin: `node_modules/mycli/bin/mycli-${hostArch().arch}`, command: ["{bin}", "--model", "{model}", "--", "{instruction}"], lockfile: null });
    expect(readInstalledAgent(dir, { version: "2.0.0" }).npm).toEqual(["mycli@2.0.0"]);
    // The cache key follows what decides the install.
    expect(await installKey(def)).toBe(await installKey(readInstalledAgent(dir)));
    expect(await installKey(def)).not.toBe(await installKey(readInstalledAgent(dir, { version: "2.0.0" })));
  });

  test.each([
    [GOOD.replace('protocol = "openai-chat"', 'protocol = "grpc"'), /protocol: Invalid option/],
    [GOOD.replace('"{instruction}"', '"{prompt}"'), /command: unknown placeholder \{prompt\}/],
    [GOOD.replace("mycli@{version}", "mycli@^1"), /\[install\] npm "mycli@\^1" must name an exact version/],
    [GOOD.replace('npm = ["mycli@{version}"]', ""), /install: \[install\] needs npm/],
    [GOOD.replace('bin = "node_modules', 'bin = "../../node_modules'), /bin: a path inside the install dir/],
    [`surprise = 1\n${GOOD}`, /Unrecognized key.*surprise/],
    ["name = ", /not valid TOML/],
  ])("a bad agent.toml is one error naming the file and field (%#)", async (text, message) => {
    await writeFile(join(dir, "agent.toml"), text);
    expect(() => readInstalledAgent(dir)).toThrow(AgentConfigError);
    expect(() => readInstalledAgent(dir)).toThrow(message);
    expect(() => readInstalledAgent(dir)).toThrow(join(dir, "agent.toml"));
  });

  test("the built-ins ship a lockfile for their default version only, and need the key's variable set", () => {
    const codex = builtinInstalledAgent("codex");
    expect(codex).toMatchObject({ name: "codex", protocol: "openai-responses", npm: [`@openai/codex@${codex.version}`] });
    expect(JSON.parse(codex.lockfile ?? "{}").packages[""].dependencies["@openai/codex"]).toBe(codex.version);
    expect(builtinInstalledAgent("codex", "0.170.0").lockfile).toBeNull();
    expect(builtinInstalledAgent("claude-code")).toMatchObject({ protocol: "anthropic-messages", env: { IS_SANDBOX: "1" } });
    const spec = { model: "m", baseUrl: "https://api.example.com/v1", apiKeyEnv: "PROCTOR_TEST_UNSET_KEY_VAR" };
    expect(() => installedAgent({ definition: codex, modelProxy: spec, env: {} })).toThrow("$PROCTOR_TEST_UNSET_KEY_VAR is not set");
    expect(installedAgent({ definition: codex, modelProxy: spec, env: { PROCTOR_TEST_UNSET_KEY_VAR: "k" } }).name).toBe(`codex@${codex.version}`);
  });
});

describe("cost from a price table", () => {
  test("withCost prices fresh, cached and cache-written input apart; readPriceTable names the file and the missing model", async () => {
    const dir = await mkdtemp(join(tmpdir(), "proctor-prices-"));
    try {
      const file = join(dir, "prices.json");
      await writeFile(file, JSON.stringify({ "gpt-x": { input: 2, output: 8, cache_read: 0.5 } }));
      const prices = readPriceTable(file, "gpt-x");
      expect(prices).toEqual({ input: 2, output: 8, cacheRead: 0.5 });
      // 1,000,000 in (200,000 of them cached), 100,000 out: 0.8 * 2 + 0.2 * 0.5 + 0.1 * 8 = 2.5 USD
      expect(withCost({ inputTokens: 1_000_000, outputTokens: 100_000, cacheReadTokens: 200_000, cacheWriteTokens: 0 }, prices).costUsd).toBe(2.5);
      expect(withCost({ inputTokens: 10, outputTokens: 1 }, undefined)).not.toHaveProperty("costUsd");
      expect(() => readPriceTable(file, "claude-y")).toThrow(`${file} has no entry for model "claude-y" (it has gpt-x)`);
      await writeFile(file, JSON.stringify({ "gpt-x": { input: "cheap", output: 8 } }));
      expect(() => readPriceTable(file, "gpt-x")).toThrow(/gpt-x\.input: .*USD per million tokens/);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
