/**
 * The contract every sandbox backend implements. Paths given to these methods are sandbox
 * paths (/app, /logs/verifier, /tests, ...); a runtime that is not a container maps them
 * onto its own root. Commands should reach the standard directories through the env vars in
 * SANDBOX_PATH_ENV, which every runtime sets, so the same script runs everywhere.
 */

/** An argv array, or one explicit shell string run by `/bin/sh -c`. Never split on spaces. */
export type ExecCommand = readonly string[] | { readonly shell: string };

export interface ExecOptions {
  /** Sandbox path; default: the sandbox's workdir. */
  cwd?: string;
  /** Added to the sandbox's env for this exec only. */
  env?: Record<string, string>;
  /** User name or uid inside the sandbox; default: the image's user (root for ours). */
  user?: string;
  stdin?: string | Uint8Array;
  /** Kill the whole process tree after this long; the result has timedOut = true. */
  timeoutMs?: number;
  /** Abort kills the process tree the same way; the result has aborted = true. */
  signal?: AbortSignal;
  onStdout?: (chunk: Buffer) => void;
  onStderr?: (chunk: Buffer) => void;
  /** Per stream cap on what the result keeps (callbacks still see everything). Default 1 MiB. */
  maxOutputBytes?: number;
}

export interface ExecResult {
  /** The process's exit code; 137 style (128 + signal) when it was killed; -1 if unknown. */
  exitCode: number;
  stdout: string;
  stderr: string;
  /** True when either stream was longer than maxOutputBytes and was cut. */
  truncated: boolean;
  timedOut: boolean;
  aborted: boolean;
  durationMs: number;
}

export interface SandboxCreateOptions {
  /** Image reference (Docker); the local runtime records it and ignores it. */
  image: string;
  cpus?: number;
  memoryMb?: number;
  pidsLimit?: number;
  /** Outbound network; default false (no network at all). */
  network?: boolean;
  /**
   * capabilities.joinNetwork: share the network namespace of this running sandbox (its id)
   * instead of getting one of its own (`network` is then ignored): services its processes serve
   * on localhost stay reachable, while files and processes stay apart. Name resolution
   * (/etc/hosts, /etc/resolv.conf) is the other sandbox's as it started, not as its processes
   * left it, where the runtime can do that (see Sandbox.networkFilesShared).
   */
  joinNetworkOf?: string;
  env?: Record<string, string>;
  /** Sandbox path of the working directory; default: the image's WORKDIR, else /app. */
  workdir?: string;
  /** Identify what started the sandbox (proctor.run, proctor.trial, ...); proctor.owner is added. */
  labels?: Record<string, string>;
  /** Host directories bound into the sandbox (e.g. a competition's public data, read-only). */
  mounts?: readonly SandboxMount[];
  /** Container settings beyond the basic limits; a runtime that cannot apply one must throw, never ignore it. */
  container?: ContainerSettings;
  /**
   * The sandbox stops by itself this long after it started, even when nobody comes back to kill
   * it (its owner died). A runtime may round it up. Default: no deadline.
   */
  lifetimeMs?: number;
  /**
   * How many more sandboxes the caller expects to create after this one (a run's trials not yet
   * started): a runtime that starts sandboxes ahead of demand starts no more than that.
   */
  upcoming?: number;
  signal?: AbortSignal;
}

/** A host directory bound at a sandbox path. */
export interface SandboxMount {
  hostPath: string;
  sandboxPath: string;
  readOnly: boolean;
}

/** `--container-config` settings (and a task's gpus) beyond memory and CPUs. */
export interface ContainerSettings {
  /** /dev/shm size in bytes. */
  shmSizeBytes?: number;
  /** Soft memory limit in bytes (the hard one is SandboxCreateOptions.memoryMb). */
  memoryReservationBytes?: number;
  /** CPUs the sandbox may run on, e.g. "0-3" or "0,2". */
  cpusetCpus?: string;
  /** Relative CPU weight (1024 = the default). */
  cpuShares?: number;
  /** GPUs through device requests: -1 every GPU, n that many; 0 or absent none. */
  gpus?: number;
  /** OCI runtime name as the daemon knows it (e.g. sysbox-runc). */
  runtime?: string;
  /** Refused unless I_ACCEPT_RUNNING_PRIVILEGED_CONTAINERS=True (checked by the runtime). */
  privileged?: boolean;
}

