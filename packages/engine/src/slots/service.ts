import { execFile } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync } from "node:fs";
import { mkdir, rename, rm } from "node:fs/promises";
import { homedir } from "node:os";
import { join, resolve } from "node:path";
import { promisify } from "node:util";
import {
  SandboxError,
  SandboxStoppedError,
  SandboxClosedError,
  SlotGoneError,
  SlotPathError,
  SlotPool,
  SlotPoolExhaustedError,
  type Slot,
  type SlotPoolOptions,
  type SlotRepo,
} from "@proctor/sandbox";
import { loadTasks } from "@proctor/tasks";
import type { Logger, TaskSpec } from "@proctor/schema";
import { EngineError } from "../errors";
import { RepoCache, repoUrl } from "../workspace";
import { runSwebenchTests } from "../swebench/grade";
import { verifyRewardTask } from "./verify";

const run = promisify(execFile);

/**
 * A slot request the service refuses. `status` is the HTTP status an API answers with (400 bad
 * request, 403 another credential's slot, 404 unknown, 410 gone, 503 pool exhausted), `code` its
 * stable machine-readable name.
 */
export class SlotServiceError extends EngineError {
  override name = "SlotServiceError";
  constructor(
    readonly status: 400 | 403 | 404 | 410 | 503,
    readonly code: string,
    message: string,
    options: { cause?: unknown; retryAfterSec?: number } = {},
  ) {
    super(message, { cause: options.cause });
    this.retryAfterSec = options.retryAfterSec ?? null;
  }
  /** With a 503: when to try again. */
  readonly retryAfterSec: number | null;
}

const badRequest = (message: string) => new SlotServiceError(400, "bad_request", message);

/** The pool settings are SlotPool's, for every (credential, image) pool the service keeps. */
export interface SlotServiceOptions
  extends Pick<SlotPoolOptions, "runtime" | "slotsPerSandbox" | "minSandboxes" | "maxSandboxes" | "acquireTimeoutMs" | "idleTimeoutMs" | "maxLifetimeMs"> {
  /** Image of slots that name neither an image nor a task. */
  defaultImage: string;
  /**
   * Tasks a slot may name (`task`), loaded once at start: a task dir, a dir of task dirs, or a
   * SWE-bench / SWE-smith dataset file (.jsonl/.json). verify runs their tests.
   */
  tasksDir?: string | null;
  /**
   * Repositories: the ones a slot may name (`repo.name`: `<dir>/<owner>__<name>.git` or
   * `<dir>/<name>.git`), and the bare mirrors a SWE dataset's rows are read from (as `--repos-dir`).
   */
  reposDir?: string | null;
  /** SWE rows without image_name: the image, `{repo}` `{version}` `{instance_id}` filled in (as `--image`). */
  imageTemplate?: string | null;
  /** Largest file a slot's file routes move (default 64 MiB). */
  maxFileBytes?: number;
  /** Host cache for repositories and built task files (default ~/.cache/proctor/slots). */
  cacheDir?: string;
  labels?: Record<string, string>;
  logger: Logger;
}

export interface SlotCreateRequest {
  image?: string;
  task?: string;
  repo?: { name: string; commit: string };
  env?: Record<string, string>;
  ttlSec?: number;
}

/** A slot the service handed out, with who holds it and what verify runs. */
export interface SlotEntry {
  readonly slot: Slot;
  readonly pool: SlotPool;
  /** The credential that created it (null: auth off). */
  readonly owner: string | null;
  readonly task: TaskSpec | null;
}

/** One test of a SWE instance's verify: its status in the log (MISSING when absent) and which list it is on. */
export interface SlotTestResult {
  name: string;
  status: "PASSED" | "FAILED" | "SKIPPED" | "ERROR" | "XFAIL" | "MISSING";
  expected: "FAIL_TO_PASS" | "PASS_TO_PASS";
}

export interface SlotVerifyResult {
  reward: number | null;
  resolved: boolean;
  /** SWE instances: every FAIL_TO_PASS and PASS_TO_PASS test; other tasks: null. */
  tests: SlotTestResult[] | null;
  exitCode: number | null;
  timedOut: boolean;
  /** The last 16 KiB of the tests' output. */
  output: string;
  /** Why there is no reward (null when there is one). */
  error: string | null;
}

export interface SlotPoolTotals {
  sandboxes: number;
  slotsTotal: number;
  slotsBusy: number;
  waiting: number;
  quarantined: number;
}

