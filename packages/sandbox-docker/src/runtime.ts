import { randomBytes } from "node:crypto";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { isAbsolute, join } from "node:path";
import { hostname, tmpdir } from "node:os";
import Dockerode from "dockerode";
import {
  ImageError,
  LABELS,
  RuntimeUnavailableError,
  SANDBOX_PATHS,
  SANDBOX_PATH_ENV,
  SandboxConfigError,
  SandboxError,
  SandboxStartError,
  removeOrphanTempDirs,
  type ContainerSettings,
  type ImageRequest,
  type Sandbox,
  type SandboxCapabilities,
  type SandboxCreateOptions,
  type SandboxRuntime,
} from "@proctor/sandbox";
import { silentLogger, type Logger } from "@proctor/schema";
import { daemonMessage, isConnectionError, statusCode } from "./docker-errors";
import { ImageResolver, type ImageOutcome } from "./image";
import { FileBuildLock, type BuildLock } from "./build-lock";
import { ImageCache, ImageIndex, imageDataDir, type ImageCacheOptions } from "./image-cache";
import type { ImageRegistry } from "./registry";
import { currentOwnerLabel, ownerIsGone, parseOwner } from "./owner";
import { WarmPool } from "./pool";
import { DockerSandbox } from "./sandbox";
import { dockerCapabilities } from "./capabilities";
import { NETWORK_FILES, READY, SETUP_FAILED, startAndWaitReady, type NetworkFiles } from "./ready";
import { CHANNEL_DIR, CHANNEL_LOOP, CHANNEL_TEMP_PREFIX, ExecChannel } from "./channel";
import { watchOwner } from "./watchdog";
import { DEFAULT_FORWARDER_IMAGE, startHostSocketForwarder } from "./host-socket";
import { TOOLCHAIN_DIR, TRUSTED_BUSYBOX, ensureToolchainVolume } from "./toolchain";
import { applyContainerSettings, checkContainerSettings } from "./container-config";
import { ChangesFastPath } from "./fast-path";
import type { XattrChoice } from "./xattrs";
import { DaemonPaths, detectDaemonPaths } from "./daemon-paths";

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
  /** Sandbox lifetimes are rounded up to a multiple of this (pooled containers share a key). Default 60 s. */
  lifetimeStepMs?: number;
  /**
   * Start a detached watchdog with the first sandbox that removes this owner's containers within
   * seconds of the owner dying (kill -9 included); started again by a later create() if it died.
   * Default true; off only to test reap() itself.
   */
  watchdog?: boolean;
  /** Image of the container behind `forwardHostSocket` (needs python3). Default proctor/base:bookworm. */
  forwarderImage?: string;
  /**
   * Serve execs without a `user` through the resident exec channel (channel.ts) instead of
   * `docker exec`. Default true, unless PROCTOR_EXEC_CHANNEL=0. Needs the daemon on this host
   * (a bind-mounted directory of FIFOs); where that does not work, execs use `docker exec`.
   */
  execChannel?: boolean;
  /** A channel request not picked up within this long marks the channel dead (then docker exec). Default 10 s. */
  channelStartTimeoutMs?: number;
  /**
   * How `changes()` reads the overlay xattrs of a container's layers on this host: `auto` (the
   * prebuilt @napi-rs/xattr binding, else getfattr), one of `native` / `getfattr`, or `none`
   * (every listing asks the daemon, which walks the whole image; the runtime warns once).
   * Default: PROCTOR_OVERLAY_XATTRS if set, else auto.
   */
  overlayXattrs?: XattrChoice;
  /**
   * Which of this process's paths the daemon's host has, for bind mounts (the exec channel, host
   * sockets, `mounts`). Default: found out with the first sandbox (see daemon-paths.ts): in one of
   * the daemon's own containers, only paths under that container's bind mounts and volumes.
   */
  daemonPaths?: DaemonPaths;
  /**
   * Where task images are shared: looked in before a build (pull on a hit), pushed to after one.
   * Check it first (ImageRegistry.check); one that stops answering mid-run is left alone with one
   * warning and images are built here. Default: none.
   */
  imageRegistry?: ImageRegistry | null;
  /** Makes concurrent builds of one image wait for one: default a file lock per image under imageDataDir (one host); Redis for a cluster. */
  buildLock?: BuildLock;
  /** Image builds running at once in this runtime; default one per CPU, at most one per 2 GB of memory. */
  buildConcurrency?: number;
  /**
   * Builds whose Dockerfiles start with the same steps (before any COPY/ADD) run them once, the
   * others waiting for the first and then using Docker's build cache. Default true.
   */
  shareBuildPrefixes?: boolean;
  /** Disk budget of proctor-build images in bytes, null for none; default ("default") a quarter of the Docker data root's disk. */
  imageCacheBytes?: number | null | "default";
  /** The image index (last use, tasks) and file build locks; default imageDataDir(). */
  imageDataDir?: string;
  /** An image used this recently by any process here is not evicted; default 10 minutes. */
  imageInUseGraceMs?: number;
}

