import { randomBytes } from "node:crypto";
import { hostname } from "node:os";
import type { Duplex } from "node:stream";
import Dockerode from "dockerode";
import {
  ImageError,
  LABELS,
  RuntimeUnavailableError,
  SANDBOX_PATHS,
  SANDBOX_PATH_ENV,
  SandboxError,
  SandboxStartError,
  type ImageRequest,
  type Sandbox,
  type SandboxCreateOptions,
  type SandboxRuntime,
} from "@proctor/sandbox";
import { silentLogger, type Logger } from "@proctor/schema";
import { daemonMessage, statusCode } from "./docker-errors";
import { FrameDemuxer } from "./frames";
import { ImageResolver } from "./image";
import { currentOwnerLabel, ownerIsGone, parseOwner } from "./owner";
import { DockerSandbox } from "./sandbox";

export interface DockerRuntimeOptions {
  /** The daemon to talk to; default: DOCKER_HOST or the local socket. */
  docker?: Dockerode;
  logger?: Logger;
  /** proctor.owner label value; default `<host>:<pid>:<process start time>`, which reap() understands. */
  ownerId?: string;
}

export const DEFAULT_PIDS_LIMIT = 1024;
/**
 * Capabilities dropped from Docker's default set: none of them is needed to build or test code,
 * and NET_RAW (raw sockets, ARP spoofing on the bridge) and MKNOD (device nodes) widen the attack
 * surface.
 */
export const DROPPED_CAPABILITIES = ["NET_RAW", "MKNOD", "AUDIT_WRITE", "SETFCAP"] as const;
const READY = "proctor-sandbox-ready";
const SETUP_FAILED = "proctor-sandbox-setup-failed";
/** How long a started container may take to print READY before create() gives up. */
const READY_TIMEOUT_MS = 60_000;
/**
 * The container's main command, run as root under docker-init with the image's USER as $1: create
 * the log dirs (the agent's one owned by that user), say so on stdout (create() waits for that line
 * on an attach stream, cheaper than a putArchive or an exec), then wait forever without needing
 * `sleep infinity` (busybox lacks it).
 */
const ENTRYPOINT = `if mkdir -p ${SANDBOX_PATHS.agentLogs} ${SANDBOX_PATHS.verifierLogs} && { [ -z "$1" ] || chown "$1" ${SANDBOX_PATHS.agentLogs}; }
then echo ${READY}; else echo ${SETUP_FAILED}; fi
trap 'exit 0' TERM INT; while :; do sleep 3600 & wait $!; done`;

/**
 * The Docker sandbox runtime: one container per sandbox, driven through the Engine API (never
 * the docker CLI). See the package README for the labels and security defaults.
 */
export class DockerRuntime implements SandboxRuntime {
  readonly name = "docker";
  readonly docker: Dockerode;
  readonly ownerId: string;
  private readonly logger: Logger;
  private readonly images: ImageResolver;
  private initSupported: Promise<boolean> | undefined;

  constructor(options: DockerRuntimeOptions = {}) {
    this.docker = options.docker ?? new Dockerode();
    this.logger = options.logger ?? silentLogger;
    this.ownerId = options.ownerId ?? currentOwnerLabel();
    this.images = new ImageResolver(this.docker, this.logger);
  }

  resolveImage(request: ImageRequest): Promise<string> {
    return this.guard(() => this.images.resolve(request));
  }

  async create(options: SandboxCreateOptions): Promise<Sandbox> {
    return this.guard(() => this.createSandbox(options));
  }

