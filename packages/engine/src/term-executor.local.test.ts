import { mkdirSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { LocalRuntime } from "@proctor/sandbox";
import { describe } from "vitest";
import { termExecutorSuite } from "./testing/term-executor-suite";

describe("term-executor archives on the local runtime", () => {
  const sandboxes = join(tmpdir(), `proctor-te-local-sandboxes-${process.pid}`);
  mkdirSync(sandboxes, { recursive: true });
  // The local runtime cannot isolate the verifier (term-executor tasks ask for it); these agents are trusted.
  termExecutorSuite("local", () => new LocalRuntime({ rootDir: sandboxes }), { isolateVerifier: false });
});