const OUTPUT_TAIL = 16 * 1024;
const REPO_MS = 10 * 60_000;

/**
 * The slot registry behind `/v1/slots` (DESIGN.md "Slots"): one SlotPool per (credential, image),
 * the table of slots handed out and who owns each, task and repository lookup by name (never a
 * host path from the caller), and verify (a task's reward-file tests, or a SWE instance's
 * per-test FAIL_TO_PASS / PASS_TO_PASS grading). Expired slots are reclaimed by their pool;
 * `entry` then answers 410.
 */
export class SlotService {
  private readonly pools = new Map<string, SlotPool>();
  private readonly slots = new Map<string, SlotEntry>();
  private readonly images = new Map<string, Promise<string>>();
  private readonly prunes = new Map<string, Promise<string>>();
  private tasks: Map<string, TaskSpec> | null = null;
  private readonly cacheDir: string;
  private readonly repoCache: RepoCache;
  readonly maxFileBytes: number;

  constructor(private readonly options: SlotServiceOptions) {
    this.maxFileBytes = options.maxFileBytes ?? 64 * 1024 * 1024;
    if (!options.runtime.capabilities.files) {
      throw new SandboxError(`slots need a runtime whose sandboxes have their own filesystem (Docker); the ${options.runtime.name} runtime runs commands on this host`);
    }
    this.cacheDir = resolve(options.cacheDir ?? join(process.env.XDG_CACHE_HOME ?? join(homedir(), ".cache"), "proctor", "slots"));
    this.repoCache = new RepoCache(join(this.cacheDir, "repos"), { logger: options.logger });
  }

  /** Loads the slot tasks (once); a task that does not load is named in the error. */
  async start(): Promise<void> {
    if (!this.options.tasksDir) return;
    const loaded = await loadTasks([this.options.tasksDir], {
      ...(this.options.reposDir ? { reposDir: this.options.reposDir } : {}),
      ...(this.options.imageTemplate ? { imageTemplate: this.options.imageTemplate } : {}),
      cacheDir: join(this.cacheDir, "tasks"),
    });
    if (loaded.errors.length > 0) throw new EngineError(`--slots-tasks-dir ${this.options.tasksDir}: ${loaded.errors.map((e) => e.message).join("; ")}`);
    this.tasks = new Map(loaded.tasks.map((t) => [t.id, t]));
  }

  /**
   * One pool per (credential, image): slots in one sandbox share root and the kernel, so two
   * credentials' slots never share a sandbox. Only the anonymous pool (auth off) is kept warm.
   */
  private pool(image: string, owner: string | null): SlotPool {
    const key = JSON.stringify([owner, image]);
    let pool = this.pools.get(key);
    if (!pool) {
      pool = new SlotPool({
        runtime: this.options.runtime,
        image,
        slotsPerSandbox: this.options.slotsPerSandbox,
        minSandboxes: image === this.options.defaultImage && owner === null ? this.options.minSandboxes : 0,
        maxSandboxes: this.options.maxSandboxes,
        acquireTimeoutMs: this.options.acquireTimeoutMs,
        idleTimeoutMs: this.options.idleTimeoutMs,
        maxLifetimeMs: this.options.maxLifetimeMs,
        sandbox: { labels: { ...this.options.labels, "proctor.slots": "true" } },
        logger: this.options.logger,
      });
      this.pools.set(key, pool);
    }
    return pool;
  }

  /** Starts the default image's pool (its warm minimum). */
  warm(): void {
    this.pool(this.options.defaultImage, null);
  }

  /** The task's image, used, pulled or built once (a SWE dataset's default Python image is built). */
  private taskImage(task: TaskSpec): Promise<string> {
    let image = this.images.get(task.id);
    if (!image) {
      const spec = task.environment;
      image = this.options.runtime.resolveImage({
        image: spec.dockerImage ?? (spec.buildContext ? null : this.options.defaultImage),
        buildContext: spec.buildContext,
        ...(spec.buildContextExclude ? { contextExclude: spec.buildContextExclude } : {}),
        // The server's own task files (not an upload): built as the trial pipeline builds them.
        buildTimeoutMs: spec.buildTimeoutSec * 1000,
        onProgress: (line) => this.options.logger.debug(line, { taskId: task.id }),
      });
      this.images.set(task.id, image);
      image.catch(() => this.images.delete(task.id));
    }
    return image;
  }

