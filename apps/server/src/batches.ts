import { readdir, stat } from "node:fs/promises";
import { relative, join } from "node:path";
import type { Readable } from "node:stream";
import { ArchiveError, LimitExceededError, extractArchive } from "@proctor/archive";
import type { LimitName } from "@proctor/archive";
import { AgentConfigError, readImageAgent, resolveEntrypoint } from "@proctor/agents";
import { BudgetFields, type SubmitResponse } from "@proctor/client";
import { RunQueue, type PreparedRun, type QueuedBatch, type RunBudget, type RunLimits, type RunOptions, type RunHandle } from "@proctor/engine";
import type { SandboxRuntime } from "@proctor/sandbox";
import type { Logger, ModelProxySpec, TaskSpec } from "@proctor/schema";
import { isCompetitionDir, loadCompetitionTask, loadTermExecutorArchive } from "@proctor/tasks";
import type { TaskLoadError } from "@proctor/tasks";
import { buildContextBytes } from "@proctor/sandbox-docker";
import { AGENT_IMAGE_DIR, DEFAULT_AGENT_IMAGE_LIMITS, agentImageRuntime, buildAgentImage, dockerRuntimeOf } from "./agent-image";
import type { AgentImageLimits } from "./agent-image";
import { BadRequestError, ForbiddenError, InvalidArchiveError, NotFoundError, PayloadTooLargeError } from "./errors";
import type { ServerMetrics } from "./metrics";
import type { BatchReceipts } from "./receipt";
import { UPLOAD_DIR, batchesRoot, stagingDir } from "./store";
import type { StagedBody } from "./upload";
import { consumeArchivePart } from "./upload";

/** The server's model proxy: upstream, the key's env var NAME, the models a batch may name (the first is the default). */
export interface ServerModelProxy {
  baseUrl: string;
  apiKeyEnv: string;
  models: string[];
  budgetTokens?: number;
  budgetRequests?: number;
  llmConcurrency?: number;
  /**
   * Installed CLI agents (Claude Code, Codex, an agent.toml) a batch may name with `?agent=`, by
   * that name; such a batch uploads tasks/ only and its agent gets the model through this proxy
   * with the operator's key.
   */
  agents?: Record<string, { name: string; version?: string; dir?: string }>;
}

export interface BatchesOptions {
  dataDir: string;
  runtime: SandboxRuntime;
  defaultImage: string | null;
  maxActiveBatches: number;
  maxQueuedBatches: number;
  /** Upper bound of `?concurrent_tasks`; also the default when the query omits it. */
  maxConcurrentTasks: number;
  maxUploadBytes: number;
  retentionDays: number | null;
  /** Accept `repo:` paths on the server's own disk in workspace.yaml (tests, trusted users only). */
  allowLocalRepos: boolean;
  /** Overrides every task's verifier isolation when set (`--isolate-verifier` / `--no-isolate-verifier`). */
  isolateVerifier?: boolean;
  grading?: "fresh" | "shared";
  limits: RunLimits;
  /** Limits of an uploaded agent_image/'s build; default DEFAULT_AGENT_IMAGE_LIMITS. */
  agentImage?: Partial<AgentImageLimits>;
  receipts?: BatchReceipts | null;
  modelProxy?: ServerModelProxy | null;
  /** How a batch's trials execute (RunQueue's seam; `--queue` sends them to workers); default in this process. */
  startRun?: (options: RunOptions) => RunHandle;
  logger: Logger;
  metrics: ServerMetrics;
}

const SIZE_LIMITS: ReadonlySet<LimitName> = new Set(["maxCompressedBytes", "maxTotalBytes", "maxFileBytes"]);

/** An upload's tasks and its agent: code (agent_code/) or an image to build (agent_image/). */
export interface BatchUpload {
  tasks: TaskSpec[];
  /** `installed`: the batch named one of the server's installed agents (`?agent=`) and uploaded tasks only. */
  agent: { kind: "code" | "image"; dir: string } | { kind: "installed" };
}

