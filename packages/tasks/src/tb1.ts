import { readdir, readFile } from "node:fs/promises";
import { basename, join, relative, resolve } from "node:path";
import { DEFAULT_BUILD_TIMEOUT_SEC, type EnvironmentSpec, type TaskSpec } from "@proctor/schema";
import { checkTaskId, finish, parseYaml, readText, type LoadedTask, type LoaderOptions } from "./common";
import { unreferenced } from "./dockerfile-sources";
import { UnsupportedTaskError } from "./errors";
import { describe, displayPath, fail, isTable, kinds, Section, type Report } from "./fields";
import { defaultCacheDir, isDir, isFile, listTree, prepareDir, type AnyEntry } from "./tree";

/** Terminal-Bench 1's own defaults (terminal_bench/handlers/trial_handler.py). */
export const TB1_DEFAULT_AGENT_TIMEOUT_SEC = 360;
export const TB1_DEFAULT_TEST_TIMEOUT_SEC = 60;

/**
 * The verifier command of a TB1 task. TB1 scores a trial by run-tests.sh exiting 0, with the
 * tests at $TEST_DIR; this runs it the same way and turns the exit code into reward.txt.
 * run-tests.sh sits beside the tests in the prepared tests dir uploaded to $PROCTOR_TESTS_DIR.
 */
export const TB1_TEST_COMMAND = [
  'export TEST_DIR="${PROCTOR_TESTS_DIR:-/tests}"',
  'mkdir -p "${PROCTOR_LOGS_DIR:-/logs}/verifier"',
  'if bash "$TEST_DIR/run-tests.sh"; then echo 1 > "${PROCTOR_LOGS_DIR:-/logs}/verifier/reward.txt"; ' +
    'else echo 0 > "${PROCTOR_LOGS_DIR:-/logs}/verifier/reward.txt"; fi',
].join("\n");
export const TB1_SOLUTION_COMMAND = 'bash "$PROCTOR_SOLUTION_DIR/solution.sh"';

/** task.yaml keys Proctor interprets; everything else is kept in `extra`. */
const INTERPRETED = ["instruction", "descriptions", "category", "difficulty", "tags", "max_agent_timeout_sec", "max_test_timeout_sec"];

/**
 * Load a Terminal-Bench 1 task: task.yaml, run-tests.sh, tests/, solution.sh, and a Dockerfile
 * or docker-compose.yaml at the root. tests/ + run-tests.sh are copied into one prepared
 * directory (under `cacheDir`) that becomes the verifier's testsDir.
 */
