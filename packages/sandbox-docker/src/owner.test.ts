import { spawn } from "node:child_process";
import { hostname } from "node:os";
import { describe, expect, it } from "vitest";
import { currentOwnerLabel, formatOwner, ownerIsGone, parseOwner, processStartTime } from "./owner";

describe("owner labels", () => {
  it("round-trips and rejects other shapes", () => {
    const owner = { host: "box:1", pid: 42, startTime: "777" };
    expect(parseOwner(formatOwner(owner))).toEqual(owner);
    expect(parseOwner("box:42:unknown")).toEqual({ host: "box", pid: 42, startTime: null });
    expect(parseOwner("worker-7")).toBeNull();
    expect(parseOwner(undefined)).toBeNull();
  });

  it("this process is alive; an exited child and a reused pid are gone", async () => {
    const self = parseOwner(currentOwnerLabel());
    if (self === null) throw new Error("the owner label of this process does not parse");
    expect(ownerIsGone(self)).toBe(false);

    const child = spawn(process.execPath, ["-e", "setTimeout(() => {}, 10000)"]);
    const pid = child.pid ?? -1;
    expect(pid).toBeGreaterThan(0);
    const start = processStartTime(pid);
    // Linux (where CI runs) has /proc, so the start time is known and a reused pid is detected;
    // elsewhere it is null and the pid alone decides.
    expect(start).toEqual(process.platform === "linux" ? expect.stringMatching(/^\d+$/) : null);
    expect(ownerIsGone({ host: hostname(), pid, startTime: start })).toBe(false);
    expect(ownerIsGone({ host: hostname(), pid, startTime: `${start ?? 0}1` })).toBe(process.platform === "linux");
    await new Promise((resolve) => {
      child.on("exit", resolve);
      child.kill("SIGKILL");
    });
    expect(ownerIsGone({ host: hostname(), pid, startTime: start })).toBe(true);
    expect(ownerIsGone({ host: `${hostname()}-elsewhere`, pid, startTime: start })).toBe(false);
  });
});
