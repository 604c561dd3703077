import { join, resolve } from "node:path";
import { COMMIT_ID, DEFAULT_AGENT_TIMEOUT_SEC, DEFAULT_BUILD_TIMEOUT_SEC, type CheckSpec, type TaskSpec } from "@proctor/schema";
import { checkTaskId, finish, loggerOf, parseYaml, readText, scalarSource, type LoadedTask, type LoaderOptions } from "./common";
import { describe, displayPath, fail, isTable, kinds, Section, stringOrList, type Report } from "./fields";
import { defaultCacheDir, isDir, isFile, listTree, prepareDir } from "./tree";

/** term-executor's own per-test-script timeout (TEST_TIMEOUT_SECS). */
export const TERM_EXECUTOR_CHECK_TIMEOUT_SEC = 300;
export const TERM_EXECUTOR_INSTALL_TIMEOUT_SEC = 600;
export const TERM_EXECUTOR_SOLUTION_COMMAND = 'git apply --whitespace=nowarn "$PROCTOR_SOLUTION_DIR/solution.patch"';

/** workspace.yaml keys Proctor interprets; the rest (install_config, difficulty_score, ...) go to `extra`. */
const INTERPRETED = [
  "repo", "base_commit", "version", "language", "install", "image", "docker_image", "fail_to_pass", "pass_to_pass",
  "agent_timeout_sec", "test_timeout_sec", "verifier_timeout_sec", "install_timeout_sec", "allow_internet",
  "difficulty", "category", "tags", "prompt", "patch", "env",
];

export interface TermExecutorOptions extends LoaderOptions {
  /**
   * Accept `repo` values that are local paths or file:// URLs (default true). A server loading
   * uploaded archives should pass false, or an upload could have a host repository cloned
   * into the sandbox.
   */
  allowLocalRepos?: boolean;
}

const REMOTE_REPO = /^(https?:\/\/|ssh:\/\/|git@)/;
const GITHUB_SHORTHAND = /^[A-Za-z0-9_.-]+\/[A-Za-z0-9_.-]+$/;

