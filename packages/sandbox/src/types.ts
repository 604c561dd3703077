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
  env?: Record<string, string>;
  /** Sandbox path of the working directory; default: the image's WORKDIR, else /app. */
  workdir?: string;
  /** Identify what started the sandbox (proctor.run, proctor.trial, ...); proctor.owner is added. */
  labels?: Record<string, string>;
  signal?: AbortSignal;
}

export interface ImageRequest {
  /** Wanted image reference, if the task names one. */
  image: string | null;
  /** Host directory with a Dockerfile, used when the image is absent and cannot be pulled. */
  buildContext: string | null;
  buildTimeoutMs: number;
  signal?: AbortSignal;
  onProgress?: (line: string) => void;
}

export interface Sandbox extends AsyncDisposable {
  readonly id: string;
  readonly runtime: string;
  /** Sandbox path of the working directory. */
  readonly workdir: string;
  exec(command: ExecCommand, options?: ExecOptions): Promise<ExecResult>;
  /** Copy a host file, or a host directory's contents, to a sandbox path (created if absent). */
  upload(hostPath: string, sandboxPath: string): Promise<void>;
  writeFile(sandboxPath: string, data: string | Uint8Array, options?: { mode?: number }): Promise<void>;
  /** A file's bytes, or null when it does not exist. Throws past maxBytes (default 10 MiB). */
  readFile(sandboxPath: string, options?: { maxBytes?: number }): Promise<Buffer | null>;
  /** Copy a sandbox directory's contents into a host directory; a missing source copies nothing. */
  download(sandboxPath: string, hostDir: string): Promise<void>;
  /** Kill everything and remove the sandbox. Safe to call twice and concurrently. */
  kill(): Promise<void>;
  /**
   * False once the sandbox has stopped by itself (its main process ended: an agent killed every
   * process, the OOM killer). Lets a caller tell the agent's sabotage from a runtime failure.
   */
  isRunning?(): Promise<boolean>;
}

export interface SandboxRuntime {
  readonly name: "docker" | "local";
  /** Make the image available (use, pull, or build) and return the reference to create with. */
  resolveImage(request: ImageRequest): Promise<string>;
  create(options: SandboxCreateOptions): Promise<Sandbox>;
  /** Remove sandboxes whose owner process is gone; returns how many were removed. */
  reap(): Promise<number>;
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
