import Dockerode from "dockerode";
import { afterEach, describe, expect, it, vi } from "vitest";
import { RuntimeUnavailableError } from "@proctor/sandbox";
import { dockerAvailable, dockerTestGate } from "./gate";
import { DockerRuntime } from "./runtime";

// A socket path where nothing listens: the "no daemon" case without touching the real one.
const nowhere = () => new Dockerode({ socketPath: "/tmp/proctor-no-docker-here.sock" });

describe("dockerTestGate without a daemon", () => {
  afterEach(() => {
    vi.unstubAllEnvs();
    vi.restoreAllMocks();
  });

  it("dockerAvailable is false", async () => {
    expect(await dockerAvailable(nowhere())).toBe(false);
  });

  it("fails under CI=true", async () => {
    vi.stubEnv("CI", "true");
    await expect(dockerTestGate(nowhere())).rejects.toThrow(/CI=true/);
  });

  it("skips with one visible notice otherwise", async () => {
    vi.stubEnv("CI", "");
    const write = vi.spyOn(process.stderr, "write").mockImplementation(() => true);
    expect(await dockerTestGate(nowhere())).toBe(false);
    expect(await dockerTestGate(nowhere())).toBe(false);
    const notices = write.mock.calls.filter(([text]) => String(text).includes("SKIPPED"));
    expect(notices).toHaveLength(1);
  });
});

describe("DockerRuntime without a daemon", () => {
  it("reports the runtime as unavailable, saying what to do", async () => {
    const runtime = new DockerRuntime({ docker: nowhere() });
    await expect(runtime.create({ image: "proctor/busybox:latest" })).rejects.toBeInstanceOf(RuntimeUnavailableError);
    await expect(runtime.reap()).rejects.toThrow(/start Docker, check DOCKER_HOST, or use --runtime local/);
  });
});
