import { isAbsolute } from "node:path";
import type Dockerode from "dockerode";
import { SandboxStartError, type ContainerSettings, type SandboxMount } from "@proctor/sandbox";

/** The env var (and value) that must be set before a privileged container is started. */
export const PRIVILEGED_CONSENT_ENV = "I_ACCEPT_RUNNING_PRIVILEGED_CONTAINERS";

/** Thrown when the daemon cannot honour a container setting; raised before any trial starts. */
export class ContainerSettingsError extends SandboxStartError {
  override name = "ContainerSettingsError";
}

function privilegedAllowed(env: NodeJS.ProcessEnv): boolean {
  return env[PRIVILEGED_CONSENT_ENV] === "True";
}

function refusePrivileged(): never {
  throw new ContainerSettingsError(
    `privileged containers are refused unless ${PRIVILEGED_CONSENT_ENV}=True is set in Proctor's environment: a privileged container can take over the host. Set it only for agents you trust, or drop "privileged" from the container config (and privileged = true from the agent's agent.toml).`,
  );
}

interface DaemonInfo {
  Runtimes?: Record<string, unknown>;
  DefaultRuntime?: string;
  DiscoveredDevices?: { Source?: string; ID?: string }[];
}

/**
 * GPUs the daemon can hand out: `count` from the CDI GPU devices it discovered (each
 * `vendor/gpu=<n>` is one; `=all` is not counted), null when only the NVIDIA runtime is
 * registered (docker info does not say how many GPUs it sees); `none` when neither is there.
 */
function daemonGpus(info: DaemonInfo): { none: true } | { none: false; count: number | null; described: string } {
  const cdi = (info.DiscoveredDevices ?? []).filter((d) => d.Source === "cdi" && /gpu/i.test(d.ID ?? "")).map((d) => d.ID ?? "");
  const nvidia = Object.keys(info.Runtimes ?? {}).filter((name) => name.includes("nvidia"));
  if (cdi.length === 0 && nvidia.length === 0) return { none: true };
  const each = new Set(cdi.filter((id) => !/=all$/i.test(id)));
  if (each.size > 0) return { none: false, count: each.size, described: `CDI devices ${[...each].join(", ")}` };
  return { none: false, count: null, described: nvidia.length > 0 ? `the ${nvidia.join(", ")} runtime` : `CDI devices ${cdi.join(", ")}` };
}

/**
 * Checks `settings` against the daemon (`docker info`) and the environment; throws a
 * ContainerSettingsError naming the setting and the fix. Meant to run before any trial starts.
 */
export async function checkContainerSettings(docker: Dockerode, settings: ContainerSettings, env: NodeJS.ProcessEnv = process.env): Promise<void> {
  if (settings.privileged === true && !privilegedAllowed(env)) refusePrivileged();
  if (settings.runtime === undefined && !(settings.gpus !== undefined && settings.gpus !== 0)) return;
  const info = (await docker.info()) as DaemonInfo;
  if (settings.runtime !== undefined) {
    const known = Object.keys(info.Runtimes ?? {});
    if (!known.includes(settings.runtime)) {
      throw new ContainerSettingsError(
        `runtime "${settings.runtime}" is not known to the Docker daemon (docker info lists: ${known.join(", ") || "none"}): install and register it with the daemon, or drop "runtime" from the container config.`,
      );
    }
  }
  if (settings.gpus !== undefined && settings.gpus !== 0) {
    const wanted = `${settings.gpus === -1 ? "all GPUs" : `${settings.gpus} GPU(s)`} requested (container config "gpus" or a task's [environment].gpus)`;
    const offered = daemonGpus(info);
    if (offered.none) {
      throw new ContainerSettingsError(`${wanted}, but this Docker daemon has no GPU support (no nvidia runtime and no CDI GPU device in docker info): install the NVIDIA Container Toolkit, or drop the gpus setting.`);
    }
    if (offered.count !== null && settings.gpus > offered.count) {
      throw new ContainerSettingsError(`${wanted}, but this Docker daemon offers ${offered.count} (${offered.described}): ask for at most ${offered.count}, or -1 for all of them.`);
    }
  }
}