const XATTR_CHOICES: readonly XattrChoice[] = ["auto", "native", "getfattr", "none"];

/** PROCTOR_OVERLAY_XATTRS (to compare the readers, or the daemon's listing, without code); auto when unset. */
function xattrChoiceFromEnv(): XattrChoice {
  const value = process.env.PROCTOR_OVERLAY_XATTRS;
  if (value === undefined || value === "") return "auto";
  if ((XATTR_CHOICES as readonly string[]).includes(value)) return value as XattrChoice;
  throw new SandboxConfigError(`PROCTOR_OVERLAY_XATTRS must be one of ${XATTR_CHOICES.join(", ")}; got "${value}" (unset it for auto)`);
}

export const DEFAULT_WARM_POOL = 4;
/** Label on containers started ahead of demand (they lack proctor.trial; the trial is in their name). */
export const POOLED_LABEL = "proctor.pooled";
const WARM_IDLE_MS = 60_000;
const WARM_PAUSE_AFTER_FAILURE_MS = 10_000;

interface ContainerSpec {
  image: string;
  /** Rounded lifetime in seconds; 0 for none. */
  lifetimeSec: number;
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
  return JSON.stringify([imageId, options.cpus ?? null, options.memoryMb ?? null, options.pidsLimit ?? null, options.network === true, options.workdir ?? null, sorted(options.env), sorted(labels), options.lifetimeMs ?? 0, options.mounts ?? null, options.container ?? null]);
}

function roundLifetimeSec(lifetimeMs: number | undefined, stepMs: number): number {
  if (lifetimeMs === undefined || !(lifetimeMs > 0)) return 0;
  return Math.ceil((Math.ceil(lifetimeMs / stepMs) * stepMs) / 1000);
}

export const DEFAULT_PIDS_LIMIT = 1024;
/**
 * Capabilities dropped from Docker's default set: none of them is needed to build or test code,
 * and NET_RAW (raw sockets, ARP spoofing on the bridge) and MKNOD (device nodes) widen the attack
 * surface.
 */
export const DROPPED_CAPABILITIES = ["NET_RAW", "MKNOD", "AUDIT_WRITE", "SETFCAP"] as const;
/**
 * The container's main command, run as root by the trusted busybox under docker-init, with the
 * image's USER as $1 and the epoch second the sandbox must stop at as $2 (0: never): create the
 * log dirs (the agent's one owned by that user), say so on stdout (create() waits for that line on
 * an attach stream, cheaper than a putArchive or an exec), then wait until the deadline. With the
 * channel directory as $3 (mounted), it opens the exec channel's FIFOs first, says " chan" after
 * READY, and serves exec requests while it waits (CHANNEL_LOOP). Every
 * tool is the read-only busybox's, so an agent replacing /bin/sh cannot run code here when the
 * sandbox restarts.
 */