/**
 * What a sandbox can do beyond the basic contract. The engine asks for these, never for a
 * runtime's name, and refuses up front a task that needs one its runtime lacks.
 */
export interface SandboxCapabilities {
  /** `killAll()` ends every process in the sandbox by construction (a fresh PID namespace). */
  readonly killAll: boolean;
  /** `changes()` lists what differs from the image, as the runtime (not a process inside) sees it. */
  readonly changes: boolean;
  /**
   * `trustedTools` names a multi-call binary (busybox) the sandbox's processes cannot modify, so
   * the verifier can be started and its reward read with tools an agent could not replace.
   */
  readonly trustedTools: boolean;
  /** The sandbox has a filesystem of its own; false when sandbox paths map onto host paths. */
  readonly files: boolean;
  /** `network: false` really cuts the sandbox off; false when it runs on the host's network. */
  readonly network: boolean;
  /** `diskUsageBytes()` reports what the sandbox has written, so a disk limit can be enforced. */
  readonly diskUsage: boolean;
  /** `processes()` lists every process in the sandbox that is not the runtime's own. */
  readonly processes: boolean;
  /** `create({ joinNetworkOf })` shares another sandbox's network namespace. */
  readonly joinNetwork: boolean;
  /**
   * `auditFiles()` works here: the runtime sees, from outside the sandbox, which files the
   * sandbox's processes open, execute and write, and which process did it. Depends on the host
   * (Docker: Linux, root, a local daemon, fanotify, a C compiler), so it is false on many.
   */
  readonly fileAudit: boolean;
  /** When fileAudit is false: why, in one line a user can act on. */
  readonly fileAuditUnavailable?: string;
}

/**
 * A file audit in progress (`Sandbox.auditFiles()`). The sandbox runs as usual meanwhile; call
 * `stop()` before the sandbox is halted, restarted or killed.
 */
export interface FileAudit extends AsyncDisposable {
  /** Ends the audit and says what it saw; every call returns the same report. */
  stop(): Promise<FileAuditReport>;
}

/**
 * What a file audit saw, as raw facts (no judgement). Only the sandbox's root filesystem is
 * audited; mounts (volumes, bind mounts such as the trusted toolchain) are not.
 */
export interface FileAuditReport {
  /** Every process alive when the audit started, and every other one that made an access. */
  processes: FileAuditProcess[];
  /** Accesses, one per (process, kind, path), in the order first seen. */
  accesses: FileAccess[];
  /**
   * True when every access the kernel reported was received and named, and the sandbox did not
   * restart during the audit. A policy must not trust an incomplete report.
   */
  complete: boolean;
  /** Why the report is incomplete, one line each; empty when complete. */
  problems: string[];
  counts: {
    /** Events the kernel delivered. */
    events: number;
    /** Events whose file could not be named (the kernel could not open it for the audit). */
    unnamed: number;
    /**
     * Events of a pid that may have passed to another process since it was last seen alive; each
     * went to a new `gone` process. They do not make the report incomplete (no access was lost),
     * but their process is unknown.
     */
    ambiguous: number;
    /** Times the kernel's event queue overflowed and dropped events. */
    overflows: number;
  };
  durationMs: number;
}

