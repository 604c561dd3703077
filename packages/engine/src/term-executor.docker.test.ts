import { DockerRuntime, dockerTestGate } from "@proctor/sandbox-docker";
import { describe } from "vitest";
import { termExecutorSuite } from "./testing/term-executor-suite";

const haveDocker = await dockerTestGate();

describe.skipIf(!haveDocker)("term-executor archives on Docker", () => {
  const runtime = new DockerRuntime();
  // Strict isolation, as term-executor tasks ask by default.
  termExecutorSuite("docker", () => runtime, { defaultImage: "proctor/base:bookworm" });
});