/**
 * What the server adds to the engine's RunQueue: a batch is an uploaded term-executor archive
 * (tasks/ + agent_code/, or competition tasks/ + agent_image/) extracted into `<batch>/upload/`
 * and run with its agent under the server's limits, model proxy and receipts.
 */
export class Batches {
  readonly queue: RunQueue;
  readonly startedAtMs = Date.now();

  constructor(private readonly options: BatchesOptions) {
    const metrics = options.metrics;
    this.queue = new RunQueue({
      root: batchesRoot(options.dataDir),
      maxActive: options.maxActiveBatches,
      maxQueued: options.maxQueuedBatches,
      retentionDays: options.retentionDays,
      prepare: (batch) => this.prepare(batch),
      ...(options.startRun ? { startRun: options.startRun } : {}),
      observer: {
        event: (batch, event) => {
          if (event.type !== "trial_finished") return;
          // A line per trial (the queue logs each batch's acceptance and end): what an operator tails.
          const r = event.data;
          const why = r.error ? `: ${r.error.kind} error: ${r.error.message.split("\n")[0]?.slice(0, 200)}` : "";
          options.logger.info(`batch ${batch.id}: trial ${r.trialId} ${r.status}${r.reward !== null ? ` (reward ${r.reward})` : ""} in ${(r.durationMs / 1000).toFixed(1)} s${why}`);
          metrics.trialsFinished.inc({ outcome: event.data.status });
          metrics.trialDuration.observe({ outcome: event.data.status }, event.data.durationMs / 1000);
          for (const phase of event.data.phases) metrics.phaseDuration.observe({ phase: phase.phase }, phase.durationMs / 1000);
        },
        // Signed before the status flips, so whoever sees the batch finished finds its receipt.
        finishing: async (batch, status) => options.receipts?.write(batch, status),
        finished: (_batch, status) => metrics.batchesFinished.inc({ outcome: status }),
      },
      logger: options.logger,
    });
  }

  /** The batch, or the 404 also answered for a batch the caller may not see. */
  get(batchId: string): QueuedBatch {
    const batch = this.queue.find(batchId);
    if (!batch) throw this.notFound(batchId);
    return batch;
  }

  notFound(batchId: string): NotFoundError {
    return new NotFoundError(`no batch with id ${JSON.stringify(batchId)}; list batches with GET /batches`);
  }

  /**
   * Accept an upload whose signature already verified: extract the archive (with the archive
   * package's limits), load its tasks and queue it. On any error nothing is left on disk.
   */
  async submit(input: { staged: StagedBody; contentType: string; concurrentTasks: number | undefined; submittedBy: string | null; model?: string | undefined; agent?: string | undefined; budget?: Partial<Record<keyof BudgetFields, unknown>> }): Promise<SubmitResponse> {
    const model = this.pickModel(input.model);
    const named = this.pickAgent(input.agent);
    const concurrentTasks = input.concurrentTasks ?? this.options.maxConcurrentTasks;
    const batch = await this.queue.submit({
      concurrentTasks,
      submittedBy: input.submittedBy,
      fill: async (dir) => {
        const uploadDir = join(dir, UPLOAD_DIR);
        // Budgets come as query parameters or as form fields beside the archive (a query parameter wins).
        const fields: Record<string, string> = {};
        const archiveName = await consumeArchivePart(
          input.staged,
          input.contentType,
          async (stream: Readable, filename: string) => {
            await this.extract(stream, uploadDir);
            return filename || null;
          },
          (name, value) => {
            if (Object.hasOwn(BudgetFields.shape, name)) fields[name] = value;
          },
        );
        const budget = batchBudget({ ...fields, ...Object.fromEntries(Object.entries(input.budget ?? {}).filter(([, v]) => v !== undefined)) });
        const loaded = await this.load(uploadDir, named !== null);
        const image = loaded.agent.kind === "image";
        if (loaded.agent.kind === "image") {
          await this.checkImageBatch(loaded.agent.dir);
          // The model proxy serves code agents; an image agent would silently not get the model it asked for.
          if (input.model !== undefined) throw new BadRequestError(`model: an ${AGENT_IMAGE_DIR}/ batch gets no model from this server's proxy; leave out ?model=`);
        }
        return {
          taskIds: loaded.tasks.map((t) => t.id),
          extra: { archive: { name: archiveName, bytes: input.staged.bytes, sha256: input.staged.sha256 }, ...(model !== null && !image ? { model } : {}), ...(named !== null ? { agent: named } : {}), ...(budget ? { budget } : {}) },
        };
      },
    });
    this.options.metrics.batchesSubmitted.inc();
    return { batch_id: batch.id, total_tasks: batch.tasks.size, concurrent_tasks: concurrentTasks, ws_url: `/ws?batch_id=${batch.id}` };
  }