/** Applies mounts and container settings to a HostConfig; refuses a privileged container without consent. */
export function applyContainerSettings(
  hostConfig: Dockerode.HostConfig,
  mounts: readonly SandboxMount[] | undefined,
  settings: ContainerSettings | undefined,
  env: NodeJS.ProcessEnv = process.env,
): void {
  for (const mount of mounts ?? []) {
    if (!isAbsolute(mount.hostPath) || !mount.sandboxPath.startsWith("/")) {
      throw new SandboxStartError(`mount ${mount.hostPath} -> ${mount.sandboxPath}: both paths must be absolute`);
    }
    (hostConfig.Mounts ??= []).push({ Type: "bind", Source: mount.hostPath, Target: mount.sandboxPath, ReadOnly: mount.readOnly });
  }
  if (!settings) return;
  if (settings.shmSizeBytes !== undefined) hostConfig.ShmSize = settings.shmSizeBytes;
  if (settings.memoryReservationBytes !== undefined) hostConfig.MemoryReservation = settings.memoryReservationBytes;
  if (settings.cpusetCpus !== undefined) hostConfig.CpusetCpus = settings.cpusetCpus;
  if (settings.cpuShares !== undefined) hostConfig.CpuShares = settings.cpuShares;
  if (settings.runtime !== undefined) hostConfig.Runtime = settings.runtime;
  if (settings.gpus !== undefined && settings.gpus !== 0) {
    hostConfig.DeviceRequests = [{ Driver: "", Count: settings.gpus, DeviceIDs: [], Capabilities: [["gpu"]], Options: {} }];
  }
  if (settings.privileged === true) {
    if (!privilegedAllowed(env)) refusePrivileged();
    hostConfig.Privileged = true;
  }
}

const SIZE = /^\s*(\d+(?:\.\d+)?)\s*([bkmgt]?)b?\s*$/i;
const BYTES_PER_UNIT: Record<string, number> = { "": 1, b: 1, k: 1024, m: 1024 ** 2, g: 1024 ** 3, t: 1024 ** 4 };

/** Bytes in a Docker-style size ("2g", "512m", 1073741824); null when it is not one. */
function parseSizeBytes(value: unknown): number | null {
  if (typeof value === "number") return Number.isInteger(value) && value > 0 ? value : null;
  if (typeof value !== "string") return null;
  const [, amount, unit] = SIZE.exec(value) ?? [];
  if (amount === undefined || unit === undefined) return null;
  const bytes = Math.round(Number(amount) * (BYTES_PER_UNIT[unit.toLowerCase()] ?? Number.NaN));
  return Number.isFinite(bytes) && bytes > 0 ? bytes : null;
}

/**
 * A parsed `--container-config` file: memory, CPUs and the process cap as run defaults
 * (`memoryMb: null`: explicitly no memory limit, docker-py's `mem_limit: null`), the rest as
 * ContainerSettings.
 */
export interface ContainerConfig {
  memoryMb?: number | null;
  cpus?: number;
  pidsLimit?: number;
  settings: ContainerSettings;
}

/** The keys Proctor applies (MLE-bench's, plus a few more of docker-py's `containers.run`). */
const KEYS = ["mem_limit", "shm_size", "nano_cpus", "cpu_period", "cpu_quota", "cpuset_cpus", "cpu_shares", "mem_reservation", "pids_limit", "gpus", "runtime", "privileged"] as const;

const SET_BY_PROCTOR = "is set by Proctor for every sandbox (image, entrypoint, name, labels, user, workdir and lifecycle are its own)";
const NETWORK = "is not taken from the container config: a sandbox's network follows the task (allow_internet), and no port is published";
const FILES = "is not taken from the container config: files reach the sandbox through the task (data/public at /home/data) and the agent image, never through host mounts";
const ISOLATION = "would weaken the sandbox's isolation (Proctor drops capabilities and sets no-new-privileges); the only opening is \"privileged\", behind I_ACCEPT_RUNNING_PRIVILEGED_CONTAINERS=True";
const UNSUPPORTED = "is not supported";
/**
 * docker-py `containers.run` arguments Proctor does not apply, each with why (a config naming one
 * is refused by name rather than run with the setting silently dropped).
 */
