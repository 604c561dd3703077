import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { LocalRuntime } from "@proctor/sandbox";
import { afterAll, describe } from "vitest";
import { termExecutorSuite } from "./testing/term-executor-suite";

describe("term-executor archives on the local runtime", () => {
  const sandboxes = mkdtempSync(join(tmpdir(), "proctor-te-local-sandboxes-"));
  afterAll(() => rmSync(sandboxes, { recursive: true, force: true }));
  // The local runtime cannot isolate the verifier (term-executor tasks ask for it); these agents are trusted.
  termExecutorSuite("local", () => new LocalRuntime({ rootDir: sandboxes }), { isolateVerifier: false });
});