  /**
   * Refuse, at submit, an agent_image/ batch this server cannot build: workers (`--queue`) would
   * not find an image built here, the local runtime builds nothing, and the build context has a cap.
   */
  private async checkImageBatch(imageDir: string): Promise<void> {
    if (this.options.startRun) {
      throw new BadRequestError(
        `${AGENT_IMAGE_DIR}/: this server sends trials to workers (proctor serve --queue), which cannot use an image built on this server; send agent_code/ instead, or use a server without --queue`,
      );
    }
    if (dockerRuntimeOf(this.options.runtime) === null) {
      throw new BadRequestError(
        `${AGENT_IMAGE_DIR}/: this server runs on the ${this.options.runtime.name} runtime, which cannot build or run agent images; send agent_code/ instead, or use a server started with --runtime docker`,
      );
    }
    const limit = this.imageLimits().maxBytes;
    const bytes = await buildContextBytes(imageDir);
    if (bytes > limit) {
      throw new PayloadTooLargeError(
        `${AGENT_IMAGE_DIR}/ holds ${bytes} bytes, over this server's build context limit of ${limit / (1024 * 1024)} MB (--agent-image-max-mb ${limit / (1024 * 1024)}); leave data out of the image dir or ask the operator to raise the limit`,
      );
    }
  }

  private imageLimits(): AgentImageLimits {
    return { ...DEFAULT_AGENT_IMAGE_LIMITS, ...this.options.agentImage };
  }

  /**
   * An agent_image/ batch builds its image when it starts (a build can take minutes: the submit
   * does not wait). Meanwhile its tasks show phase `agent_image_build`; a build that breaks a
   * limit or fails fails the batch with the reason as its `error`.
   */
  private async buildImage(batch: QueuedBatch, imageDir: string): Promise<SandboxRuntime> {
    const docker = dockerRuntimeOf(this.options.runtime);
    if (docker === null) throw new BadRequestError(`${AGENT_IMAGE_DIR}/: this server's ${this.options.runtime.name} runtime cannot build agent images`);
    for (const task of batch.tasks.values()) if (task.status === "pending") task.phase = AGENT_IMAGE_BUILD_PHASE;
    try {
      const context = readImageAgent(imageDir).image.buildContext;
      const tag = await buildAgentImage(docker, imageDir, this.imageLimits(), { ...(batch.abort ? { signal: batch.abort.signal } : {}), logger: this.options.logger });
      return agentImageRuntime(docker, context, tag);
    } finally {
      for (const task of batch.tasks.values()) if (task.phase === AGENT_IMAGE_BUILD_PHASE) task.phase = null;
    }
  }

