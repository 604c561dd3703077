import { mkdir, stat } from "node:fs/promises";
import { existsSync } from "node:fs";
import { basename, dirname, join, resolve } from "node:path";
import { randomBytes } from "node:crypto";
import type { AgentSpec, Logger, RunSummary, TaskSpec } from "@proctor/schema";
import { readRunConfig, startRun } from "@proctor/engine";
import { loadTasks } from "@proctor/tasks";
import { UsageError, EXIT_INTERRUPTED } from "../errors";
import { DEFAULT_DOCKER_IMAGE, openRuntime, parseRuntimeChoice } from "../runtime";
import { createProgress } from "../progress";
import { renderSummary } from "../format";
import { prepareSources } from "../sources";

export interface RunCommandOptions {
  sources: string[];
  agent?: string;
  runtime: string;
  concurrency: number;
  attempts: number;
  include: string[];
  exclude: string[];
  tasksFile?: string;
  out: string;
  runId?: string;
  resume?: string;
  timeoutMultiplier: number;
  defaultImage?: string;
  /** --isolate-verifier (true) / --no-isolate-verifier (false); undefined: each task decides. */
  isolateVerifier?: boolean;
  json: boolean;
  logger: Logger;
  /** Where progress and the table go; stdout gets only summary.json with --json. */
  stdout?: NodeJS.WriteStream;
  stderr?: NodeJS.WriteStream;
  signal?: AbortSignal;
}

export function parseAgent(value: string | undefined, archiveAgentDir: string | null): AgentSpec {
  if (value === undefined) {
    if (archiveAgentDir) return { kind: "code", dir: archiveAgentDir };
    return { kind: "oracle" };
  }
  if (value === "oracle" || value === "nop") return { kind: value };
  if (value === "llm") throw new UsageError("--agent llm is not available yet; use oracle, nop or an agent directory");
  const dir = resolve(value);
  if (!existsSync(dir)) {
    throw new UsageError(`--agent ${value}: not oracle, nop or llm, and no such directory`);
  }
  return { kind: "code", dir };
}

function newRunId(): string {
  const now = new Date().toISOString().replace(/[-:]/g, "").replace("T", "-").slice(0, 15);
  return `${now}-${randomBytes(2).toString("hex")}`;
}