export async function loadTb1Task(dir: string, options: LoaderOptions = {}): Promise<LoadedTask> {
  const root = resolve(dir);
  const id = basename(root);
  const dirReport: Report = { file: displayPath(root), taskId: id, errors: [] };
  checkTaskId(id, root, dirReport);
  const cacheDir = options.cacheDir ?? defaultCacheDir();

  const yamlPath = join(root, "task.yaml");
  const yamlReport: Report = { file: displayPath(yamlPath), taskId: id, errors: dirReport.errors };
  let text: string | null = null;
  if (await isFile(yamlPath)) text = await readText(yamlPath, yamlReport);
  else fail(dirReport, "task.yaml is missing: a Terminal-Bench 1 task needs task.yaml (instruction, timeouts)", "task.yaml");
  const doc = text === null ? null : parseYaml(text, yamlReport);
  const raw: unknown = doc?.toJS() ?? {};
  if (doc !== null && !isTable(raw)) fail(yamlReport, `must be a mapping of keys to values, got ${describe(raw)}`);
  const yaml = new Section(yamlReport, raw, (key) => key);

  const instruction = doc === null ? "" : readInstruction(yaml);
  const category = yaml.get("category", kinds.string) ?? null;
  const difficulty = yaml.get("difficulty", kinds.string) ?? null;
  const tags = yaml.get("tags", kinds.stringList) ?? [];
  const agentTimeout = yaml.get("max_agent_timeout_sec", kinds.positiveNumber) ?? TB1_DEFAULT_AGENT_TIMEOUT_SEC;
  const testTimeout = yaml.get("max_test_timeout_sec", kinds.positiveNumber) ?? TB1_DEFAULT_TEST_TIMEOUT_SEC;
  for (const key of INTERPRETED) yaml.take(key);

  const environment = await readEnvironment(root, dirReport);
  if (environment.buildContext === root) {
    const exclude = await taskFilesOutOfBuild(root);
    if (exclude.length > 0) environment.buildContextExclude = exclude;
  }

  const runTests = join(root, "run-tests.sh");
  let testsDir: string | null = null;
  if (!(await isFile(runTests))) {
    fail(dirReport, "run-tests.sh is missing: a Terminal-Bench 1 task is verified by run-tests.sh exiting 0", "run-tests.sh");
  } else if (dirReport.errors.length === 0) {
    const entries: AnyEntry[] = [];
    if (await isDir(join(root, "tests"))) {
      entries.push(...(await listTree(join(root, "tests"))).filter((entry) => entry.rel !== "run-tests.sh"));
    }
    entries.push({ rel: "run-tests.sh", abs: runTests, kind: "file", executable: true });
    testsDir = await prepareDir(cacheDir, `tb1-tests-${id}`, entries);
  }

  let solution: TaskSpec["solution"] = null;
  const solutionSh = join(root, "solution.sh");
  if (await isFile(solutionSh)) {
    if (dirReport.errors.length === 0) {
      const dir = await prepareDir(cacheDir, `tb1-solution-${id}`, [{ rel: "solution.sh", abs: solutionSh, kind: "file", executable: true }]);
      solution = { dir, command: TB1_SOLUTION_COMMAND };
    }
  } else if (await isFile(join(root, "solution.yaml"))) {
    dirReport.errors.push(
      new UnsupportedTaskError(
        displayPath(join(root, "solution.yaml")),
        "solution.yaml (a list of terminal keystrokes) is not supported; convert it to a solution.sh script to load this task",
        { field: "solution.yaml", taskId: id },
      ),
    );
  }

  const spec: TaskSpec = {
    id,
    format: "tb1",
    sourcePath: root,
    instruction,
    category,
    difficulty,
    tags,
    environment,
    agent: { timeoutSec: agentTimeout },
    verifier: { mode: "reward-file", testsDir: testsDir ?? join(root, "tests"), command: TB1_TEST_COMMAND, timeoutSec: testTimeout, env: {}, isolateProcesses: false, allowChanges: [] },
    solution,
    workspace: null,
    extra: yaml.rest(),
  };
  return finish(spec, dirReport);
}

/** `instruction`, else the `descriptions` entry with key "base", else the first description. */
function readInstruction(yaml: Section): string {
  if (yaml.has("instruction")) return yaml.get("instruction", kinds.string) ?? "";
  const descriptions = yaml.take("descriptions");
  if (descriptions === undefined) {
    yaml.fail("instruction", "is missing: give instruction (or descriptions[0].description) with what the agent is told");
    return "";
  }
  if (!Array.isArray(descriptions) || descriptions.length === 0) {
    yaml.fail("descriptions", `must be a list of {key, description} entries, got ${describe(descriptions)}`);
    return "";
  }
  const index = Math.max(0, descriptions.findIndex((entry) => isTable(entry) && entry.key === "base"));
  const entry: unknown = descriptions[index];
  const text = isTable(entry) ? entry.description : undefined;
  if (typeof text !== "string" || text.trim() === "") {
    yaml.fail(`descriptions[${index}].description`, `must be a non-empty string, got ${describe(text)}`);
    return "";
  }
  return text;
}

const COMPOSE_FILES = ["docker-compose.yaml", "docker-compose.yml"];

/** Files of a TB1 task that sit in its build context (the task root) but are the harness's, not the image's. */
const TASK_FILES = ["tests", "run-tests.sh", "solution.sh", "solution.yaml", "task.yaml"];

