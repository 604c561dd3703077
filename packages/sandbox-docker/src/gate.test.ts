import Dockerode from "dockerode";
import { afterEach, describe, expect, it, vi } from "vitest";
import { dockerAvailable, dockerTestGate } from "./gate";

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