/** A process seen by a file audit. Pids are host pids; `id` is unique in the report (a pid number may be reused). */
export interface FileAuditProcess {
  /** Its index in `FileAuditReport.processes`. */
  id: number;
  pid: number;
  /** Its pid inside the sandbox; null for a process outside it (the daemon copying files) or a `gone` one. */
  containerPid: number | null;
  /**
   * `before`: alive when the audit started. `new`: started during the audit, read while alive
   * (at its first exec, or at its first access when it never exec'd). `gone`: it had exited by
   * the time its first access was read, or its pid was ambiguous: nothing but the pid is known.
   */
  origin: "before" | "new" | "gone";
  /** Host pid of its parent when it was read (at its exec, for one that exec'd); null when gone. */
  ppid: number | null;
  /**
   * The parent's `id`, when the parent is a process in the sandbox; null when it started from
   * outside the sandbox (a runtime exec, i.e. Proctor's own commands) or is unknown.
   */
  parentId: number | null;
  /**
   * True for a `new` process whose parent was the sandbox's init, which adopts orphans: whoever
   * started it had already exited, so its real ancestry is lost (parentId names the init).
   */
  orphaned: boolean;
  /**
   * Sandbox path of the program it ran when first read: the file it exec'd, for one first read
   * at its exec; else its /proc/<pid>/exe then (a fork that never exec'd runs its parent's
   * program; one started by `docker exec` is first read as the runtime's `runc init`). Null when
   * unknown (gone, or exited but not yet reaped when read). Every file it exec'd during the audit
   * is an `exec` access, in order.
   */
  executable: string | null;
}

/** One file access. */
export interface FileAccess {
  /**
   * Sandbox path of the file itself (links resolved), as the kernel named it when the audit read
   * the event (usually within milliseconds): a file renamed or deleted meanwhile shows its new
   * name, or ends in " (deleted)". A file a process outside the sandbox opened (the daemon) is
   * named by its sandbox path too. Bytes that are not UTF-8 read as U+FFFD.
   */
  path: string;
  /** The FileAuditProcess `id`. */
  processId: number;
  /**
   * `open`: opened (for reading or writing); `exec`: opened to run it (a program, a script's
   * interpreter, the ELF loader); `write`: modified, or closed after being opened for writing.
   */
  kind: "open" | "exec" | "write";
}

/** A process found in the sandbox by `Sandbox.processes()`. */
export interface SandboxProcess {
  pid: number;
  ppid: number;
  /** Its command line, arguments joined by spaces (cut to 512 characters). */
  command: string;
  /** TCP ports it listens on. */
  ports: number[];
}

export interface DownloadOptions {
  /**
   * Stop after this many bytes of file content (sizes as the files claim them, so a sparse file
   * counts at its full size); the file that crosses the limit is cut. Default unlimited.
   */
  maxBytes?: number;
  /**
   * When the source is a directory: bring only these of its top-level entries (plain names), in
   * this order, so maxBytes goes to the first ones first; missing ones are left out.
   */
  entries?: readonly string[];
  /** When the source is a directory: leave out these top-level entries (plain names, e.g. ".git"). */
  exclude?: readonly string[];
  /**
   * Bring symbolic links as links (their target text, never followed, here or in the sandbox);
   * default false: links are skipped and listed. Nothing is ever written through a link.
   */
  links?: boolean;
}

/** What a download brought over. Only regular files and directories are written; links, FIFOs and devices are skipped. */
export interface DownloadReport {
  files: number;
  bytes: number;
  /** True when maxBytes stopped the download before its end. */
  truncated: boolean;
  /** The file (path relative to the source) maxBytes cut; nothing after it was read. */
  cutAt?: string;
  /** Entries left out (links unless asked for, FIFOs, devices, unsafe names), at most 100. */
  skipped: string[];
}

/** One entry of `Sandbox.changes()`: a path that differs from the image. */
export interface FileChange {
  path: string;
  kind: "added" | "modified" | "deleted";
}