  /** The engine run of a batch: its upload's tasks and agent (code, or the image built now), the server's limits. */
  private async prepare(batch: QueuedBatch): Promise<PreparedRun> {
    const uploadDir = join(batch.dir, UPLOAD_DIR);
    const recordedAgent = typeof batch.record.agent === "string" ? batch.record.agent : null;
    const loaded = await this.load(uploadDir, recordedAgent !== null);
    const common = {
      tasks: loaded.tasks,
      defaultImage: this.options.defaultImage,
      ...(this.options.isolateVerifier !== undefined ? { isolateVerifier: this.options.isolateVerifier } : {}),
      ...(this.options.grading !== undefined ? { grading: this.options.grading } : {}),
      limits: this.options.limits,
      sources: [uploadDir],
      ...(batch.record.budget ? { budget: batch.record.budget as RunBudget } : {}),
    };
    if (loaded.agent.kind === "image") {
      return { ...common, agent: { kind: "image", dir: loaded.agent.dir }, runtime: await this.buildImage(batch, loaded.agent.dir) };
    }
    if (loaded.agent.kind === "installed") {
      const installed = recordedAgent !== null ? this.options.modelProxy?.agents?.[recordedAgent] : undefined;
      const { modelProxy } = this.modelProxySpec(batch.record.model);
      // The server was restarted without that agent (or its model proxy): the batch cannot run as submitted.
      if (!installed || !modelProxy) throw new BadRequestError(`agent: this server no longer offers ${JSON.stringify(recordedAgent)} (proctor serve --agents ...)`);
      return { ...common, agent: { kind: "installed", ...installed, modelProxy }, runtime: this.options.runtime };
    }
    return { ...common, agent: { kind: "code", dir: loaded.agent.dir, ...this.modelProxySpec(batch.record.model) }, runtime: this.options.runtime };
  }

  private async extract(stream: Readable, destDir: string): Promise<void> {
    try {
      await extractArchive(stream, destDir, { maxCompressedBytes: this.options.maxUploadBytes }, { tempDir: stagingDir(this.options.dataDir), logger: this.options.logger });
    } catch (error) {
      if (error instanceof LimitExceededError && SIZE_LIMITS.has(error.limit)) throw new PayloadTooLargeError(error.message, { cause: error });
      if (error instanceof ArchiveError) throw new InvalidArchiveError(error.message, { cause: error });
      throw error;
    }
  }

  /** The model a new batch gets: `?model=` when the server allows it, else the server's default; null without a model proxy. */
  private pickModel(asked: string | undefined): string | null {
    const proxy = this.options.modelProxy;
    if (asked === undefined) return proxy?.models[0] ?? null;
    if (!proxy) throw new BadRequestError(`model: this server has no model proxy, so a batch cannot name a model; leave out ?model=`);
    if (!proxy.models.includes(asked)) throw new ForbiddenError(`model: ${JSON.stringify(asked.slice(0, 200))} is not allowed on this server; allowed: ${proxy.models.join(", ")}`);
    return asked;
  }

  private modelProxySpec(recorded: unknown): { modelProxy?: ModelProxySpec } {
    const proxy = this.options.modelProxy;
    const model = typeof recorded === "string" ? recorded : proxy?.models[0];
    if (!proxy || !model) return {};
    const { models: _models, agents: _agents, ...rest } = proxy;
    return { modelProxy: { ...rest, model } };
  }

  /** The installed agent a new batch names with `?agent=`, or null when it names none. */
  private pickAgent(asked: string | undefined): string | null {
    if (asked === undefined) return null;
    const offered = Object.keys(this.options.modelProxy?.agents ?? {});
    if (offered.length === 0) throw new BadRequestError(`agent: this server offers no installed agents, so a batch cannot name one; send agent_code/ and leave out ?agent=`);
    if (!offered.includes(asked)) throw new ForbiddenError(`agent: ${JSON.stringify(asked.slice(0, 128))} is not offered on this server; offered: ${offered.join(", ")}`);
    return asked;
  }

  private load(uploadDir: string, agentNamed = false): Promise<BatchUpload> {
    return loadBatchUpload(uploadDir, { allowLocalRepos: this.options.allowLocalRepos, logger: this.options.logger, agentNamed });
  }
}

/** Tasks' phase while their batch's agent image is being built (GET /batch/:id/tasks, the WS snapshot). */
const AGENT_IMAGE_BUILD_PHASE = "agent_image_build";

const NEITHER_AGENT = `the archive holds neither agent_code/ nor ${AGENT_IMAGE_DIR}/ beside tasks/; add the agent's code in agent_code/ (examples/submission.tar.gz shows the layout), or an agent image (Dockerfile + agent.toml) in ${AGENT_IMAGE_DIR}/`;