const ENTRYPOINT = `ch=
if [ -n "$3" ] && [ -p "$3/ctl" ] && [ -p "$3/live" ]; then exec 3<"$3/ctl" 5>"$3/live"; ch=" chan"; fi
if mkdir -p ${SANDBOX_PATHS.agentLogs} ${SANDBOX_PATHS.verifierLogs} && { [ -z "$1" ] || chown "$1" ${SANDBOX_PATHS.agentLogs}; }
then echo "${NETWORK_FILES} $(${TRUSTED_BUSYBOX} base64 -w0 /etc/hosts 2>/dev/null) $(${TRUSTED_BUSYBOX} base64 -w0 /etc/resolv.conf 2>/dev/null)"; echo ${READY} $$$ch; else echo ${SETUP_FAILED}; fi
trap 'exit 0' TERM INT
if [ -n "$ch" ]; then
${CHANNEL_LOOP}
fi
while :; do
  if [ "$2" != 0 ] && [ "$(date +%s)" -ge "$2" ]; then echo "proctor: the sandbox reached its lifetime; stopping" >&2; exit 0; fi
  sleep 5 & wait $!
done`;
/** Argument the keep-alive carries, so process listings can tell it from the agent's processes. */
export const KEEPALIVE_TAG = "proctor-init";
/** Lifetimes are rounded up to this, so pooled containers of trials with similar budgets share a key. */
const DEFAULT_LIFETIME_STEP_MS = 60_000;
/** Temp dirs holding a joined sandbox's own copies of the network files. */
const NETWORK_FILES_PREFIX = "proctor-netfiles-";

/**
 * The Docker sandbox runtime: one container per sandbox, driven through the Engine API (never
 * the docker CLI). See the package README for the labels and security defaults.
 */
export class DockerRuntime implements SandboxRuntime {
  readonly name = "docker";
  readonly capabilities: SandboxCapabilities;
  private toolchainVolume: Promise<string> | undefined;
  /** Each running container's /etc/hosts and /etc/resolv.conf as it started (for sandboxes joining its network). */
  private readonly networkFiles = new Map<string, NetworkFiles>();
  private readonly lifetimeStepMs: number;
  private readonly watchdog: boolean;
  private readonly forwarderImage: string;
  private readonly execChannel: boolean;
  private readonly channelStartTimeoutMs: number | undefined;
  readonly docker: Dockerode;
  readonly ownerId: string;
  private readonly logger: Logger;
  private readonly images: ImageResolver;
  /** Proctor's task images under their disk budget (`proctor images ls / prune`). */
  readonly imageCache: ImageCache;
  private initSupported: Promise<boolean> | undefined;
  /** Removals still running after their sandbox's kill() resolved. */
  private readonly removals = new Set<Promise<void>>();
  private removalFailures: unknown[] = [];
  private readonly pool: WarmPool<DockerSandbox>;
  private readonly fastPath: ChangesFastPath;
  private daemonPathsFound: Promise<DaemonPaths> | undefined;

  constructor(options: DockerRuntimeOptions = {}) {
    this.docker = options.docker ?? new Dockerode();
    this.capabilities = dockerCapabilities(this.docker.modem);
    this.logger = options.logger ?? silentLogger;
    this.ownerId = options.ownerId ?? currentOwnerLabel();
    this.lifetimeStepMs = options.lifetimeStepMs ?? DEFAULT_LIFETIME_STEP_MS;
    this.watchdog = options.watchdog !== false;
    this.forwarderImage = options.forwarderImage ?? DEFAULT_FORWARDER_IMAGE;
    this.execChannel = options.execChannel ?? process.env.PROCTOR_EXEC_CHANNEL !== "0";
    this.channelStartTimeoutMs = options.channelStartTimeoutMs;
    if (options.daemonPaths) this.daemonPathsFound = Promise.resolve(options.daemonPaths);
    const dataDir = options.imageDataDir ?? imageDataDir();
    const lock = options.buildLock ?? new FileBuildLock(join(dataDir, "locks"));
    const index = new ImageIndex(join(dataDir, "index.json"));
    const cacheOptions: ImageCacheOptions = {
      index,
      budgetBytes: options.imageCacheBytes === undefined ? "default" : options.imageCacheBytes,
      lock,
      pending: () => this.images.pending(),
      logger: this.logger,
      ...(options.imageInUseGraceMs !== undefined ? { inUseGraceMs: options.imageInUseGraceMs } : {}),
    };
    this.imageCache = new ImageCache(this.docker, cacheOptions);
    this.images = new ImageResolver(this.docker, this.logger, { registry: options.imageRegistry ?? null, lock, index, cache: cacheOptions.budgetBytes === null ? null : this.imageCache }, {
      ...(options.buildConcurrency !== undefined ? { concurrency: options.buildConcurrency } : {}),
      ...(options.shareBuildPrefixes !== undefined ? { sharePrefixes: options.shareBuildPrefixes } : {}),
    });
    this.fastPath = new ChangesFastPath(options.overlayXattrs ?? xattrChoiceFromEnv(), this.logger);
    this.pool = new WarmPool<DockerSandbox>({
      max: options.warmPool ?? DEFAULT_WARM_POOL,
      idleMs: WARM_IDLE_MS,
      pauseAfterFailureMs: WARM_PAUSE_AFTER_FAILURE_MS,
      logger: this.logger,
    });
  }