export interface ImageRequest {
  /** Wanted image reference, if the task names one. */
  image: string | null;
  /** Host directory with a Dockerfile, used when the image is absent and cannot be pulled. */
  buildContext: string | null;
  /** Top-level entries of buildContext that are not part of the build (not hashed, not sent). */
  contextExclude?: readonly string[];
  buildTimeoutMs: number;
  signal?: AbortSignal;
  onProgress?: (line: string) => void;
  /**
   * Told when this request builds an image (not when it uses, pulls or reuses a cached build):
   * `started`, then `progress` with the build log's latest line (at most about once a second),
   * then `finished`. Requests that wait on a build another request started are not told.
   */
  onBuild?: (update: ImageBuildUpdate) => void;
  /** The task the image is for, recorded with the image's last use (`proctor images ls`). */
  taskId?: string;
  /** Docker build args (`ARG` values); part of the build's cache key. */
  buildArgs?: Record<string, string>;
  /** false: the build's RUN steps get no network (untrusted Dockerfiles); default: the daemon's default network. */
  buildNetwork?: boolean;
}

/** One step of an image build, for progress displays. `image` is the tag being built. */
export type ImageBuildUpdate =
  | { status: "started"; image: string; context: string }
  | { status: "progress"; image: string; line: string; elapsedMs: number }
  | { status: "finished"; image: string; ok: boolean; durationMs: number; error?: string };

export interface Sandbox extends AsyncDisposable {
  readonly id: string;
  /** The runtime's name, for logs and records only: ask `capabilities` what it can do. */
  readonly runtime: string;
  readonly capabilities: SandboxCapabilities;
  /** Sandbox path of the working directory. */
  readonly workdir: string;
  /**
   * Created with joinNetworkOf and resolving names with the other sandbox's /etc/hosts and
   * /etc/resolv.conf as its processes left them (the runtime could not give it the originals).
   */
  readonly networkFilesShared?: boolean;
  /**
   * Command prefix that runs a trusted tool: `[...trustedTools, "sh", "-c", script]`. A path the
   * sandbox's processes cannot change (capabilities.trustedTools), or `[]` to run host tools
   * directly where the sandbox is host processes.
   */
  readonly trustedTools: readonly string[];
  /** User to run the verifier and Proctor's own housekeeping as (root in a container), or undefined for the default. */
  readonly adminUser: string | undefined;
  exec(command: ExecCommand, options?: ExecOptions): Promise<ExecResult>;
  /** Copy a host file, or a host directory's contents, to a sandbox path (created if absent). */
  upload(hostPath: string, sandboxPath: string): Promise<void>;
  writeFile(sandboxPath: string, data: string | Uint8Array, options?: { mode?: number }): Promise<void>;
  /** A file's bytes, or null when it does not exist. Throws past maxBytes (default 10 MiB). */
  readFile(sandboxPath: string, options?: { maxBytes?: number }): Promise<Buffer | null>;
  /** Copy a sandbox directory's contents into a host directory; a missing source copies nothing. */
  download(sandboxPath: string, hostDir: string, options?: DownloadOptions): Promise<DownloadReport>;
  /** Kill everything and remove the sandbox. Safe to call twice and concurrently. */
  kill(): Promise<void>;
  /**
   * End every process for good and keep the files for `download()` until kill(); nothing can run
   * in the sandbox after this. A runtime that can read a halted sandbox's files without running
   * anything in it (Docker on this host: the container's upper layer) implements it; the last
   * downloads of a trial then cost no process start.
   */
  halt?(): Promise<void>;
  /**
   * False once the sandbox has stopped by itself (its main process ended: an agent killed every
   * process, the OOM killer). Lets a caller tell the agent's sabotage from a runtime failure.
   */
  isRunning?(): Promise<boolean>;
  /**
   * capabilities.killAll: end every process in the sandbox, by construction, and keep the
   * sandbox's files; the sandbox is usable again when this resolves.
   */
  killAll?(): Promise<void>;
  /** capabilities.changes: paths that differ from the image (directories included). */
  changes?(): Promise<FileChange[]>;
  /** capabilities.diskUsage: bytes the sandbox has written on top of its image. */
  diskUsageBytes?(): Promise<number>;
  /** CPU-seconds the sandbox's processes have used so far (sandbox compute cost); null when it cannot say (halted, gone). */
  cpuSeconds?(): Promise<number | null>;
  /** capabilities.processes: every live process but the runtime's own and this call's. */
  processes?(): Promise<SandboxProcess[]>;
  /**
   * capabilities.fileAudit: starts recording which files the sandbox's processes open, execute
   * and write (its root filesystem only); resolves once recording. Throws when it cannot start.
   */
  auditFiles?(): Promise<FileAudit>;
  /**
   * How many times the kernel's OOM killer has killed a process in the sandbox (its memory
   * limit was reached); for a stopped sandbox, 1 when that is why it stopped.
   */
  outOfMemoryKills?(): Promise<number>;
  /** For a stopped sandbox: true when something outside it stopped it (a daemon restart), not its own processes. */
  stoppedExternally?(): Promise<boolean>;
  /**
   * Optional: make the host Unix socket `hostSocketPath` reachable inside the sandbox as TCP
   * 127.0.0.1:`port` and nothing else (the sandbox's network stays as it was created). Resolves
   * once connections are accepted; `close()` (also done by kill) removes it. Used by the model
   * proxy; a runtime whose sandboxes are host processes has no need for it.
   */
  forwardHostSocket?(hostSocketPath: string, port: number): Promise<{ close(): Promise<void> }>;
}