const REFUSED: Record<string, string> = {
  ...Object.fromEntries(["image", "command", "entrypoint", "name", "hostname", "domainname", "labels", "detach", "auto_remove", "remove", "stdin_open", "tty", "stream", "stdout", "stderr", "working_dir", "user", "init", "init_path", "restart_policy", "healthcheck", "stop_signal", "log_config", "platform", "version", "use_config_proxy"].map((k) => [k, SET_BY_PROCTOR])),
  ...Object.fromEntries(["network", "network_mode", "network_disabled", "networking_config", "ports", "publish_all_ports", "dns", "dns_opt", "dns_search", "extra_hosts", "links", "mac_address"].map((k) => [k, NETWORK])),
  ...Object.fromEntries(["volumes", "volumes_from", "volume_driver", "mounts", "tmpfs"].map((k) => [k, FILES])),
  ...Object.fromEntries(["cap_add", "cap_drop", "security_opt", "devices", "device_cgroup_rules", "ipc_mode", "pid_mode", "userns_mode", "uts_mode", "cgroupns", "cgroup_parent", "sysctls", "oom_kill_disable", "group_add", "read_only", "lxc_conf", "isolation"].map((k) => [k, ISOLATION])),
  environment: 'is not taken from the container config: put the agent\'s variables in agent.toml [env]',
  device_requests: 'is not taken as is: ask for GPUs with "gpus" (-1 = all, or a count), which Proctor checks against the daemon',
  memswap_limit: "is not supported: sandboxes get no swap (swap limit = mem_limit)",
  mem_swappiness: "is not supported: sandboxes get no swap",
  storage_opt: "is not supported: limit disk with the task's [environment] storage_mb",
  kernel_memory: `${UNSUPPORTED} (Docker no longer honours it)`,
  ...Object.fromEntries(["cpu_count", "cpu_percent"].map((k) => [k, `${UNSUPPORTED} (Windows containers only): use nano_cpus`])),
  ...Object.fromEntries(["cpu_rt_period", "cpu_rt_runtime", "cpuset_mems", "blkio_weight", "blkio_weight_device", "device_read_bps", "device_read_iops", "device_write_bps", "device_write_iops", "oom_score_adj", "ulimits"].map((k) => [k, UNSUPPORTED])),
};

/**
 * Parses MLE-bench's container config JSON (`environment/config/container_configs/*.json`): the
 * keyword arguments of docker-py's `containers.run`, plus `gpus` (-1 = all). Applied: `mem_limit`
 * (a size, or null for no limit), `shm_size`, `nano_cpus` (or `cpu_quota` / `cpu_period`),
 * `cpuset_cpus`, `cpu_shares`, `mem_reservation`, `pids_limit`, `gpus`, `runtime`, `privileged`.
 * `null` for any key means "not set", as in docker-py. Every other docker-py argument is refused
 * by name with why; anything else is an unknown field. Throws an Error naming the file and field.
 */