  /**
   * Removes containers labelled proctor.managed=true whose proctor.owner process is gone (same
   * host, and its pid is free or now belongs to a process that started later). Containers of
   * other hosts, of live owners, or with an owner label in another format are left alone.
   */
  async reap(): Promise<number> {
    return this.guard(async () => {
      const containers = await this.docker.listContainers({ all: true, filters: { label: [`${LABELS.managed}=true`] } });
      const host = hostname();
      let removed = 0;
      for (const info of containers) {
        const owner = parseOwner(info.Labels[LABELS.owner]);
        if (!owner || !ownerIsGone(owner, host)) continue;
        try {
          await this.docker.getContainer(info.Id).remove({ force: true, v: true });
          removed++;
          this.logger.info("reaped a sandbox whose owner is gone", { id: info.Id, owner: info.Labels[LABELS.owner] });
        } catch (error) {
          if (statusCode(error) === 404) continue;
          throw new SandboxError(`Reaping container ${info.Id} failed: ${daemonMessage(error)}`, { cause: error });
        }
      }
      return removed;
    });
  }

  private async createSandbox(options: SandboxCreateOptions): Promise<Sandbox> {
    const { signal } = options;
    throwIfAborted(signal);
    let imageInfo: Dockerode.ImageInspectInfo;
    try {
      imageInfo = await this.docker.getImage(options.image).inspect();
    } catch (error) {
      if (statusCode(error) === 404) {
        throw new ImageError(`Image "${options.image}" is not present locally; call resolveImage() first (it pulls or builds).`, options.image, { cause: error });
      }
      throw error;
    }
    const imageUser = imageInfo.Config?.User ?? "";
    const workdir = options.workdir ?? (imageInfo.Config?.WorkingDir || SANDBOX_PATHS.workdir);
    const paths: Record<string, string> = { ...SANDBOX_PATHS, workdir };
    const env = [
      ...Object.entries(SANDBOX_PATH_ENV).map(([name, key]) => `${name}=${paths[key]}`),
      ...Object.entries(options.env ?? {}).map(([name, value]) => `${name}=${value}`),
    ];
    const labels = { ...options.labels, [LABELS.managed]: "true", [LABELS.owner]: this.ownerId };
    const hostConfig: Dockerode.HostConfig = {
      NetworkMode: options.network ? "bridge" : "none",
      Privileged: false,
      SecurityOpt: ["no-new-privileges"],
      CapDrop: [...DROPPED_CAPABILITIES],
      PidsLimit: options.pidsLimit ?? DEFAULT_PIDS_LIMIT,
      Init: await this.supportsInit(),
    };
    if (options.cpus !== undefined) hostConfig.NanoCpus = Math.round(options.cpus * 1e9);
    if (options.memoryMb !== undefined) {
      hostConfig.Memory = Math.round(options.memoryMb * 1024 * 1024);
      hostConfig.MemorySwap = hostConfig.Memory; // no swap on top of the limit
    }

    let container: Dockerode.Container;
    try {
      container = await this.docker.createContainer({
        name: containerName(options.labels?.[LABELS.trial]),
        Image: options.image,
        Entrypoint: ["/bin/sh", "-c", ENTRYPOINT, "proctor-init", imageUser],
        // The main process runs as root; execs default to the image's USER (see DockerSandbox).
        User: "0",
        Cmd: [],
        Env: env,
        WorkingDir: workdir,
        Labels: labels,
        Tty: false,
        OpenStdin: false,
        HostConfig: hostConfig,
      });
    } catch (error) {
      throw new SandboxStartError(`Creating a container from "${options.image}" failed: ${daemonMessage(error)}`, { cause: error });
    }
    const sandbox = new DockerSandbox(container, workdir, imageUser, this.logger);
    try {
      throwIfAborted(signal);
      // Docker creates the workdir; the entrypoint creates the log dirs and reports on stdout.
      const output = (await container.attach({ stream: true, stdout: true, stderr: true })) as unknown as Duplex;
      try {
        const ready = waitForReady(output, READY_TIMEOUT_MS, signal);
        // Awaited below; if start() fails first, start's error is the one reported.
        ready.catch(() => undefined);
        await container.start();
        await ready;
      } finally {
        output.destroy();
      }
      throwIfAborted(signal);
    } catch (error) {
      await sandbox.kill().catch((cleanup: unknown) => this.logger.warn("removing a container that failed to start failed", { id: container.id, error: daemonMessage(cleanup) }));
      if (error instanceof SandboxError) throw error;
      throw new SandboxStartError(
        `Starting a container from "${options.image}" failed: ${daemonMessage(error)} (the image needs /bin/sh).`,
        { cause: error },
      );
    }
    this.logger.debug("started sandbox", { id: container.id, image: options.image, workdir });
    return sandbox;
  }

