import { describe, expect, it } from "vitest";
import { SandboxError } from "./errors";
import { hostPathOf, normalizeSandboxPath, sandboxPathEnv } from "./paths";

describe("sandbox paths", () => {
  it("maps absolute and relative paths under the root", () => {
    expect(hostPathOf("/tmp/r", "/app")).toBe("/tmp/r/app");
    expect(hostPathOf("/tmp/r", "/logs/verifier/reward.txt")).toBe("/tmp/r/logs/verifier/reward.txt");
    expect(hostPathOf("/tmp/r", "src/x.py", "/app")).toBe("/tmp/r/app/src/x.py");
    expect(hostPathOf("/tmp/r", "/")).toBe("/tmp/r");
    expect(normalizeSandboxPath("/app/./a/../b//")).toBe("/app/b");
  });

  it("refuses paths that climb out of the root", () => {
    expect(() => hostPathOf("/tmp/r", "/../etc/passwd")).toThrow(SandboxError);
    expect(() => hostPathOf("/tmp/r", "/app/../../x")).toThrow(/climbs above/);
    expect(() => hostPathOf("/tmp/r", "../../x", "/app")).toThrow(/climbs above/);
    expect(() => hostPathOf("/tmp/r", "/.proctor-sandbox/owner.json")).toThrow(/reserved/);
    expect(() => hostPathOf("/tmp/r", "")).toThrow(SandboxError);
  });

  it("names every standard dir in env", () => {
    expect(sandboxPathEnv("/r", "/testbed")).toEqual({
      PROCTOR_WORKDIR: "/r/testbed",
      PROCTOR_LOGS_DIR: "/r/logs",
      PROCTOR_AGENT_LOGS_DIR: "/r/logs/agent",
      PROCTOR_VERIFIER_LOGS_DIR: "/r/logs/verifier",
      PROCTOR_TESTS_DIR: "/r/tests",
      PROCTOR_SOLUTION_DIR: "/r/solution",
      PROCTOR_AGENT_DIR: "/r/agent",
    });
  });
});
