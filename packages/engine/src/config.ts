import { createHash } from "node:crypto";
import { readdir, readFile } from "node:fs/promises";
import { join, relative } from "node:path";
import type { AgentSpec, RunConfig, TaskSpec } from "@proctor/schema";
import { hashTask } from "@proctor/tasks";
import stringify from "safe-stable-stringify";

const HASH_CONCURRENCY = 16;

/** run.json: the resolved config plus the hash a resume compares. */
export type StoredRunConfig = RunConfig & { configHash: string };

/** sha256 over a directory's files (relative paths and contents, in sorted order). */
export async function hashDirectory(dir: string): Promise<string> {
  const hash = createHash("sha256");
  const walk = async (current: string): Promise<void> => {
    const entries = (await readdir(current, { withFileTypes: true })).sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    for (const entry of entries) {
      const path = join(current, entry.name);
      if (entry.isDirectory()) await walk(path);
      else if (entry.isFile()) {
        hash.update(relative(dir, path)).update("\0");
        hash.update(await readFile(path)).update("\0");
      }
    }
  };
  await walk(dir);
  return hash.digest("hex");
}

export async function buildRunConfig(input: {
  runId: string;
  tasks: readonly TaskSpec[];
  sources: readonly string[];
  agent: AgentSpec;
  runtime: string;
  attempts: number;
  concurrency: number;
  timeoutMultiplier: number;
  defaultImage: string | null;
  isolateVerifier: boolean | null;
  grading?: "fresh" | "shared" | null;
  limits: Record<string, unknown> | null;
  dataset?: RunConfig["dataset"] | null;
  container?: RunConfig["container"] | null;
  selection?: RunConfig["selection"] | null;
  origins?: RunConfig["origins"] | null;
  /** The agent directory's hash as recorded elsewhere (a regrade records its run's); default: hashed now. */
  agentHash?: string | null;
}): Promise<StoredRunConfig> {
  // Only the parts given: an unfiltered run's run.json carries no selection.
  const given = input.selection ?? {};
  const selection: RunConfig["selection"] = {
    ...(given.include?.length ? { include: [...given.include] } : {}),
    ...(given.exclude?.length ? { exclude: [...given.exclude] } : {}),
    ...(given.tasksFile !== undefined ? { tasksFile: given.tasksFile } : {}),
  };
  // Bounded: hashing 10,000 task dirs at once peaks at hundreds of MB for no speed gain.
  const tasks: { id: string; hash: string }[] = [];
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(HASH_CONCURRENCY, input.tasks.length) }, async () => {
      while (next < input.tasks.length) {
        const t = input.tasks[next++] as TaskSpec;
        tasks.push({ id: t.id, hash: await hashTask(t) });
      }
    }),
  );
  tasks.sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
  const config: RunConfig = {
    runId: input.runId,
    tasks,
    sources: [...input.sources],
    agent: input.agent,
    agentHash: input.agentHash !== undefined ? input.agentHash : input.agent.kind === "code" || input.agent.kind === "image" ? await hashDirectory(input.agent.dir) : null,
    runtime: input.runtime,
    attempts: input.attempts,
    concurrency: input.concurrency,
    timeoutMultiplier: input.timeoutMultiplier,
    defaultImage: input.defaultImage,
    // Left out when not set, so runs made before these options existed keep their hash.
    ...(input.isolateVerifier !== null ? { isolateVerifier: input.isolateVerifier } : {}),
    ...(input.grading ? { grading: input.grading } : {}),
    ...(input.limits !== null ? { limits: input.limits } : {}),
    ...(input.dataset && Object.keys(input.dataset).length > 0 ? { dataset: input.dataset } : {}),
    ...(input.container && Object.keys(input.container).length > 0 ? { container: input.container } : {}),
    ...(Object.keys(selection).length > 0 ? { selection } : {}),
    ...(input.origins && input.origins.length > 0 ? { origins: [...input.origins].sort((a, b) => (a.taskId < b.taskId ? -1 : a.taskId > b.taskId ? 1 : 0)) } : {}),
  };
  return { ...config, configHash: configHash(config) };
}

/**
 * sha256 of the canonical JSON of the config, leaving out what may change on resume (runId,
 * concurrency, pricing, budgets) and the task selection: the tasks it picked are hashed, so a selection that picks
 * other tasks is a change, and runs stored before the selection was recorded keep their hash.
 * The tasks' origins are left out too: the task hashes pin their content already.
 */
export function configHash(config: RunConfig): string {
  // Pins and regradeOf record what ran, they do not choose it; prices and budgets are outside it
  // too: a resume may raise a budget, and prices are data.
  const { runId: _runId, concurrency: _concurrency, selection: _selection, origins: _origins, pins: _pins, regradeOf: _regradeOf, pricing: _pricing, budget: _budget, ...rest } = config;
  return createHash("sha256").update(stringify(rest) ?? "").digest("hex");
}

/** Human-readable differences between a stored config and a new one (empty when they hash alike). */
export function describeConfigChanges(before: RunConfig, after: RunConfig): string[] {
  const changes: string[] = [];
  const old = new Map(before.tasks.map((t) => [t.id, t.hash]));
  const now = new Map(after.tasks.map((t) => [t.id, t.hash]));
  const added = [...now.keys()].filter((id) => !old.has(id));
  const removed = [...old.keys()].filter((id) => !now.has(id));
  const edited = [...now.keys()].filter((id) => old.has(id) && old.get(id) !== now.get(id));
  const list = (ids: string[]) => (ids.length > 5 ? `${ids.slice(0, 5).join(", ")} and ${ids.length - 5} more` : ids.join(", "));
  if (added.length) changes.push(`tasks added: ${list(added)}`);
  if (removed.length) changes.push(`tasks removed: ${list(removed)}`);
  if (edited.length) changes.push(`task files changed: ${list(edited)}`);
  // Why tasks were added or removed, when the selection differs (it is not hashed by itself).
  if ((added.length || removed.length) && stringify(before.selection ?? {}) !== stringify(after.selection ?? {})) {
    changes.push(`task selection: ${describeSelection(before.selection)} -> ${describeSelection(after.selection)}`);
  }
  const fields = ["sources", "agent", "agentHash", "runtime", "attempts", "timeoutMultiplier", "defaultImage", "dataset", "container"] as const;
  for (const field of fields) {
    const a = stringify(before[field]);
    const b = stringify(after[field]);
    if (a !== b) changes.push(field === "agentHash" ? "the agent directory's files changed" : `${field}: ${a} -> ${b}`);
  }
  return changes;
}

/** A selection as the flags that give it (`-i a -x b --tasks-file F`), or "every task". */
function describeSelection(selection: RunConfig["selection"]): string {
  const flags = [
    ...(selection?.include ?? []).map((g) => `-i ${g}`),
    ...(selection?.exclude ?? []).map((g) => `-x ${g}`),
    ...(selection?.tasksFile !== undefined ? [`--tasks-file ${selection.tasksFile}`] : []),
  ];
  return flags.length > 0 ? flags.join(" ") : "every task";
}
