import { open } from "node:fs/promises";
import { basename, join, resolve } from "node:path";
import { parse as parseToml, TomlError } from "smol-toml";
import {
  DEFAULT_AGENT_TIMEOUT_SEC,
  DEFAULT_BUILD_TIMEOUT_SEC,
  DEFAULT_VERIFIER_TIMEOUT_SEC,
  type EnvironmentSpec,
  type TaskSpec,
} from "@proctor/schema";
import { checkTaskId, finish, readText, type LoadedTask, type LoaderOptions } from "./common";
import { describe, displayPath, extraFields, fail, isTable, kinds, nearestName, parseSizeMb, Section, stringOrList, type Report } from "./fields";
import { isDir, isFile } from "./tree";

/** The verifier command of a native task; the runtime sets PROCTOR_TESTS_DIR (/tests in Docker). */
export const NATIVE_TEST_COMMAND = 'bash "$PROCTOR_TESTS_DIR/test.sh"';
/** The oracle's command for a native task's solution/solve.sh. */
export const NATIVE_SOLUTION_COMMAND = 'bash "$PROCTOR_SOLUTION_DIR/solve.sh"';

const NETWORK_MODES: Record<string, boolean> = { bridge: true, host: true, none: false };

/**
 * What task.toml may hold: per table, the keys this loader reads and the keys Harbor's task.toml
 * defines that Proctor keeps in `extra` without acting on them (Terminal-Bench 2 tasks carry
 * them). Anything else is refused: a misspelt key or table would silently leave its default.
 * `null`: free-form ([metadata] is the author's, [task] Harbor's registry entry, [[steps]] Harbor's).
 */
const TOML_TABLES: Record<string, { reads: readonly string[]; harbor: readonly string[] } | null> = {
  metadata: null,
  agent: { reads: ["timeout_sec"], harbor: ["user", "network_mode", "allowed_hosts"] },
  verifier: {
    reads: ["timeout_sec", "env", "isolate_processes", "allow_changes", "outputs", "grading"],
    harbor: ["user", "network_mode", "allowed_hosts", "environment_mode", "environment", "continuous", "collect"],
  },
  environment: {
    reads: ["docker_image", "build_timeout_sec", "cpus", "memory_mb", "storage_mb", "gpus", "allow_internet", "network_mode", "workdir", "env", "memory", "storage"],
    harbor: ["os", "gpu_types", "tpu", "allowed_hosts", "mcp_servers", "skills_dir", "healthcheck"],
  },
  solution: { reads: [], harbor: ["env"] },
  task: null,
  steps: null,
};
/** Top-level keys that are not tables: all Harbor's, kept in `extra`. */
const TOML_TOP_KEYS = ["version", "schema_version", "source", "artifacts", "multi_step_reward_strategy"];

/**
 * Load a native (Harbor / Terminal-Bench 2) task directory: optional task.toml, instruction.md,
 * environment/ (Dockerfile + context), tests/test.sh, optional solution/solve.sh. Every problem
 * is collected; the task is null when there is any.
 */
