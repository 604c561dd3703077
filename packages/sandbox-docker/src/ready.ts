import type { Duplex } from "node:stream";
import type Dockerode from "dockerode";
import { SANDBOX_PATHS, SandboxStartError } from "@proctor/sandbox";
import { FrameDemuxer } from "./frames";

export const READY = "proctor-sandbox-ready";
export const SETUP_FAILED = "proctor-sandbox-setup-failed";
/** How long a started container may take to print READY before giving up. */
const READY_TIMEOUT_MS = 60_000;

export const NETWORK_FILES = "proctor-network-files";

/** /etc/hosts and /etc/resolv.conf as a container started, before anything else ran in it. */
export interface NetworkFiles {
  hosts: string;
  resolvConf: string;
}

/** What the entrypoint reported: the keep-alive's pid, whether it serves the exec channel, its network files. */
export interface ReadyReport {
  pid: number;
  channel: boolean;
  networkFiles: NetworkFiles | null;
}

/**
 * Runs `start` (a start or restart of the container) with its output attached and resolves with
 * the keep-alive's pid once the entrypoint reported READY.
 */
export async function startAndWaitReady(container: Dockerode.Container, start: () => Promise<unknown>, signal: AbortSignal | undefined): Promise<ReadyReport> {
  const output = (await container.attach({ stream: true, stdout: true, stderr: true })) as unknown as Duplex;
  try {
    const ready = waitForReady(output, READY_TIMEOUT_MS, signal);
    // Awaited below; if start() fails first, start's error is the one reported.
    ready.catch(() => undefined);
    await start();
    return await ready;
  } finally {
    output.destroy();
  }
}

/**
 * Resolves with the keep-alive's pid when the entrypoint prints READY on the (multiplexed) attach
 * stream; rejects when it reports a failed setup, stops first, takes longer than `timeoutMs`, or
 * on abort.
 */
function waitForReady(stream: Duplex, timeoutMs: number, signal: AbortSignal | undefined): Promise<ReadyReport> {
  return new Promise((resolve, reject) => {
    let seen = "";
    let done = false;
    const finish = (error: Error | null, report: ReadyReport = { pid: 0, channel: false, networkFiles: null }) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      signal?.removeEventListener("abort", onAbort);
      stream.removeAllListeners("data");
      if (error === null) resolve(report);
      else reject(error);
    };
    const onAbort = () => finish(new SandboxStartError("Creating the sandbox was cancelled.", { cause: signal?.reason }));
    const timer = setTimeout(() => finish(new SandboxStartError(`The container did not become ready within ${timeoutMs} ms. Output so far: ${seen.slice(-500)}`)), timeoutMs);
    signal?.addEventListener("abort", onAbort, { once: true });
    const demux = new FrameDemuxer((_which, chunk) => {
      if (seen.length < 64 * 1024) seen += chunk.toString();
      if (seen.includes(`${SETUP_FAILED}\n`)) {
        finish(new SandboxStartError(`Creating ${SANDBOX_PATHS.agentLogs} and ${SANDBOX_PATHS.verifierLogs} in the container failed: ${seen.replace(SETUP_FAILED, "").trim().slice(-500)}`));
      } else {
        const ready = new RegExp(`${READY} (\\d+)( chan)?\n`).exec(seen);
        if (ready) {
          const files = new RegExp(`${NETWORK_FILES} ([A-Za-z0-9+/=]*) ([A-Za-z0-9+/=]*)\n`).exec(seen);
          const decode = (b64: string) => Buffer.from(b64, "base64").toString("utf8");
          finish(null, { pid: Number(ready[1]), channel: ready[2] !== undefined, networkFiles: files ? { hosts: decode(files[1] ?? ""), resolvConf: decode(files[2] ?? "") } : null });
        }
      }
    });
    stream.on("data", (chunk: Buffer) => demux.push(chunk));
    stream.once("end", () => finish(new SandboxStartError(`The container stopped before it was ready. Its output: ${seen.slice(-500) || "(none)"}`)));
    stream.once("close", () => finish(new SandboxStartError("The container's output closed before it was ready.")));
    stream.once("error", (error: Error) => finish(new SandboxStartError(`Reading the container's output failed: ${error.message}`, { cause: error })));
  });
}
