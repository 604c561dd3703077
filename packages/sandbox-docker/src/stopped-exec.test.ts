import { PassThrough, Readable } from "node:stream";
import type Dockerode from "dockerode";
import { SandboxStoppedError } from "@proctor/sandbox";
import { silentLogger } from "@proctor/schema";
import { describe, expect, it } from "vitest";
import { DockerSandbox } from "./sandbox";

/**
 * A container that stops between an exec's create and its start: the daemon still counted it as
 * running at create, then runc refuses the start and the daemon reports exit 126 with runc's
 * message on the exec's stream. Scripted, because no real daemon can be held in that window on
 * demand (the soak met it in channel.test.ts, where the exec was reported as the command's 126).
 */
function stoppingContainer(options: { message: string; running: boolean }) {
  const calls = { getArchive: 0, putArchive: 0 };
  const frame = (text: string) => {
    const payload = Buffer.from(text);
    const header = Buffer.alloc(8);
    header[0] = 1; // stdout, as the daemon framed it
    header.writeUInt32BE(payload.length, 4);
    return Buffer.concat([header, payload]);
  };
  const container = {
    id: "c0ffee",
    exec: async () => ({
      start: async () => {
        const stream = new PassThrough();
        stream.end(frame(options.message));
        return stream;
      },
      inspect: async () => ({ Running: false, ExitCode: 126 }),
    }),
    inspect: async () => ({ State: { Running: options.running } }),
    getArchive: async () => {
      calls.getArchive++;
      throw Object.assign(new Error("(HTTP code 404)"), { statusCode: 404, json: { message: "Could not find the file /logs in container c0ffee" } });
    },
    putArchive: async (tar: Readable) => {
      calls.putArchive++;
      tar.resume();
      await new Promise((resolve) => tar.once("end", resolve));
    },
  };
  return { sandbox: new DockerSandbox(container as unknown as Dockerode.Container, "/", "", silentLogger), calls };
}

const RUNC_MESSAGE = "cannot exec in a stopped state: unknown\n";

describe("an exec that never started because the container had stopped", () => {
  it("is a SandboxStoppedError, not the command's exit 126", async () => {
    const { sandbox } = stoppingContainer({ message: RUNC_MESSAGE, running: true }); // the daemon has not caught up yet
    const error = await sandbox.exec(["true"]).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(SandboxStoppedError);
    expect((error as Error).message).toContain(`exec ["true"]: container c0ffee is no longer running`);
  });

  it("is told by the container's state when the daemon's wording differs", async () => {
    const { sandbox } = stoppingContainer({ message: "OCI runtime exec failed: some other wording\n", running: false });
    await expect(sandbox.exec(["true"])).rejects.toBeInstanceOf(SandboxStoppedError);
  });

  it("a command that exits 126 in a running container is its result", async () => {
    const { sandbox } = stoppingContainer({ message: "sh: ./run: Permission denied\n", running: true });
    await expect(sandbox.exec(["sh", "-c", "./run"])).resolves.toMatchObject({ exitCode: 126, stdout: "sh: ./run: Permission denied\n" });
  });

  it("a download falls back to the archive API, an upload to putArchive", async () => {
    const { sandbox, calls } = stoppingContainer({ message: RUNC_MESSAGE, running: false });
    await expect(sandbox.download("/logs", "/tmp/proctor-stopped-exec-test-unused")).resolves.toMatchObject({ files: 0, truncated: false });
    expect(calls.getArchive).toBe(1);
    await sandbox.writeFile("/tmp/x", "data");
    expect(calls.putArchive).toBe(1);
  });
});
