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
import { WarmPool } from "./pool";
import { DockerSandbox } from "./sandbox";

export interface DockerRuntimeOptions {
  /** The daemon to talk to; default: DOCKER_HOST or the local socket. */
  docker?: Dockerode;
  logger?: Logger;
  /** proctor.owner label value; default `<host>:<pid>:<process start time>`, which reap() understands. */
  ownerId?: string;
  /**
   * Containers kept started ahead of demand per (image, limits, network, env, workdir, labels
   * but proctor.trial); default 4, 0 turns it off. A key is warmed from its second create() on;
   * drain() removes what is left.
   */
  warmPool?: number;
}

export const DEFAULT_WARM_POOL = 4;
/** Label on containers started ahead of demand (they lack proctor.trial; the trial is in their name). */
export const POOLED_LABEL = "proctor.pooled";
const WARM_IDLE_MS = 60_000;
const WARM_PAUSE_AFTER_FAILURE_MS = 10_000;

interface ContainerSpec {
  image: string;
  imageUser: string;
  workdir: string;
  env: string[];
  labels: Record<string, string>;
  hostConfig: Dockerode.HostConfig;
}

/** Sandboxes made from the same key are interchangeable until handed out. */
function poolKey(imageId: string, options: SandboxCreateOptions): string {
  const { [LABELS.trial]: _trial, ...labels } = options.labels ?? {};
  const sorted = (record: Record<string, string> | undefined) => Object.entries(record ?? {}).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  return JSON.stringify([imageId, options.cpus ?? null, options.memoryMb ?? null, options.pidsLimit ?? null, options.network === true, options.workdir ?? null, sorted(options.env), sorted(labels)]);
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
  /** Removals still running after their sandbox's kill() resolved. */
  private readonly removals = new Set<Promise<void>>();
  private removalFailures: unknown[] = [];
  private readonly pool: WarmPool<DockerSandbox>;

  constructor(options: DockerRuntimeOptions = {}) {
    this.docker = options.docker ?? new Dockerode();
    this.logger = options.logger ?? silentLogger;
    this.ownerId = options.ownerId ?? currentOwnerLabel();
    this.images = new ImageResolver(this.docker, this.logger);
    this.pool = new WarmPool<DockerSandbox>({
      max: options.warmPool ?? DEFAULT_WARM_POOL,
      idleMs: WARM_IDLE_MS,
      pauseAfterFailureMs: WARM_PAUSE_AFTER_FAILURE_MS,
      logger: this.logger,
    });
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

  /**
   * Resolves once every container this runtime killed is removed; rejects with a SandboxError
   * naming the removals that failed (each is reported once). The runtime stays usable.
   */
  async drain(): Promise<void> {
    const pooled = await this.pool.drain().then(
      () => null,
      (error: unknown) => error,
    );
    while (this.removals.size > 0) await Promise.all(this.removals);
    if (pooled !== null) this.removalFailures.push(pooled);
    const failures = this.removalFailures.splice(0);
    if (failures.length > 0) {
      throw new SandboxError(
        `${failures.length} container(s) could not be removed: ${failures.map((f) => (f instanceof Error ? f.message : String(f))).join("; ")}. ` +
          "List them with `docker ps -a --filter label=proctor.managed=true` and remove them with `docker rm -f`.",
        { cause: failures[0] },
      );
    }
  }

  private trackRemoval(removal: Promise<void>): void {
    const tracked: Promise<void> = removal
      .catch((error: unknown) => {
        this.removalFailures.push(error);
        this.logger.warn("removing a sandbox in the background failed", { error: error instanceof Error ? error.message : String(error) });
      })
      .finally(() => this.removals.delete(tracked));
    this.removals.add(tracked);
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
    const spec = await this.containerSpec(options, imageInfo);
    const trial = options.labels?.[LABELS.trial];
    if (!this.pool.enabled) return this.start(spec, containerName(trial), spec.labels, signal);

    // The image's id, not its name, so a rebuilt tag never hands out a container of the old image.
    const key = poolKey(imageInfo.Id, options);
    let sandbox: DockerSandbox;
    try {
      // Started ahead of demand they cannot carry this caller's trial label: they get the run's
      // labels plus proctor.pooled=true, and the trial in their name (renamed when handed out).
      const { [LABELS.trial]: _trial, ...shared } = spec.labels;
      const warm = await this.pool.acquire(key, () => this.start(spec, containerName("warm"), { ...shared, [POOLED_LABEL]: "true" }, undefined));
      if (warm) {
        if (signal?.aborted) {
          void warm.kill().catch(() => undefined); // its removal is tracked for drain()
          throwIfAborted(signal);
        }
        const name = containerName(trial);
        await warm.rename(name).catch((error: unknown) => this.logger.warn("renaming a pooled sandbox failed; it keeps its warm-up name", { id: warm.id, name, error: daemonMessage(error) }));
        sandbox = warm;
      } else {
        sandbox = await this.start(spec, containerName(trial), spec.labels, signal);
      }
    } catch (error) {
      this.pool.release(key);
      throw error;
    }
    sandbox.onKill(() => this.pool.release(key));
    return sandbox;
  }

  /** Everything but the name and labels of a container for `options`. */
  private async containerSpec(options: SandboxCreateOptions, imageInfo: Dockerode.ImageInspectInfo): Promise<ContainerSpec> {
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
    return { image: options.image, imageUser, workdir, env, labels, hostConfig };
  }

  /** Creates and starts one container; resolves once its entrypoint reported the log dirs ready. */
  private async start(spec: ContainerSpec, name: string, labels: Record<string, string>, signal: AbortSignal | undefined): Promise<DockerSandbox> {
    let container: Dockerode.Container;
    try {
      container = await this.docker.createContainer({
        name,
        Image: spec.image,
        Entrypoint: ["/bin/sh", "-c", ENTRYPOINT, "proctor-init", spec.imageUser],
        // The main process runs as root; execs default to the image's USER (see DockerSandbox).
        User: "0",
        Cmd: [],
        Env: spec.env,
        WorkingDir: spec.workdir,
        Labels: labels,
        Tty: false,
        OpenStdin: false,
        HostConfig: spec.hostConfig,
      });
    } catch (error) {
      throw new SandboxStartError(`Creating a container from "${spec.image}" failed: ${daemonMessage(error)}`, { cause: error });
    }
    const sandbox = new DockerSandbox(container, spec.workdir, spec.imageUser, this.logger, (removal) => this.trackRemoval(removal));
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
        `Starting a container from "${spec.image}" failed: ${daemonMessage(error)} (the image needs /bin/sh).`,
        { cause: error },
      );
    }
    this.logger.debug("started sandbox", { id: container.id, image: spec.image, workdir: spec.workdir });
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
