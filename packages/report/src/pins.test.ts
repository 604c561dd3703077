import { describe, expect, test } from "vitest";
import type { Pins } from "@proctor/schema";
import { diffPins, pinsWarning } from "./pins";

const hex = (c: string) => c.repeat(64);

function pins(over: Partial<Pins> = {}): Pins {
  return {
    proctor: "0.1.0",
    agent: { name: "claude-code", version: "1.0.3", hash: null },
    model: "claude-sonnet-4-5",
    tasks: {
      "fix-bug": { digest: hex("a"), image: "proctor/base:bookworm", imageId: `sha256:${hex("1")}` },
      x: { digest: hex("0"), image: "img:x", imageId: `sha256:${hex("2")}`, origin: { dataset: { name: "tb2", version: "1.0" }, repository: "https://example.com/tb2.git", commit: hex("e").slice(0, 40), path: "x" } },
    },
    ...over,
  };
}

describe("pins that differ between two runs", () => {
  test("each differing pin is named with both values; equal pins say nothing", () => {
    expect(diffPins(pins(), pins())).toEqual([]);
    expect(pinsWarning(pins(), pins())).toBeNull();
    const b = pins({
      proctor: "0.2.0",
      agent: { name: "claude-code", version: "1.0.4", hash: null },
      tasks: {
        "fix-bug": { digest: hex("c"), image: "proctor/base:bookworm", imageId: `sha256:${hex("1")}` },
        x: { digest: hex("0"), image: "img:x", imageId: `sha256:${hex("3")}`, origin: { dataset: { name: "tb2", version: "1.1" }, repository: "https://example.com/tb2.git", commit: hex("f").slice(0, 40), path: "x" } },
        "only-in-b": { digest: hex("d"), image: null, imageId: null },
      },
    });
    expect(pinsWarning(pins(), b)).toBe(
      `pins differ: Proctor 0.1.0 vs 0.2.0, agent version 1.0.3 vs 1.0.4, task fix-bug content (${hex("a").slice(0, 12)} vs ${hex("c").slice(0, 12)}), ` +
        `image of task x (img:x ${hex("2").slice(0, 12)} vs img:x ${hex("3").slice(0, 12)}), origin of task x (tb2@1.0 eeeeeeeeeeee vs tb2@1.1 ffffffffffff)`,
    );
  });

  test("an image no trial resolved is no difference; a run without pins is named", () => {
    const unresolved = pins({ tasks: { ...pins().tasks, "fix-bug": { digest: hex("a"), image: null, imageId: null } } });
    expect(diffPins(pins(), unresolved)).toEqual([]);
    expect(diffPins(null, pins())).toEqual(["A records no pins (made before Proctor recorded them)"]);
    expect(diffPins(null, null)).toEqual([]);
  });
});