export interface SandboxRuntime {
  /** For logs and run.json only; the engine decides by `capabilities`. */
  readonly name: string;
  /** What every sandbox of this runtime can do (see SandboxCapabilities). */
  readonly capabilities: SandboxCapabilities;
  /** Make the image available (use, pull, or build) and return the reference to create with. */
  resolveImage(request: ImageRequest): Promise<string>;
  create(options: SandboxCreateOptions): Promise<Sandbox>;
  /** Remove sandboxes whose owner process is gone; returns how many were removed. */
  reap(): Promise<number>;
  /**
   * Optional. Throws a clear error when the runtime cannot apply `settings` (an unknown OCI
   * runtime, GPUs the daemon lacks, privileged without consent). A runtime without this method
   * cannot apply any ContainerSettings; the engine refuses runs that ask for them.
   */
  checkContainerSettings?(settings: ContainerSettings): Promise<void>;
  /** Whether the runtime's backend answers now (a restarting daemon does not). */
  available?(): Promise<boolean>;
  /**
   * Optional. The content id of a resolved image (Docker: the image id, `sha256:...`), recorded as
   * the trial's pin; null when the runtime cannot tell.
   */
  imageId?(image: string): Promise<string | null>;
  /**
   * Optional. Whether `create({ mounts })` can bind host directory `hostPath` into a sandbox (a
   * Docker daemon sees only its own host's paths). A runtime without it binds nothing.
   */
  canMount?(hostPath: string): Promise<boolean>;
  /**
   * Optional. Wait until every sandbox this runtime killed is fully removed (a runtime may finish
   * removals in the background after kill() resolved) and remove any sandboxes it started ahead
   * of demand. Rejects when a removal failed. Call it when a run ends or is aborted; the runtime
   * stays usable afterwards.
   */
  drain?(): Promise<void>;
}

/** Sandbox paths of the standard directories and the env vars that name them. */
export const SANDBOX_PATHS = {
  workdir: "/app",
  logs: "/logs",
  agentLogs: "/logs/agent",
  verifierLogs: "/logs/verifier",
  tests: "/tests",
  solution: "/solution",
  agent: "/agent",
} as const;

export const SANDBOX_PATH_ENV = {
  PROCTOR_WORKDIR: "workdir",
  PROCTOR_LOGS_DIR: "logs",
  PROCTOR_AGENT_LOGS_DIR: "agentLogs",
  PROCTOR_VERIFIER_LOGS_DIR: "verifierLogs",
  PROCTOR_TESTS_DIR: "tests",
  PROCTOR_SOLUTION_DIR: "solution",
  PROCTOR_AGENT_DIR: "agent",
} as const;

/** Labels every sandbox carries so a reaper can find what a crash left behind. */
export const LABELS = {
  managed: "proctor.managed",
  run: "proctor.run",
  trial: "proctor.trial",
  owner: "proctor.owner",
} as const;