/**
 * The task files at the root that the Dockerfile cannot read (no COPY/ADD source reaches them),
 * so they are left out of the build: changing a test or the solution does not rebuild the image.
 * A Dockerfile that copies the whole context (`COPY . /app`) keeps them all.
 */
async function taskFilesOutOfBuild(root: string): Promise<string[]> {
  let dockerfile: string;
  try {
    dockerfile = await readFile(join(root, "Dockerfile"), "utf8");
  } catch {
    return [];
  }
  const present = (await readdir(root)).filter((name) => TASK_FILES.includes(name));
  return unreferenced(dockerfile, present);
}

/**
 * A Dockerfile at the root is built with the root as context. A docker-compose file may name
 * the main service's image or build context; more than one service (a sidecar database, ...)
 * is reported as unsupported rather than run without it.
 */
async function readEnvironment(root: string, report: Report): Promise<EnvironmentSpec> {
  const env: EnvironmentSpec = {
    dockerImage: null,
    buildContext: (await isFile(join(root, "Dockerfile"))) ? root : null,
    buildTimeoutSec: DEFAULT_BUILD_TIMEOUT_SEC,
    cpus: null,
    memoryMb: null,
    storageMb: null,
    gpus: 0,
    // TB1 ran every task on Docker's default bridge network, and many run-tests.sh install
    // their test tools from the internet; without it they could not pass.
    allowInternet: true,
    workdir: null,
    env: {},
  };
  let composePath: string | null = null;
  for (const name of COMPOSE_FILES) {
    if (await isFile(join(root, name))) {
      composePath = join(root, name);
      break;
    }
  }
  if (composePath === null) return env;

  const composeReport: Report = { file: displayPath(composePath), taskId: report.taskId, errors: [] };
  const text = await readText(composePath, composeReport);
  const doc = text === null ? null : parseYaml(text, composeReport);
  const compose: unknown = doc?.toJS();
  const services = isTable(compose) && isTable(compose.services) ? compose.services : null;
  if (doc !== null && services === null) fail(composeReport, "must have a services: mapping");
  if (services !== null) {
    const names = Object.keys(services);
    const name = names[0];
    if (name === undefined || names.length > 1) {
      composeReport.errors.push(
        new UnsupportedTaskError(
          composeReport.file,
          `declares ${names.length} services (${names.join(", ")}); only single-container tasks are supported`,
          { field: "services", taskId: report.taskId },
        ),
      );
    } else {
      const service = services[name];
      const image = isTable(service) ? service.image : undefined;
      // TB1 composes set image to ${T_BENCH_...} placeholders filled in by its harness: not an image name.
      if (typeof image === "string" && !image.includes("${")) env.dockerImage = image;
      const build = isTable(service) ? service.build : undefined;
      if (build !== undefined) {
        const context = typeof build === "string" ? build : isTable(build) ? (build.context ?? ".") : undefined;
        const dockerfile = isTable(build) ? (build.dockerfile ?? "Dockerfile") : "Dockerfile";
        if (typeof context !== "string" || typeof dockerfile !== "string") {
          fail(composeReport, `services.${name}.build must be a path or {context, dockerfile}, got ${describe(build)}`, `services.${name}.build`);
        } else {
          const contextDir = resolve(root, context);
          if (relative(root, contextDir).startsWith("..")) {
            fail(composeReport, `services.${name}.build.context must stay inside the task directory, got ${describe(context)}`);
          } else if (dockerfile !== "Dockerfile") {
            composeReport.errors.push(
              new UnsupportedTaskError(
                composeReport.file,
                `services.${name}.build.dockerfile is ${describe(dockerfile)}; only a file named Dockerfile in the build context is supported`,
                { field: `services.${name}.build.dockerfile`, taskId: report.taskId },
              ),
            );
          } else if (!(await isFile(join(contextDir, "Dockerfile")))) {
            fail(composeReport, `services.${name}.build.context ${describe(context)} has no Dockerfile`);
          } else {
            env.buildContext = contextDir;
          }
        }
      }
    }
  }
  report.errors.push(...composeReport.errors);
  return env;
}