  /**
   * A bare repository holding `commit` and nothing else (depth 1: no later commit, branch or tag),
   * made once per (repository, commit): the slot's sandbox gets this copy, so a holder cannot read
   * the future (a SWE instance's fix) from the history.
   */
  private pruned(bare: string, commit: string): Promise<string> {
    const key = `${bare}\0${commit}`;
    let made = this.prunes.get(key);
    if (!made) {
      made = (async () => {
        const dir = join(this.cacheDir, "pruned", `${createHash("sha256").update(key).digest("hex").slice(0, 24)}.git`);
        if (existsSync(join(dir, "HEAD"))) return dir;
        const staging = `${dir}.${process.pid}.tmp`;
        await rm(staging, { recursive: true, force: true });
        await mkdir(join(this.cacheDir, "pruned"), { recursive: true });
        const git = (args: string[]) => run("git", args, { timeout: REPO_MS, maxBuffer: 16 * 1024 * 1024, env: { ...process.env, GIT_TERMINAL_PROMPT: "0" } });
        await git(["init", "--quiet", "--bare", `--object-format=${commit.length === 64 ? "sha256" : "sha1"}`, "--end-of-options", staging]);
        await git(["--git-dir", staging, "-c", "uploadpack.allowAnySHA1InWant=true", "fetch", "--quiet", "--depth=1", "--no-tags", `file://${bare}`, "--end-of-options", commit]);
        await rm(join(staging, "FETCH_HEAD"), { force: true });
        await rename(staging, dir);
        return dir;
      })();
      this.prunes.set(key, made);
      made.catch(() => this.prunes.delete(key));
    }
    return made;
  }

  /** The repository a request names, checked out at its commit in the slot's workdir. */
  private async repoFor(request: SlotCreateRequest, task: TaskSpec | null): Promise<SlotRepo | undefined> {
    if (task?.workspace) {
      if (request.repo) throw badRequest(`field repo: task ${task.id} brings its own repository (${task.workspace.repo} at ${task.workspace.baseCommit}); give task or repo, not both`);
      const ws = task.workspace;
      let bare: string;
      try {
        bare = await this.repoCache.ensure(repoUrl(ws.repo, task.sourcePath), ws.baseCommit, { timeoutMs: REPO_MS });
      } catch (error) {
        throw badRequest(`task ${task.id}: its repository cannot be prepared: ${error instanceof Error ? error.message : String(error)}`);
      }
      return { path: await this.pruned(bare, ws.baseCommit), commit: ws.baseCommit };
    }
    if (!request.repo) return undefined;
    if (!this.options.reposDir) throw badRequest("field repo: this server has no repositories for slots (start it with --slots-repos-dir DIR)");
    const dir = resolve(this.options.reposDir);
    const name = request.repo.name.replace("/", "__");
    const path = [join(dir, `${name}.git`), join(dir, name)].find((p) => existsSync(p));
    if (!path) throw badRequest(`field repo.name: no repository "${request.repo.name}" on this server`);
    return { path, commit: request.repo.commit };
  }

  /** Acquires a slot for `owner` (waits up to the acquire timeout; 503 when the pool stays full). */
  async create(owner: string | null, request: SlotCreateRequest): Promise<SlotEntry> {
    let task: TaskSpec | null = null;
    if (request.task !== undefined) {
      if (!this.tasks) throw badRequest("field task: this server has no slot tasks (start it with --slots-tasks-dir DIR or a dataset file)");
      task = this.tasks.get(request.task) ?? null;
      if (!task) throw badRequest(`field task: no task "${request.task}" in the server's slot tasks; known: ${[...this.tasks.keys()].slice(0, 20).join(", ")}`);
    }
    if (task && request.image !== undefined) throw badRequest("give either field image or field task, not both");
    const repo = await this.repoFor(request, task);
    let image: string;
    try {
      image = request.image ?? (task ? await this.taskImage(task) : this.options.defaultImage);
    } catch (error) {
      throw badRequest(`task ${task?.id}: its image cannot be prepared: ${error instanceof Error ? error.message : String(error)}`);
    }
    const pool = this.pool(image, owner);
    let slot: Slot;
    try {
      slot = await pool.acquire({
        key: repo ? `${repo.path}@${repo.commit}` : undefined,
        repo,
        env: request.env,
        ttlMs: request.ttlSec === undefined ? undefined : request.ttlSec * 1000,
      });
    } catch (error) {
      throw this.translate(error);
    }
    const entry: SlotEntry = { slot, pool, owner, task };
    this.slots.set(slot.id, entry);
    return entry;
  }