/** Load one `tasks/<id>/` directory of a term-executor archive. */
export async function loadTermExecutorTask(dir: string, options: TermExecutorOptions = {}): Promise<LoadedTask> {
  const root = resolve(dir);
  const id = root.split(/[\\/]/).pop() ?? "";
  const logger = loggerOf(options);
  const dirReport: Report = { file: displayPath(root), taskId: id, errors: [] };
  checkTaskId(id, root, dirReport);

  const yamlPath = join(root, "workspace.yaml");
  const yamlReport: Report = { file: displayPath(yamlPath), taskId: id, errors: dirReport.errors };
  let raw: unknown = {};
  let yamlText = "";
  let doc: ReturnType<typeof parseYaml> = null;
  if (await isFile(yamlPath)) {
    yamlText = (await readText(yamlPath, yamlReport)) ?? "";
    doc = parseYaml(yamlText, yamlReport);
    raw = doc?.toJS() ?? {};
    if (doc !== null && !isTable(raw)) fail(yamlReport, `must be a mapping of keys to values, got ${describe(raw)}`);
  } else {
    fail(dirReport, "workspace.yaml is missing: a term-executor task needs workspace.yaml (repo, base_commit, install)", "workspace.yaml");
  }
  const yaml = new Section(yamlReport, raw, (key) => key);
  // Fields that are strings even when they look like numbers (a sha such as 1234e56, version 3.10).
  const text = (key: string): string | undefined => {
    if (doc === null || !yaml.has(key)) return undefined;
    const source = scalarSource(doc, yamlText, key);
    if (source !== undefined && source !== "") {
      yaml.take(key);
      return source;
    }
    return yaml.get(key, kinds.string);
  };

  let repo = text("repo");
  if (repo === undefined && doc !== null && !yaml.has("repo")) {
    yaml.fail("repo", "is missing: give the git repository to check out (a URL or owner/name on GitHub)");
  }
  if (repo !== undefined) {
    if (GITHUB_SHORTHAND.test(repo)) repo = `https://github.com/${repo}`;
    else if (!REMOTE_REPO.test(repo) && options.allowLocalRepos === false) {
      yaml.fail("repo", `must be an http(s), ssh or git@ URL here, got ${describe(repo)}: local repositories are refused unless the server runs with --allow-local-repos`);
    }
  }
  const baseCommit = text("base_commit");
  if (baseCommit === undefined && doc !== null && !yaml.has("base_commit")) {
    yaml.fail("base_commit", "is missing: give the commit to check out so every trial starts from the same code");
  } else if (baseCommit !== undefined && !COMMIT_ID.test(baseCommit)) {
    yaml.fail("base_commit", `must be a full commit id (40 or 64 hex digits), got ${describe(baseCommit.slice(0, 80))}: branches, tags and abbreviations can move or be ambiguous`);
  }
  const version = text("version") ?? null;
  const language = yaml.get("language", kinds.string) ?? null;
  const installConfig = yaml.raw.install_config;
  let install = stringOrList(yaml, "install");
  if (install === undefined && !yaml.has("install") && isTable(installConfig) && typeof installConfig.install === "string") {
    install = [installConfig.install];
  }
  const failToPass = stringOrList(yaml, "fail_to_pass") ?? [];
  const passToPass = stringOrList(yaml, "pass_to_pass") ?? [];
  const checkTimeout = yaml.get("test_timeout_sec", kinds.positiveNumber) ?? TERM_EXECUTOR_CHECK_TIMEOUT_SEC;

  let instruction = "";
  const promptPath = join(root, "prompt.md");
  if (await isFile(promptPath)) {
    const promptReport: Report = { file: displayPath(promptPath), taskId: id, errors: dirReport.errors };
    instruction = (await readText(promptPath, promptReport)) ?? "";
    if (instruction.trim() === "") fail(promptReport, "is empty: write what the agent is asked to do");
    yaml.take("prompt");
  } else if (yaml.has("prompt")) {
    instruction = yaml.get("prompt", kinds.string) ?? "";
  } else {
    fail(dirReport, "prompt.md is missing: a term-executor task needs prompt.md (what the agent is told)", "prompt.md");
  }

  // Checks: tests/**/*.sh; else checks.txt; else fail_to_pass + pass_to_pass (term-executor's order).
  const testsPath = join(root, "tests");
  const testsDir = (await isDir(testsPath)) ? testsPath : null;
  const checks: CheckSpec[] = [];
  if (testsDir !== null) {
    for (const entry of await listTree(testsDir)) {
      // Written to <repo>/<rel> and run as `bash <repo>/<rel>` from the repo root, as term-executor does.
      if (entry.rel.endsWith(".sh")) checks.push({ name: entry.rel, command: `bash "$PROCTOR_WORKDIR"/${shellQuote(entry.rel)}`, timeoutSec: checkTimeout });
    }
  }
  const checksTxt = join(root, "checks.txt");
  const hasChecksTxt = await isFile(checksTxt);
  if (checks.length > 0) {
    if (hasChecksTxt) logger.warn("checks.txt ignored: tests/*.sh scripts take precedence", { taskId: id, file: displayPath(checksTxt) });
  } else if (hasChecksTxt) {
    const checksReport: Report = { file: displayPath(checksTxt), taskId: id, errors: dirReport.errors };
    const lines = ((await readText(checksTxt, checksReport)) ?? "").split(/\r?\n/);
    lines.forEach((line, index) => {
      const command = line.trim();
      if (command !== "" && !command.startsWith("#")) checks.push({ name: `check_${index}.sh`, command: asScript(command), timeoutSec: checkTimeout });
    });
  }
  if (checks.length > 0) {
    if (failToPass.length + passToPass.length > 0) {
      logger.warn("fail_to_pass/pass_to_pass ignored: tests/*.sh or checks.txt take precedence", { taskId: id });
    }
  } else {
    failToPass.forEach((command, i) => checks.push({ name: `fail_to_pass_${i}.sh`, command: asScript(command), timeoutSec: checkTimeout }));
    passToPass.forEach((command, i) => checks.push({ name: `pass_to_pass_${failToPass.length + i}.sh`, command: asScript(command), timeoutSec: checkTimeout }));
  }
  const emptyCheck = checks.find((check) => check.command.replace(SCRIPT_PREFIX, "").trim() === "");
  if (emptyCheck) fail(yamlReport, `${emptyCheck.name.replace(/_\d+\.sh$/, "")} has an empty command`);
  if (checks.length === 0) {
    fail(dirReport, "has no checks: add tests/*.sh scripts, a checks.txt, or fail_to_pass/pass_to_pass in workspace.yaml (a task without checks cannot pass)");
  }
  const verifierTimeout =
    yaml.get("verifier_timeout_sec", kinds.positiveNumber) ?? Math.max(1, checks.reduce((sum, check) => sum + check.timeoutSec, 0));

  const dockerImage = yaml.get("docker_image", kinds.string) ?? yaml.get("image", kinds.string) ?? null;
  const agentTimeout = yaml.get("agent_timeout_sec", kinds.positiveNumber) ?? DEFAULT_AGENT_TIMEOUT_SEC;
  const installTimeout = yaml.get("install_timeout_sec", kinds.positiveNumber) ?? TERM_EXECUTOR_INSTALL_TIMEOUT_SEC;
  const allowInternet = yaml.get("allow_internet", kinds.boolean) ?? false;
  const env = yaml.get("env", kinds.env) ?? {};
  const difficulty = text("difficulty") ?? null;
  const category = yaml.get("category", kinds.string) ?? null;
  const tags = yaml.get("tags", kinds.stringList) ?? [];
  const patch = yaml.get("patch", kinds.string);
  for (const key of INTERPRETED) yaml.take(key);

  let solution: TaskSpec["solution"] = null;
  if (patch !== undefined && dirReport.errors.length === 0) {
    const patchText = patch.endsWith("\n") ? patch : `${patch}\n`;
    const solutionDir = await prepareDir(options.cacheDir ?? defaultCacheDir(), `te-solution-${id}`, [
      { rel: "solution.patch", content: patchText, executable: false },
    ]);
    solution = { dir: solutionDir, command: TERM_EXECUTOR_SOLUTION_COMMAND };
  }

  const spec: TaskSpec = {
    id,
    format: "term-executor",
    sourcePath: root,
    instruction,
    category,
    difficulty,
    tags,
    environment: {
      dockerImage,
      buildContext: null,
      buildTimeoutSec: DEFAULT_BUILD_TIMEOUT_SEC,
      cpus: null,
      memoryMb: null,
      storageMb: null,
      gpus: 0,
      allowInternet,
      workdir: null,
      env,
    },
    agent: { timeoutSec: agentTimeout },
    // Checks are plain commands: nothing the agent started may keep running into them.
    verifier: { mode: "checks", testsDir, checks, timeoutSec: verifierTimeout, env: {}, isolateProcesses: true, allowChanges: [] },
    solution,
    workspace: {
      repo: repo ?? "",
      baseCommit: baseCommit ?? "",
      version,
      language,
      install: install ?? [],
      installTimeoutSec: installTimeout,
    },
    extra: yaml.rest(),
  };
  return finish(spec, dirReport);
}

/**
 * term-executor turns each checks.txt line and fail_to_pass/pass_to_pass command into a script
 * `set -e` + the command, run by bash from the repo root: the same shell text, run the same way.
 */
const SCRIPT_PREFIX = "set -e\n";
function asScript(command: string): string {
  return `${SCRIPT_PREFIX}${command}`;
}

/** A word the shell reads back unchanged. */
export function shellQuote(word: string): string {
  return /^[A-Za-z0-9_./:=@%+-]+$/.test(word) ? word : `'${word.replace(/'/g, `'\\''`)}'`;
}