export async function loadNativeTask(dir: string, _options: LoaderOptions = {}): Promise<LoadedTask> {
  const root = resolve(dir);
  const id = basename(root);
  const dirReport: Report = { file: displayPath(root), taskId: id, errors: [] };
  checkTaskId(id, root, dirReport);

  const tomlPath = join(root, "task.toml");
  const tomlReport: Report = { file: displayPath(tomlPath), taskId: id, errors: dirReport.errors };
  let raw: Record<string, unknown> = {};
  if (await isFile(tomlPath)) {
    const text = await readText(tomlPath, tomlReport);
    if (text !== null) {
      try {
        raw = parseToml(text) as Record<string, unknown>;
      } catch (error) {
        const where = error instanceof TomlError ? ` (line ${error.line}, column ${error.column})` : "";
        fail(tomlReport, `is not valid TOML${where}: ${(error as Error).message.split("\n")[0]}`);
      }
    }
  }

  refuseUnknownKeys(tomlReport, raw);
  const sections = {
    metadata: table(tomlReport, raw, "metadata"),
    agent: table(tomlReport, raw, "agent"),
    verifier: table(tomlReport, raw, "verifier"),
    environment: table(tomlReport, raw, "environment"),
  };
  const { metadata, agent, verifier } = sections;

  const category = metadata.get("category", kinds.string) ?? null;
  const difficulty = metadata.get("difficulty", kinds.string) ?? null;
  const tags = metadata.get("tags", kinds.stringList) ?? [];
  const agentTimeout = agent.get("timeout_sec", kinds.positiveNumber) ?? DEFAULT_AGENT_TIMEOUT_SEC;
  const verifierTimeout = verifier.get("timeout_sec", kinds.positiveNumber) ?? DEFAULT_VERIFIER_TIMEOUT_SEC;
  const verifierEnv = verifier.get("env", kinds.env) ?? {};
  const isolateProcesses = verifier.get("isolate_processes", kinds.boolean) ?? false;
  const allowChanges = stringOrList(verifier, "allow_changes") ?? [];
  for (const glob of allowChanges) {
    if (!glob.startsWith("/")) fail(dirReport, `[verifier].allow_changes: "${glob}" must be an absolute sandbox path or glob, such as "/etc/profile.d/app.sh"`, "task.toml");
  }
  const outputs = stringOrList(verifier, "outputs");
  for (const path of outputs ?? []) {
    if (!path.startsWith("/") || path.split("/").includes("..")) fail(dirReport, `[verifier].outputs: "${path}" must be an absolute sandbox path without "..", such as "/app/out.csv" or "/etc/nginx"`, "task.toml");
  }
  const gradingMode = verifier.get("grading", kinds.gradingMode);
  const environment = await readEnvironment(sections.environment, root);

  const instructionPath = join(root, "instruction.md");
  let instruction = "";
  if (await isFile(instructionPath)) {
    const instructionReport: Report = { file: displayPath(instructionPath), taskId: id, errors: dirReport.errors };
    instruction = (await readText(instructionPath, instructionReport)) ?? "";
    if (instruction.trim() === "") fail(instructionReport, "is empty: write what the agent is asked to do");
  } else {
    fail(dirReport, "instruction.md is missing: a native task needs instruction.md (what the agent is told)", "instruction.md");
  }

  const testsDir = join(root, "tests");
  if (!(await isFile(join(testsDir, "test.sh")))) {
    fail(dirReport, "tests/test.sh is missing: a native task is verified by tests/test.sh writing /logs/verifier/reward.txt", "tests/test.sh");
  } else {
    await refuseCrlf(root, "tests/test.sh", dirReport);
  }
  const solutionDir = join(root, "solution");
  const solution = (await isFile(join(solutionDir, "solve.sh"))) ? { dir: solutionDir, command: NATIVE_SOLUTION_COMMAND } : null;
  if (solution) await refuseCrlf(root, "solution/solve.sh", dirReport);

  const extra = extraFields(raw, sections);

  const spec: TaskSpec = {
    id,
    format: "native",
    sourcePath: root,
    instruction,
    category,
    difficulty,
    tags,
    environment,
    agent: { timeoutSec: agentTimeout },
    verifier: { mode: "reward-file", testsDir, command: NATIVE_TEST_COMMAND, timeoutSec: verifierTimeout, env: verifierEnv, isolateProcesses, allowChanges, ...(outputs ? { outputs } : {}), ...(gradingMode ? { grading: gradingMode } : {}) },
    solution,
    workspace: null,
    extra,
  };
  return finish(spec, dirReport);
}

/** Records every key and table of task.toml that is neither read nor Harbor's, with the nearest known name. */
function refuseUnknownKeys(report: Report, raw: Record<string, unknown>): void {
  const tables = Object.keys(TOML_TABLES);
  for (const [key, value] of Object.entries(raw)) {
    if (Object.hasOwn(TOML_TABLES, key) || TOML_TOP_KEYS.includes(key)) continue;
    if (isTable(value)) {
      const near = nearestName(key, tables);
      fail(report, `unknown section [${key}] (${near ? `did you mean [${near}]?` : "the sections are [metadata], [agent], [verifier], [environment] and [solution]"})`, `[${key}]`);
    } else {
      const near = nearestName(key, TOML_TOP_KEYS);
      fail(report, `unknown top-level key "${key}" (${near ? `did you mean "${near}"?` : "settings go in [agent], [verifier] or [environment]"})`, key);
    }
  }
  for (const [name, known] of Object.entries(TOML_TABLES)) {
    const value = raw[name];
    if (known === null || !isTable(value)) continue;
    for (const key of Object.keys(value)) {
      if (known.reads.includes(key) || known.harbor.includes(key)) continue;
      const near = nearestName(key, [...known.reads, ...known.harbor]);
      const hint = near ? `did you mean "${near}"?` : known.reads.length > 0 ? `it takes ${known.reads.join(", ")}` : `it takes ${known.harbor.join(", ")}`;
      fail(report, `[${name}] has no key "${key}" (${hint})`, `[${name}].${key}`);
    }
  }
}