  async available(): Promise<boolean> {
    return this.docker.ping().then(
      () => true,
      () => false,
    );
  }

  /** Throws ContainerSettingsError for an unknown OCI runtime, GPUs the daemon lacks, or privileged without consent. */
  checkContainerSettings(settings: ContainerSettings): Promise<void> {
    return this.guard(() => checkContainerSettings(this.docker, settings));
  }

  resolveImage(request: ImageRequest): Promise<string> {
    return this.guard(() => this.images.resolve(request));
  }

  /** resolveImage, saying how the image came to be here: reused (already here), pulled, or built. */
  resolveImageWithOutcome(request: ImageRequest): Promise<{ image: string; outcome: ImageOutcome }> {
    return this.guard(() => this.images.resolveWithOutcome(request));
  }

  /** Pushes a local task image to the registry (when one is configured); false when there is none or the push failed (warned). */
  shareImage(tag: string): Promise<boolean> {
    return this.guard(() => this.images.share(tag));
  }

  /** The image registry this runtime shares builds through, or null (none, or found unreachable). */
  get imageRegistry(): ImageRegistry | null {
    return this.images.registry;
  }

  /** The image's id (`sha256:...`) as the daemon has it; null when it has no such image. */
  imageId(image: string): Promise<string | null> {
    return this.guard(async () => {
      try {
        return (await this.docker.getImage(image).inspect()).Id;
      } catch (error) {
        if ((error as { statusCode?: number }).statusCode === 404) return null;
        throw error;
      }
    });
  }

  async create(options: SandboxCreateOptions): Promise<Sandbox> {
    return this.guard(() => this.createSandbox(options));
  }

  /**
   * The containers labelled proctor.managed=true whose proctor.owner process is gone, as reap()
   * would remove them (nothing is removed): their id, name and owner label.
   */
  async orphans(): Promise<{ Id: string; Names: string[]; Labels: Record<string, string> }[]> {
    return this.guard(async () => {
      const containers = await this.docker.listContainers({ all: true, filters: { label: [`${LABELS.managed}=true`] } });
      const host = hostname();
      return containers.filter((info) => {
        const owner = parseOwner(info.Labels[LABELS.owner]);
        return owner !== null && ownerIsGone(owner, host);
      });
    });
  }