export function parseContainerConfig(text: string, file: string): ContainerConfig {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (error) {
    throw new Error(`${file}: not valid JSON: ${(error as Error).message}`, { cause: error });
  }
  if (typeof raw !== "object" || raw === null || Array.isArray(raw)) throw new Error(`${file}: must be a JSON object with ${KEYS.join(", ")}`);
  const obj = raw as Record<string, unknown>;
  // null = not set (docker-py's None); mem_limit: null also says "no memory limit" to the run.
  const set = Object.fromEntries(Object.entries(obj).filter(([, v]) => v !== null));
  const refused = Object.keys(set).filter((key) => key in REFUSED);
  if (refused.length > 0) throw new Error(`${file}: ${refused.map((key) => `"${key}" ${REFUSED[key]}`).join("; ")}`);
  const unknown = Object.keys(obj).filter((key) => !(KEYS as readonly string[]).includes(key) && !(key in REFUSED));
  if (unknown.length > 0) throw new Error(`${file}: unknown field(s) ${unknown.join(", ")}: not docker-py containers.run arguments; the container config applies ${KEYS.join(", ")}`);
  const bad = (field: string, expected: string) => new Error(`${file}: "${field}" must be ${expected}, got ${JSON.stringify(obj[field])}`);
  const config: ContainerConfig = { settings: {} };
  if (obj.mem_limit === null) config.memoryMb = null;
  if (set.mem_limit !== undefined) {
    const bytes = parseSizeBytes(set.mem_limit);
    if (bytes === null) throw bad("mem_limit", 'a size such as "4g", a number of bytes, or null for no limit');
    config.memoryMb = Math.max(1, Math.ceil(bytes / 1024 ** 2));
  }
  if (set.shm_size !== undefined) {
    const bytes = parseSizeBytes(set.shm_size);
    if (bytes === null) throw bad("shm_size", 'a size such as "2g" or a number of bytes');
    config.settings.shmSizeBytes = bytes;
  }
  if (set.mem_reservation !== undefined) {
    const bytes = parseSizeBytes(set.mem_reservation);
    if (bytes === null) throw bad("mem_reservation", 'a size such as "1g" or a number of bytes');
    config.settings.memoryReservationBytes = bytes;
  }
  if (set.nano_cpus !== undefined) {
    // MLE-bench writes 4e9 and casts with int(): any positive number, whole nanoCPUs.
    if (typeof set.nano_cpus !== "number" || !(Math.trunc(set.nano_cpus) > 0)) throw bad("nano_cpus", "a positive number (1e9 = one CPU)");
    config.cpus = Math.trunc(set.nano_cpus) / 1e9;
  }
  if (set.cpu_quota !== undefined || set.cpu_period !== undefined) {
    if (set.nano_cpus !== undefined) throw new Error(`${file}: give the CPUs once: "nano_cpus" or "cpu_quota" / "cpu_period", not both`);
    if (set.cpu_quota === undefined) throw new Error(`${file}: "cpu_period" needs "cpu_quota" (CPUs = cpu_quota / cpu_period)`);
    const whole = (field: string, value: unknown, min: number) => {
      if (typeof value !== "number" || !Number.isInteger(value) || value < min) throw bad(field, `a whole number of microseconds >= ${min}`);
      return value;
    };
    const quota = whole("cpu_quota", set.cpu_quota, 1000);
    const period = set.cpu_period === undefined ? 100_000 : whole("cpu_period", set.cpu_period, 1000);
    config.cpus = quota / period;
  }
  if (set.cpuset_cpus !== undefined) {
    if (typeof set.cpuset_cpus !== "string" || !/^\d+(-\d+)?(,\d+(-\d+)?)*$/.test(set.cpuset_cpus.trim())) throw bad("cpuset_cpus", 'CPU numbers such as "0-3" or "0,2"');
    config.settings.cpusetCpus = set.cpuset_cpus.trim();
  }
  if (set.cpu_shares !== undefined) {
    if (typeof set.cpu_shares !== "number" || !Number.isInteger(set.cpu_shares) || set.cpu_shares < 2) throw bad("cpu_shares", "a whole number >= 2 (1024 = the default weight)");
    config.settings.cpuShares = set.cpu_shares;
  }
  if (set.pids_limit !== undefined) {
    if (typeof set.pids_limit !== "number" || !Number.isInteger(set.pids_limit) || set.pids_limit < 1) throw bad("pids_limit", "a whole number >= 1 (Proctor always caps processes)");
    config.pidsLimit = set.pids_limit;
  }
  if (set.gpus !== undefined) {
    const gpus = set.gpus === "all" ? -1 : set.gpus;
    if (typeof gpus !== "number" || !Number.isInteger(gpus) || gpus < -1) throw bad("gpus", '-1 or "all" (every GPU) or a whole number >= 0');
    if (gpus !== 0) config.settings.gpus = gpus;
  }
  if (set.runtime !== undefined) {
    if (typeof set.runtime !== "string" || set.runtime.trim() === "") throw bad("runtime", 'an OCI runtime name such as "sysbox-runc"');
    config.settings.runtime = set.runtime;
  }
  if (set.privileged !== undefined) {
    if (typeof set.privileged !== "boolean") throw bad("privileged", "true or false");
    if (set.privileged) config.settings.privileged = true;
  }
  return config;
}
