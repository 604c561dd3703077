import { spawn, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { afterEach, describe, expect, it } from "vitest";
import { pidsWithEnv } from "./process";

const started: ChildProcess[] = [];

afterEach(() => {
  for (const child of started.splice(0)) child.kill("SIGKILL");
});

/** A sleeping process with exactly `env`; resolves once it runs (its environ is then readable). */
async function sleeper(env: Record<string, string>): Promise<number> {
  const child = spawn("sleep", ["60"], { env: { ...env, PATH: process.env.PATH ?? "/usr/bin:/bin" }, stdio: "ignore" });
  started.push(child);
  await new Promise<void>((resolve, reject) => child.once("spawn", resolve).once("error", reject));
  return child.pid!;
}

describe.runIf(process.platform === "linux")("pidsWithEnv", () => {
  it("finds the processes whose environment has name=value, first entry or not, and no others", async () => {
    const value = randomBytes(8).toString("hex");
    const first = await sleeper({ PROCTOR_TEST_MARK: value }); // the first entry: no NUL before it
    const later = await sleeper({ A: "1", PROCTOR_TEST_MARK: value });
    const prefixOnly = await sleeper({ PROCTOR_TEST_MARK: `${value}x` });
    const otherName = await sleeper({ XPROCTOR_TEST_MARK: value });
    const found = await pidsWithEnv("PROCTOR_TEST_MARK", value);
    expect(found.sort()).toEqual([first, later].sort());
    expect(found).not.toContain(prefixOnly);
    expect(found).not.toContain(otherName);
  });

  it("reads environments bigger than its first buffer (the marker after 200 KiB)", async () => {
    const value = randomBytes(8).toString("hex");
    const big = await sleeper({ FILLER: "x".repeat(100 * 1024), FILLER2: "y".repeat(100 * 1024), PROCTOR_TEST_MARK: value });
    const small = await sleeper({ PROCTOR_TEST_MARK: value });
    expect((await pidsWithEnv("PROCTOR_TEST_MARK", value)).sort()).toEqual([big, small].sort());
  });
});