  /** The slot `id` if `mayUse(owner)`: 404 unknown, 403 another credential's, 410 expired or lost. */
  entry(id: string, mayUse: (owner: string | null) => boolean): SlotEntry {
    const entry = this.slots.get(id);
    if (!entry) throw new SlotServiceError(404, "not_found", `no slot ${id}`);
    if (!mayUse(entry.owner)) throw new SlotServiceError(403, "forbidden", `slot ${id} belongs to another credential`);
    if (entry.slot.gone) {
      this.slots.delete(id);
      throw new SlotServiceError(410, "slot_gone", entry.slot.gone.message);
    }
    return entry;
  }

  async release(entry: SlotEntry, reset: boolean): Promise<void> {
    this.slots.delete(entry.slot.id);
    await entry.pool.release(entry.slot, { reset });
  }

  /** Maps pool and sandbox errors to SlotServiceErrors; a sandbox that died takes its slots with it. */
  translate(error: unknown, entry?: SlotEntry): Error {
    if (error instanceof SlotServiceError) return error;
    if (error instanceof SlotPoolExhaustedError) {
      return new SlotServiceError(503, "pool_exhausted", error.message, { cause: error, retryAfterSec: Math.max(1, Math.ceil(error.retryAfterMs / 1000)) });
    }
    if (error instanceof SlotPathError) return new SlotServiceError(400, "bad_request", `query parameter path: ${error.message}`, { cause: error });
    if (error instanceof SlotGoneError) return new SlotServiceError(410, "slot_gone", error.message, { cause: error });
    if (entry && (error instanceof SandboxStoppedError || error instanceof SandboxClosedError)) {
      entry.pool.sandboxLost(entry.slot, error);
      return new SlotServiceError(410, "slot_gone", `slot ${entry.slot.id} was lost: its sandbox stopped (${error.message})`, { cause: error });
    }
    return error instanceof Error ? error : new Error(String(error));
  }

  /**
   * Runs the slot's task's tests and returns the reward without ending the slot. A SWE instance's
   * test_patch is written into the workdir (it stays there) and every FAIL_TO_PASS / PASS_TO_PASS
   * test is reported; other tasks' tests write a reward file, as the trial verifier reads it.
   */
  async verify(entry: SlotEntry): Promise<SlotVerifyResult> {
    const task = entry.task;
    if (!task) throw badRequest(`slot ${entry.slot.id} was not created with a task; create it with {"task": "<id>"} to verify`);
    const timeoutMs = (task.verifier.timeoutSec ?? 600) * 1000;
    if (task.format === "swebench") {
      const outcome = await runSwebenchTests({ task, sandbox: entry.slot.sandbox, workdir: entry.slot.workdir, repoCache: this.repoCache, timeoutMs, signal: new AbortController().signal });
      if (!outcome.ok) return { reward: outcome.reward, resolved: false, tests: null, exitCode: null, timedOut: /timed out/.test(outcome.error.message), output: "", error: outcome.error.message };
      const { grading } = outcome;
      const tests = (["FAIL_TO_PASS", "PASS_TO_PASS"] as const).flatMap((expected) => {
        const group = expected === "FAIL_TO_PASS" ? grading.failToPass : grading.passToPass;
        return [...group.success, ...group.failure].map((name): SlotTestResult => ({ name, status: grading.tests[name] ?? "MISSING", expected }));
      });
      return { reward: grading.resolved ? 1 : 0, resolved: grading.resolved, tests, exitCode: null, timedOut: false, output: outcome.output.slice(-OUTPUT_TAIL), error: null };
    }
    if (task.verifier.mode !== "reward-file" || !task.verifier.testsDir) {
      throw badRequest(`task ${task.id}: verify supports SWE instances and tasks whose tests write a reward file; this one's verifier is "${task.verifier.mode}"`);
    }
    return verifyRewardTask(entry.slot, task, timeoutMs, OUTPUT_TAIL);
  }

  stats(): SlotPoolTotals {
    const all = [...this.pools.values()].map((p) => p.stats());
    const sum = (pick: (s: (typeof all)[number]) => number) => all.reduce((n, s) => n + pick(s), 0);
    return {
      sandboxes: sum((s) => s.sandboxes),
      slotsTotal: sum((s) => s.slotsTotal),
      slotsBusy: sum((s) => s.slotsBusy),
      waiting: sum((s) => s.waiting),
      quarantined: sum((s) => s.quarantined),
    };
  }

  async close(): Promise<void> {
    this.slots.clear();
    await Promise.all([...this.pools.values()].map((p) => p.close()));
  }
}