/** Bash reads a CRLF script's "\r" as part of each command: a syntax error or "$'\r': command not found", far from the cause. */
async function refuseCrlf(root: string, rel: string, report: Report): Promise<void> {
  let head: Buffer;
  try {
    const file = await open(join(root, rel));
    try {
      const buffer = Buffer.alloc(64 * 1024);
      const { bytesRead } = await file.read(buffer, 0, buffer.length, 0);
      head = buffer.subarray(0, bytesRead);
    } finally {
      await file.close();
    }
  } catch {
    return; // unreadable: running it says why
  }
  if (head.includes("\r\n")) {
    fail(report, `CRLF line endings in ${rel}: bash reads each line's "\\r" as part of the command (a syntax error, or "$'\\r': command not found"); convert it to LF line endings (dos2unix ${rel}, or sed -i 's/\\r$//' ${rel})`, rel);
  }
}

function table(report: Report, raw: Record<string, unknown>, name: string): Section {
  const value = raw[name];
  if (value !== undefined && !isTable(value)) {
    fail(report, `[${name}] must be a table, got ${describe(value)}`, `[${name}]`);
  }
  return new Section(report, value, (key) => `[${name}].${key}`);
}

export async function readEnvironment(env: Section, root: string): Promise<EnvironmentSpec> {
  const contextDir = join(root, "environment");
  const hasDockerfile = (await isDir(contextDir)) && (await isFile(join(contextDir, "Dockerfile")));
  return {
    dockerImage: env.get("docker_image", kinds.string) ?? null,
    buildContext: hasDockerfile ? contextDir : null,
    buildTimeoutSec: env.get("build_timeout_sec", kinds.positiveNumber) ?? DEFAULT_BUILD_TIMEOUT_SEC,
    cpus: env.get("cpus", kinds.positiveNumber) ?? null,
    memoryMb: sizeMb(env, "memory_mb", "memory"),
    storageMb: sizeMb(env, "storage_mb", "storage"),
    gpus: env.get("gpus", kinds.nonNegativeInt) ?? 0,
    allowInternet: allowInternet(env),
    workdir: env.get("workdir", kinds.absolutePath) ?? null,
    env: env.get("env", kinds.env) ?? {},
  };
}

/** `memory_mb = 2048`, or the legacy `memory = "2G"`; giving both is a mistake worth reporting. */
export function sizeMb(env: Section, mbKey: string, legacyKey: string): number | null {
  const mb = env.get(mbKey, kinds.positiveInt);
  if (!env.has(legacyKey)) return mb ?? null;
  const legacy = env.take(legacyKey);
  if (env.has(mbKey)) {
    env.fail(legacyKey, `and ${mbKey} are both set: keep only ${mbKey}`);
    return mb ?? null;
  }
  const parsed = typeof legacy === "string" ? parseSizeMb(legacy) : null;
  if (parsed === null) {
    env.fail(legacyKey, `must be a size such as "2G" or "512M" (or use ${mbKey} = 2048), got ${describe(legacy)}`);
  }
  return parsed;
}

/** `allow_internet = true`, or Docker's `network_mode` ("bridge"/"host" allow, "none" denies). */
function allowInternet(env: Section): boolean {
  const allow = env.get("allow_internet", kinds.boolean);
  if (!env.has("network_mode")) return allow ?? false;
  const mode = env.take("network_mode");
  const fromMode = typeof mode === "string" ? NETWORK_MODES[mode] : undefined;
  if (fromMode === undefined) {
    env.fail("network_mode", `must be "bridge", "none" or "host", got ${describe(mode)}`);
    return allow ?? false;
  }
  if (allow !== undefined && allow !== fromMode) {
    env.fail("network_mode", `is ${describe(mode)} but [environment].allow_internet is ${allow}: keep only allow_internet`);
  }
  return allow ?? fromMode;
}