  private supportsInit(): Promise<boolean> {
    this.initSupported ??= this.docker.info().then(
      (info: { InitBinary?: string }) => Boolean(info.InitBinary),
      (error: unknown) => {
        this.initSupported = undefined;
        throw error;
      },
    );
    return this.initSupported;
  }

  /** Maps "cannot reach the daemon" to RuntimeUnavailableError; everything else passes through. */
  private async guard<T>(run: () => Promise<T>): Promise<T> {
    try {
      return await run();
    } catch (error) {
      // Only a failed connection to the daemon means "unavailable"; a missing host file does not.
      const { syscall, code } = (error ?? {}) as NodeJS.ErrnoException;
      if (syscall === "connect") {
        throw new RuntimeUnavailableError(`The Docker daemon does not answer (${code}): start Docker, check DOCKER_HOST, or use --runtime local.`, { cause: error });
      }
      throw error;
    }
  }
}

function throwIfAborted(signal: AbortSignal | undefined): void {
  if (signal?.aborted) throw new SandboxStartError("Creating the sandbox was cancelled.", { cause: signal.reason });
}

function containerName(trial: string | undefined): string {
  const suffix = randomBytes(4).toString("hex");
  const base = (trial ?? "sandbox").replace(/[^a-zA-Z0-9_.-]+/g, "-").replace(/^[^a-zA-Z0-9]+/, "").slice(0, 48);
  return `proctor-${base || "sandbox"}-${suffix}`;
}

/**
 * Resolves when the entrypoint prints READY on the (multiplexed) attach stream; rejects when it
 * reports a failed setup, stops first, takes longer than `timeoutMs`, or on abort.
 */
function waitForReady(stream: Duplex, timeoutMs: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve, reject) => {
    let seen = "";
    let done = false;
    const finish = (error: Error | null) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      signal?.removeEventListener("abort", onAbort);
      stream.removeAllListeners("data");
      if (error === null) resolve();
      else reject(error);
    };
    const onAbort = () => finish(new SandboxStartError("Creating the sandbox was cancelled.", { cause: signal?.reason }));
    const timer = setTimeout(() => finish(new SandboxStartError(`The container did not become ready within ${timeoutMs} ms. Output so far: ${seen.slice(-500)}`)), timeoutMs);
    signal?.addEventListener("abort", onAbort, { once: true });
    const demux = new FrameDemuxer((_which, chunk) => {
      if (seen.length < 64 * 1024) seen += chunk.toString();
      if (seen.includes(`${SETUP_FAILED}\n`)) {
        finish(new SandboxStartError(`Creating ${SANDBOX_PATHS.agentLogs} and ${SANDBOX_PATHS.verifierLogs} in the container failed: ${seen.replace(SETUP_FAILED, "").trim().slice(-500)}`));
      } else if (seen.includes(`${READY}\n`)) {
        finish(null);
      }
    });
    stream.on("data", (chunk: Buffer) => demux.push(chunk));
    stream.once("end", () => finish(new SandboxStartError(`The container stopped before it was ready (it needs /bin/sh and mkdir). Its output: ${seen.slice(-500) || "(none)"}`)));
    stream.once("close", () => finish(new SandboxStartError("The container's output closed before it was ready.")));
    stream.once("error", (error: Error) => finish(new SandboxStartError(`Reading the container's output failed: ${error.message}`, { cause: error })));
  });
}
