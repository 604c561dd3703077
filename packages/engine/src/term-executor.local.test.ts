import { mkdtempSync, readdirSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { LocalRuntime } from "@proctor/sandbox";
import { afterAll, describe, expect, test } from "vitest";
import { termExecutorSuite } from "./testing/term-executor-suite";

describe("term-executor archives on the local runtime", () => {
  const sandboxes = mkdtempSync(join(tmpdir(), "proctor-te-local-sandboxes-"));
  const started = Date.now();
  afterAll(() => rmSync(sandboxes, { recursive: true, force: true }));
  // The local runtime cannot isolate the verifier (term-executor tasks ask for it); these agents are trusted.
  termExecutorSuite("local", () => new LocalRuntime({ rootDir: sandboxes }), { isolateVerifier: false });

  test("the checks ran leave nothing of the verifier's in the host's /tmp (no HOME made per exec)", () => {
    const made = readdirSync("/tmp").filter((name) => name.startsWith("proctor-home.") && statSync(join("/tmp", name)).mtimeMs >= started - 1000);
    expect(made).toEqual([]);
  });
});