/** `proctor run`: load tasks, run them on the engine, show progress, print the table. Returns the exit code. */
export async function runCommand(options: RunCommandOptions): Promise<number> {
  const out = options.stdout ?? process.stdout;
  const err = options.stderr ?? process.stderr;
  if (!Number.isInteger(options.concurrency) || options.concurrency < 1) throw new UsageError(`--concurrency must be a whole number >= 1, got ${options.concurrency}`);
  if (!Number.isInteger(options.attempts) || options.attempts < 1) throw new UsageError(`--attempts must be a whole number >= 1, got ${options.attempts}`);
  if (!(options.timeoutMultiplier > 0)) throw new UsageError(`--timeout-multiplier must be a positive number, got ${options.timeoutMultiplier}`);

  let runId = options.runId ?? newRunId();
  let runsRoot = resolve(options.out);
  let sources = options.sources;
  let agentArg = options.agent;
  let runtimeArg = options.runtime;
  let attempts = options.attempts;
  let multiplier = options.timeoutMultiplier;
  let defaultImage = options.defaultImage;
  let isolateVerifier = options.isolateVerifier;

  if (options.resume) {
    const runDir = resolve(options.resume);
    const previous = await readRunConfig(runDir);
    runId = previous.runId;
    runsRoot = dirname(runDir);
    if (basename(runDir) !== runId) throw new UsageError(`--resume ${options.resume}: run.json names run ${runId}, but the directory is ${basename(runDir)}`);
    // With no sources given, a resume repeats the stored run exactly; given flags must match it.
    if (sources.length === 0) {
      sources = previous.sources;
      agentArg ??= previous.agent.kind === "code" ? previous.agent.dir : previous.agent.kind;
      runtimeArg = previous.runtime;
      attempts = previous.attempts;
      multiplier = previous.timeoutMultiplier;
      defaultImage ??= previous.defaultImage ?? undefined;
      isolateVerifier ??= previous.isolateVerifier;
    }
  } else if (existsSync(join(runsRoot, runId, "run.json"))) {
    throw new UsageError(`run ${runId} already exists in ${runsRoot}; pass --resume ${join(runsRoot, runId)} to continue it, or another --run-id`);
  }
  if (sources.length === 0) throw new UsageError("proctor run: give at least one task source (a task dir, a dir of tasks, or an archive)");

  const runDir = join(runsRoot, runId);
  await mkdir(runDir, { recursive: true });
  const prepared = await prepareSources(sources.map((s) => resolve(s)), join(runDir, "input"), options.logger);
  const loaded = await loadTasks(prepared.taskSources, { include: options.include, exclude: options.exclude, tasksFile: options.tasksFile });
  if (loaded.errors.length > 0) {
    throw new UsageError(`${loaded.errors.length} task(s) failed to load:\n${loaded.errors.map((e) => `  ${e.message}`).join("\n")}`);
  }
  const tasks: TaskSpec[] = loaded.tasks;
  if (tasks.length === 0) throw new UsageError(`no tasks matched in ${sources.join(", ")}${options.include.length || options.exclude.length || options.tasksFile ? " after --include/--exclude/--tasks-file" : ""}`);

  const agent = parseAgent(agentArg, prepared.agentDir);
  const runtime = await openRuntime(parseRuntimeChoice(runtimeArg), options.logger);
  const image = defaultImage ?? (runtime.name === "docker" ? DEFAULT_DOCKER_IMAGE : null);
  // A run killed with -9 leaves its sandboxes behind; remove those of dead owners before starting.
  const reaped = await runtime.reap();
  if (reaped > 0) err.write(`removed ${reaped} sandbox(es) left behind by runs that died\n`);

  const controller = new AbortController();
  const onSignal = (name: string) => () => {
    if (controller.signal.aborted) {
      err.write(`${name} again: exiting now; sandboxes may be left behind (remove them with proctor gc)\n`);
      process.exit(EXIT_INTERRUPTED);
    }
    err.write(`${name}: stopping; no new trials start, running sandboxes are removed, finished results are kept (Ctrl-C again to force)\n`);
    controller.abort(new Error(`interrupted by ${name}`));
  };
  const sigint = onSignal("SIGINT");
  const sigterm = onSignal("SIGTERM");
  process.on("SIGINT", sigint);
  process.on("SIGTERM", sigterm);
  options.signal?.addEventListener("abort", () => controller.abort(options.signal?.reason), { once: true });

  const progress = createProgress(err);
  let summary: RunSummary;
  try {
    const handle = startRun({
      runId,
      runDir,
      tasks,
      agent,
      runtime,
      concurrency: options.concurrency,
      attempts,
      timeoutMultiplier: multiplier,
      defaultImage: image,
      ...(isolateVerifier !== undefined ? { isolateVerifier } : {}),
      resume: Boolean(options.resume),
      sources: sources.map((s) => resolve(s)),
      signal: controller.signal,
      logger: options.logger,
    });
    const unsubscribe = handle.bus.subscribe((event) => progress.onEvent(event));
    try {
      summary = await handle.done;
    } finally {
      unsubscribe();
      progress.stop();
    }
  } finally {
    process.off("SIGINT", sigint);
    process.off("SIGTERM", sigterm);
  }

  const table = renderSummary(summary);
  if (options.json) {
    err.write(`${table}\n`);
    out.write(`${JSON.stringify(summary, null, 2)}\n`);
  } else {
    out.write(`\n${table}\nrun directory: ${runDir}\n`);
  }
  if (summary.status === "interrupted") {
    err.write(`interrupted: resume with  proctor run --resume ${runDir}\n`);
    return EXIT_INTERRUPTED;
  }
  return 0;
}

export async function isDirectory(path: string): Promise<boolean> {
  return (await stat(path).catch(() => null))?.isDirectory() ?? false;
}
