import { describe, expect, it } from "vitest";
import { buildExecResult, exitCodeFromSignal, OutputCollector } from "./output";

describe("OutputCollector", () => {
  it("keeps everything up to the cap", () => {
    const c = new OutputCollector(10);
    c.push(Buffer.from("hello "));
    c.push(Buffer.from("you!"));
    expect(c.text()).toBe("hello you!");
    expect(c.truncated).toBe(false);
  });

  it("keeps head and tail past the cap and says how much was cut", () => {
    const c = new OutputCollector(10);
    for (const part of ["01234", "56789", "abcde", "fghij", "XYZ"]) c.push(Buffer.from(part));
    expect(c.truncated).toBe(true);
    expect(c.totalBytes).toBe(23);
    expect(c.text()).toBe("01234\n[proctor: 13 bytes of output cut]\nijXYZ");
  });

  it("handles one chunk far larger than the cap", () => {
    const c = new OutputCollector(4);
    c.push(Buffer.from("start-" + "x".repeat(1000) + "-end"));
    expect(c.text()).toBe("st\n[proctor: 1006 bytes of output cut]\nnd");
  });

  it("does not split UTF-8 characters at the cut", () => {
    const c = new OutputCollector(6);
    c.push(Buffer.from("ééééé")); // 10 bytes
    const text = c.text();
    expect(text).not.toContain("\uFFFD");
    expect(text.startsWith("é")).toBe(true);
    expect(text.endsWith("é")).toBe(true);
  });
});

describe("buildExecResult", () => {
  it("reports truncation of either stream", () => {
    const out = new OutputCollector(3);
    const err = new OutputCollector(3);
    err.push(Buffer.from("abcd"));
    const r = buildExecResult({ exitCode: 2, stdout: out, stderr: err, durationMs: 12.4 });
    expect(r).toMatchObject({ exitCode: 2, stdout: "", truncated: true, timedOut: false, aborted: false, durationMs: 12 });
  });

  it("maps signals to 128 + number", () => {
    expect(exitCodeFromSignal("SIGKILL")).toBe(137);
    expect(exitCodeFromSignal("SIGTERM")).toBe(143);
    expect(exitCodeFromSignal(null)).toBe(-1);
  });
});