/**
 * Load an extracted upload: tasks/ with agent_code/ (term-executor tasks, the code agent), or
 * tasks/ with agent_image/ (competition tasks, an image agent), at the root or one directory
 * down. Throws InvalidArchiveError (400) naming files inside the archive, never server paths.
 */
export async function loadBatchUpload(uploadDir: string, options: { allowLocalRepos: boolean; logger: Logger; agentNamed?: boolean }): Promise<BatchUpload> {
  // Name files inside the archive, not where the server keeps it.
  const inArchive = (message: string) => message.split(`${uploadDir}/`).join("").split(relative(process.cwd(), uploadDir) + "/").join("");
  const refuseInvalid = (errors: readonly TaskLoadError[], more = "") => {
    if (errors.length === 0) return;
    const shown = errors.slice(0, 5).map((e) => inArchive(e.message)).join("; ");
    throw new InvalidArchiveError(`the archive holds ${errors.length} invalid task(s): ${shown}; fix them and upload again${more}`);
  };
  const noTasks = () => new InvalidArchiveError("the archive holds no tasks: put each task in tasks/<id>/ (at the root or one directory down)");
  const imageRoot = await agentImageRoot(uploadDir);
  if (options.agentNamed) {
    // The batch runs an agent the server installed: the upload brings tasks, not an agent.
    if (imageRoot !== null) throw new InvalidArchiveError(`the batch names ?agent=, which runs that agent: leave ${AGENT_IMAGE_DIR}/ out of the archive`);
    const loaded = await loadTermExecutorArchive(uploadDir, options);
    refuseInvalid(loaded.errors);
    if (loaded.tasks.length === 0) throw noTasks();
    if (loaded.agentDir !== null) throw new InvalidArchiveError("the batch names ?agent=, which runs that agent: leave agent_code/ out of the archive");
    refuseTaskBuilds(loaded.tasks);
    return { tasks: loaded.tasks, agent: { kind: "installed" } };
  }
  if (imageRoot === null) {
    const loaded = await loadTermExecutorArchive(uploadDir, options);
    // Without an agent, say so too: the tasks' problems may only follow from it (competition tasks read as term-executor ones).
    refuseInvalid(loaded.errors, loaded.agentDir === null ? `; also, ${NEITHER_AGENT}` : "");
    if (loaded.tasks.length === 0) throw noTasks();
    if (loaded.agentDir === null) throw new InvalidArchiveError(NEITHER_AGENT);
    refuseTaskBuilds(loaded.tasks);
    try {
      resolveEntrypoint(loaded.agentDir);
    } catch (error) {
      if (!(error instanceof AgentConfigError)) throw error;
      throw new InvalidArchiveError(`agent_code/: ${inArchive(error.message)}`, { cause: error });
    }
    return { tasks: loaded.tasks, agent: { kind: "code", dir: loaded.agentDir } };
  }
  if (await isDir(join(imageRoot, "agent_code"))) {
    throw new InvalidArchiveError(`the archive holds both agent_code/ and ${AGENT_IMAGE_DIR}/; a batch runs one agent: keep agent_code/ (the agent's code) or ${AGENT_IMAGE_DIR}/ (a Dockerfile + agent.toml), not both`);
  }
  const imageDir = join(imageRoot, AGENT_IMAGE_DIR);
  try {
    readImageAgent(imageDir);
  } catch (error) {
    if (!(error instanceof AgentConfigError)) throw error;
    // readImageAgent names the file (agent_image/agent.toml) once the server's path is cut off.
    throw new InvalidArchiveError(inArchive(error.message.split(`${imageDir}/`).join(`${AGENT_IMAGE_DIR}/`).split(imageDir).join(`${AGENT_IMAGE_DIR}/`)), { cause: error });
  }
  const tasksDir = join(imageRoot, "tasks");
  const names = (await readdir(tasksDir, { withFileTypes: true }).catch(() => []))
    .filter((e) => e.isDirectory() && !e.name.startsWith(".") && e.name !== "__MACOSX")
    .map((e) => e.name)
    .sort();
  const tasks: TaskSpec[] = [];
  const errors: TaskLoadError[] = [];
  for (const name of names) {
    const dir = join(tasksDir, name);
    if (!(await isCompetitionDir(dir))) {
      throw new InvalidArchiveError(
        `tasks/${name}: an ${AGENT_IMAGE_DIR}/ batch runs competition tasks only (task.toml with [grading], grade/, data/public/); send other tasks with agent_code/`,
      );
    }
    const loaded = await loadCompetitionTask(dir, { logger: options.logger });
    errors.push(...loaded.errors);
    if (!loaded.task) continue;
    // The server builds only the agent image (under its limits); a task may name an image, not bring a Dockerfile.
    if (loaded.task.environment.buildContext !== null) {
      throw new InvalidArchiveError(`tasks/${name}/environment: this server builds no task images; remove environment/Dockerfile (the agent image is the competition's sandbox) or name an image in task.toml`);
    }
    tasks.push(loaded.task);
  }
  refuseInvalid(errors);
  if (tasks.length === 0) throw noTasks();
  return { tasks, agent: { kind: "image", dir: imageDir } };
}