  /**
   * Removes containers labelled proctor.managed=true whose proctor.owner process is gone (same
   * host, and its pid is free or now belongs to a process that started later). Containers of
   * other hosts, of live owners, or with an owner label in another format are left alone. Exec-
   * channel directories of dead processes in this host's temp dir go too.
   */
  async reap(): Promise<number> {
    return this.guard(async () => {
      let removed = 0;
      for (const info of await this.orphans()) {
        try {
          await this.docker.getContainer(info.Id).remove({ force: true, v: true });
          removed++;
          this.logger.info("reaped a sandbox whose owner is gone", { id: info.Id, owner: info.Labels[LABELS.owner] });
        } catch (error) {
          // 404: gone; 409 "already in progress": another reaper (its watchdog) is removing it.
          if (statusCode(error) === 404 || (statusCode(error) === 409 && /already in progress/.test(daemonMessage(error)))) continue;
          throw new SandboxError(`Reaping container ${info.Id} failed: ${daemonMessage(error)}`, { cause: error });
        }
      }
      // Exec-channel directories of processes that died before closing them (their containers
      // may have gone by any remover: a watchdog, a queue worker's reaper, `docker rm`).
      const channels = await removeOrphanTempDirs(CHANNEL_TEMP_PREFIX);
      if (channels.removed.length > 0) this.logger.debug("removed dead processes' exec-channel directories", { dirs: channels.removed });
      for (const { path, error } of channels.failed) this.logger.warn("a dead process's exec-channel directory could not be removed", { dir: path, error });
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

  /** A detached watchdog (one per owner, see watchdog.ts) removes this owner's containers if the owner dies (kill -9 included). */
  private async ensureWatchdog(): Promise<void> {
    if (this.watchdog) await watchOwner(this.docker, this.ownerId, this.logger);
  }

  private async createSandbox(options: SandboxCreateOptions): Promise<Sandbox> {
    const { signal } = options;
    throwIfAborted(signal);
    await this.ensureWatchdog();
    let imageInfo: Dockerode.ImageInspectInfo;
    try {
      imageInfo = await this.docker.getImage(options.image).inspect();
    } catch (error) {
      if (statusCode(error) === 404) {
        throw new ImageError(`Image "${options.image}" is not present locally; call resolveImage() first (it pulls or builds).`, options.image, { cause: error });
      }
      throw error;
    }
    const toolchain = await this.toolchain(options.image);
    const paths = await this.daemonPaths();
    const trial = options.labels?.[LABELS.trial];
    if (options.joinNetworkOf) return this.startJoined(options, options.joinNetworkOf, imageInfo, toolchain, paths, containerName(trial));
    const spec = await this.containerSpec({ ...options, mounts: onDaemonHost(options.mounts, paths) }, imageInfo, toolchain);
    if (!this.pool.enabled) return this.start(spec, paths, containerName(trial), spec.labels, signal);

    // The image's id, not its name, so a rebuilt tag never hands out a container of the old image.
    const key = poolKey(imageInfo.Id, { ...options, lifetimeMs: roundLifetimeSec(options.lifetimeMs, this.lifetimeStepMs) });
    let sandbox: DockerSandbox;
    try {
      // Started ahead of demand they cannot carry this caller's trial label: they get the run's
      // labels plus proctor.pooled=true, and the trial in their name (renamed when handed out).
      const { [LABELS.trial]: _trial, ...shared } = spec.labels;
      const warm = await this.pool.acquire(key, () => this.start(spec, paths, containerName("warm"), { ...shared, [POOLED_LABEL]: "true" }, undefined), options.upcoming);
      if (warm) {
        if (signal?.aborted) {
          void warm.kill().catch(() => undefined); // its removal is tracked for drain()
          throwIfAborted(signal);
        }
        const name = containerName(trial);
        await warm.rename(name).catch((error: unknown) => this.logger.warn("renaming a pooled sandbox failed; it keeps its warm-up name", { id: warm.id, name, error: daemonMessage(error) }));
        sandbox = warm;
      } else {
        sandbox = await this.start(spec, paths, containerName(trial), spec.labels, signal);
      }
    } catch (error) {
      this.pool.release(key);
      throw error;
    }
    sandbox.onKill(() => this.pool.release(key));
    return sandbox;
  }

  /**
   * Which of this process's paths the daemon's host has (asked once). In a container of the
   * daemon whose temp dir is its own, the exec channel is off (said once): execs use docker exec.
   */
  async canMount(hostPath: string): Promise<boolean> {
    if (!isAbsolute(hostPath)) return false;
    const paths = await this.daemonPaths().catch(() => null);
    return paths !== null && paths.hostPathOf(hostPath) !== null;
  }

  private daemonPaths(): Promise<DaemonPaths> {
    this.daemonPathsFound ??= detectDaemonPaths(this.docker).then(
      (paths) => {
        if (paths.container !== null) {
          const channel = this.execChannel && paths.hostPathOf(tmpdir()) === null ? "; the exec channel is off (this container's temp dir is not on the daemon's host): execs use docker exec" : "";
          this.logger.info(`running in container ${paths.container.slice(0, 12)} of the Docker daemon: sandboxes are its siblings, bind mounts come from its mounts and volumes only${channel}`);
        }
        return paths;
      },
      (error: unknown) => {
        this.daemonPathsFound = undefined;
        throw error;
      },
    );
    return this.daemonPathsFound;
  }

  /** The trusted toolchain volume, filled once per runtime (through a container of `image`). */
  private toolchain(image: string): Promise<string> {
    this.toolchainVolume ??= ensureToolchainVolume(this.docker, image, this.logger).catch((error: unknown) => {
      this.toolchainVolume = undefined;
      throw error;
    });
    return this.toolchainVolume;
  }

  private async containerSpec(options: SandboxCreateOptions, imageInfo: Dockerode.ImageInspectInfo, toolchain: string): Promise<ContainerSpec> {
    const imageUser = imageInfo.Config?.User ?? "";
    const workdir = options.workdir ?? (imageInfo.Config?.WorkingDir || SANDBOX_PATHS.workdir);
    const paths: Record<string, string> = { ...SANDBOX_PATHS, workdir };
    const env = [
      ...Object.entries(SANDBOX_PATH_ENV).map(([name, key]) => `${name}=${paths[key]}`),
      ...Object.entries(options.env ?? {}).map(([name, value]) => `${name}=${value}`),
    ];
    const labels = { ...options.labels, [LABELS.managed]: "true", [LABELS.owner]: this.ownerId };
    const hostConfig: Dockerode.HostConfig = {
      NetworkMode: options.joinNetworkOf ? `container:${options.joinNetworkOf}` : options.network ? "bridge" : "none",
      Privileged: false,
      SecurityOpt: ["no-new-privileges"],
      CapDrop: [...DROPPED_CAPABILITIES],
      PidsLimit: options.pidsLimit ?? DEFAULT_PIDS_LIMIT,
      Init: await this.supportsInit(),
      Mounts: [{ Type: "volume", Source: toolchain, Target: TOOLCHAIN_DIR, ReadOnly: true }],
    };
    if (options.cpus !== undefined) hostConfig.NanoCpus = Math.round(options.cpus * 1e9);
    if (options.memoryMb !== undefined) {
      hostConfig.Memory = Math.round(options.memoryMb * 1024 * 1024);
      hostConfig.MemorySwap = hostConfig.Memory; // no swap on top of the limit
    }
    applyContainerSettings(hostConfig, options.mounts, options.container);
    return { image: options.image, lifetimeSec: roundLifetimeSec(options.lifetimeMs, this.lifetimeStepMs), imageUser, workdir, env, labels, hostConfig };
  }

  /**
   * A container on `other`'s network namespace. Docker would share the other container's
   * /etc/hosts and /etc/resolv.conf files with it, which that container's processes may have
   * rewritten: it gets read-only copies of them as the other container started instead (when the
   * daemon can see this process's temp dir; else `networkFilesShared` says it could not).
   */
  private async startJoined(options: SandboxCreateOptions, other: string, imageInfo: Dockerode.ImageInspectInfo, toolchain: string, paths: DaemonPaths, name: string): Promise<DockerSandbox> {
    const files = this.networkFiles.get(other);
    const dir = files && (paths.container === null || paths.hostPathOf(tmpdir()) !== null) ? await mkdtemp(join(tmpdir(), NETWORK_FILES_PREFIX)) : null;
    try {
      const mounts = [...(options.mounts ?? [])];
      if (dir && files) {
        await writeFile(join(dir, "hosts"), files.hosts, { mode: 0o644 });
        await writeFile(join(dir, "resolv.conf"), files.resolvConf, { mode: 0o644 });
        mounts.push({ hostPath: join(dir, "hosts"), sandboxPath: "/etc/hosts", readOnly: true }, { hostPath: join(dir, "resolv.conf"), sandboxPath: "/etc/resolv.conf", readOnly: true });
      }
      const spec = await this.containerSpec({ ...options, mounts: onDaemonHost(mounts, paths) }, imageInfo, toolchain);
      const sandbox = await this.start(spec, paths, name, spec.labels, options.signal, dir ? () => rm(dir, { recursive: true, force: true }) : undefined);
      sandbox.networkFilesShared = dir === null;
      return sandbox;
    } catch (error) {
      if (dir) await rm(dir, { recursive: true, force: true });
      throw error;
    }
  }

  /** Creates and starts one container; resolves once its entrypoint reported the log dirs ready. */
  private async start(spec: ContainerSpec, paths: DaemonPaths, name: string, labels: Record<string, string>, signal: AbortSignal | undefined, afterRemoval?: () => Promise<void>): Promise<DockerSandbox> {
    // No channel directory at all where the daemon's host cannot see it (nothing to clean up there).
    const channel = this.execChannel && paths.hostPathOf(tmpdir()) !== null ? await ExecChannel.create(this.logger, { startTimeoutMs: this.channelStartTimeoutMs }) : null;
    const channelOnHost = channel ? paths.hostPathOf(channel.hostDir) : null;
    let container: Dockerode.Container;
    try {
      container = await this.docker.createContainer({
        name,
        Image: spec.image,
        Entrypoint: [
          TRUSTED_BUSYBOX, "sh", "-c", ENTRYPOINT, KEEPALIVE_TAG, spec.imageUser,
          String(spec.lifetimeSec === 0 ? 0 : Math.floor(Date.now() / 1000) + spec.lifetimeSec),
          channel ? CHANNEL_DIR : "",
        ],
        // The main process runs as root; execs default to the image's USER (see DockerSandbox).
        User: "0",
        Cmd: [],
        Env: spec.env,
        WorkingDir: spec.workdir,
        Labels: labels,
        Tty: false,
        OpenStdin: false,
        HostConfig: channel && channelOnHost ? { ...spec.hostConfig, Binds: [...(spec.hostConfig.Binds ?? []), channel.bind(channelOnHost)] } : spec.hostConfig,
      });
    } catch (error) {
      await channel?.close();
      throw startFailure(`Creating a container from "${spec.image}" failed: ${daemonMessage(error)}`, error);
    }
    this.images.started(spec.image);
    const removed = (removal: Promise<void>) => {
      this.networkFiles.delete(container.id);
      this.trackRemoval(afterRemoval ? removal.finally(afterRemoval) : removal);
    };
    const sandbox = new DockerSandbox(container, spec.workdir, spec.imageUser, this.logger, removed, channel, this.fastPath);
    sandbox.hostSocketForwarder = (path, port) => {
      const onHost = paths.hostPathOf(path);
      if (onHost === null) {
        return Promise.reject(
          new SandboxError(
            `forwarding host socket ${path} into ${container.id}: this process runs in container ${paths.container?.slice(0, 12)} and ${path} is on its own filesystem, which the Docker daemon cannot bind into the sandbox; put the socket's directory on a bind mount or volume of this container (e.g. TMPDIR on one)`,
          ),
        );
      }
      return startHostSocketForwarder(this.docker, container, onHost, port, { image: this.forwarderImage, logger: this.logger });
    };
    try {
      throwIfAborted(signal);
      // Docker creates the workdir; the entrypoint creates the log dirs and reports on stdout.
      await channel?.arm();
      const ready = await startAndWaitReady(container, () => container.start(), signal);
      sandbox.keepAlivePid = ready.pid;
      if (ready.networkFiles) this.networkFiles.set(container.id, ready.networkFiles);
      await channel?.started(ready.channel);
      throwIfAborted(signal);
    } catch (error) {
      await sandbox.kill().catch((cleanup: unknown) => this.logger.warn("removing a container that failed to start failed", { id: container.id, error: daemonMessage(cleanup) }));
      if (error instanceof SandboxError) throw error;
      throw startFailure(`Starting a container from "${spec.image}" failed: ${daemonMessage(error)}.`, error);
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

/** `mounts` with their host paths as the daemon's host has them; one it has not is a SandboxStartError saying how to share it. */
function onDaemonHost(mounts: SandboxCreateOptions["mounts"], paths: DaemonPaths): SandboxCreateOptions["mounts"] {
  if (!mounts || paths.container === null) return mounts;
  return mounts.map((mount) => {
    if (!isAbsolute(mount.hostPath)) return mount; // refused with its own message when applied
    const hostPath = paths.hostPathOf(mount.hostPath);
    if (hostPath === null) {
      throw new SandboxStartError(
        `mount ${mount.hostPath} -> ${mount.sandboxPath}: this process runs in container ${paths.container?.slice(0, 12)} and ${mount.hostPath} is on its own filesystem, which the Docker daemon cannot bind into a sandbox; keep it on a bind mount or volume of this container (for proctor-worker: PROCTOR_WORKER_DIR on one)`,
      );
    }
    return { ...mount, hostPath };
  });
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
 * A container that could not be created or started: RuntimeUnavailableError when the daemon did
 * not answer (the engine waits for it before the retry; a restart outlasts a plain backoff),
 * else SandboxStartError.
 */
function startFailure(message: string, error: unknown): SandboxError {
  return isConnectionError(error)
    ? new RuntimeUnavailableError(`${message.replace(/\.?$/, ".")} The Docker daemon stopped answering; the trial is retried once it is back.`, { cause: error })
    : new SandboxStartError(message, { cause: error });
}