/**
 * The server builds no image an upload brings but an agent_image/: a task must name its image
 * ([environment] docker_image) or use the server's default, not ship a Dockerfile to build.
 */
function refuseTaskBuilds(tasks: readonly TaskSpec[]): void {
  const building = tasks.filter((t) => t.environment.buildContext !== null && t.environment.dockerImage === null).map((t) => t.id);
  if (building.length === 0) return;
  throw new InvalidArchiveError(
    `tasks/${building[0]}/environment/Dockerfile${building.length > 1 ? ` (and ${building.length - 1} more)` : ""}: this server builds no task images; name a prebuilt image in task.toml ([environment] docker_image = "..."), leave environment/ out to use the server's default image, or run the task locally with proctor run`,
  );
}

/** The directory holding agent_image/ (the upload's root or the one directory below it), or null. */
async function agentImageRoot(uploadDir: string): Promise<string | null> {
  if (await isDir(join(uploadDir, AGENT_IMAGE_DIR))) return uploadDir;
  const children = (await readdir(uploadDir, { withFileTypes: true }).catch(() => [])).filter((e) => e.isDirectory() && !e.name.startsWith(".") && e.name !== "__MACOSX");
  for (const child of children) if (await isDir(join(uploadDir, child.name, AGENT_IMAGE_DIR))) return join(uploadDir, child.name);
  return null;
}

async function isDir(path: string): Promise<boolean> {
  return stat(path).then((s) => s.isDirectory(), () => false);
}

/** A batch's budgets from `max_cost`, `max_tokens`, `trial_max_cost`, `on_budget` (query or form); null when none is given. A bad value is a 400 naming it. */
function batchBudget(raw: Record<string, unknown>): RunBudget | null {
  const parsed = BudgetFields.safeParse(raw);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    throw new BadRequestError(`${issue?.path.join(".") || "budget"}: ${issue?.message ?? "invalid"} (max_cost and trial_max_cost take USD > 0, max_tokens a whole number > 0, on_budget finish or stop)`);
  }
  const b = parsed.data;
  if (b.max_cost === undefined && b.max_tokens === undefined && b.trial_max_cost === undefined) {
    if (b.on_budget !== undefined) throw new BadRequestError("on_budget goes with a batch budget: max_cost or max_tokens");
    return null;
  }
  return {
    ...(b.max_cost !== undefined ? { maxCostUsd: b.max_cost } : {}),
    ...(b.max_tokens !== undefined ? { maxTokens: b.max_tokens } : {}),
    ...(b.trial_max_cost !== undefined ? { trialMaxCostUsd: b.trial_max_cost } : {}),
    ...(b.on_budget !== undefined ? { onBudget: b.on_budget } : {}),
  };
}
