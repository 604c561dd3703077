import { existsSync } from "node:fs";
import { readFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import { parse as parseYaml } from "yaml";
import { z } from "zod";
import { COMMIT_ID, DEFAULT_AGENT_TIMEOUT_SEC, DEFAULT_BUILD_TIMEOUT_SEC, DEFAULT_VERIFIER_TIMEOUT_SEC, TASK_ID_PATTERN, TaskSpec } from "@proctor/schema";
import { type LoaderOptions } from "./common";
import { TaskLoadError } from "./errors";
import { describe, displayPath } from "./fields";
import { deriveTestSpec } from "./swebench-specs";
import { defaultCacheDir, prepareDir } from "./tree";

/** Options of the SWE-bench / SWE-smith dataset loader. */
export interface SwebenchOptions extends LoaderOptions {
  /** Directory of bare mirrors named `<owner>__<name>.git`; absent: repos are fetched from GitHub. */
  reposDir?: string;
  /** Image for rows without `image_name`: `{repo}`, `{version}`, `{instance_id}` are filled in. */
  imageTemplate?: string;
  /**
   * A YAML/JSON file of per-repo, per-version setup (`--env-setup`): `image_setup` commands baked
   * into an image derived once per (repo, version) and cached by content hash, `install` commands
   * run in /testbed before the agent.
   */
  envSetup?: string;
}

/** One (repo, version) entry of an --env-setup file. */
interface EnvSetupEntry {
  /** FROM of the derived image; default: the row's image_name / --image, else the Python test image. */
  baseImage: string | null;
  imageSetup: string[];
  install: string[];
  installTimeoutSec: number;
}
type EnvSetup = Map<string, Map<string, EnvSetupEntry>>;

/**
 * Reads an --env-setup file: `{ "<owner/name>": { "<version>" | "*": { base_image?, image_setup?:
 * [cmd], install?: [cmd], install_timeout_sec? } } }`. Every scalar is read as a string (a
 * version `1.10` stays "1.10"). Problems are returned with the key path that is wrong.
 */
async function readEnvSetup(file: string): Promise<{ setup: EnvSetup; errors: TaskLoadError[] }> {
  const shown = displayPath(resolve(file));
  const fail = (detail: string, field?: string) => ({ setup: new Map() as EnvSetup, errors: [new TaskLoadError(shown, detail, field === undefined ? {} : { field })] });
  let doc: unknown;
  try {
    doc = parseYaml(await readFile(resolve(file), "utf8"), { schema: "failsafe" });
  } catch (error) {
    return fail(`--env-setup file cannot be read as YAML or JSON: ${(error as Error).message}`);
  }
  const isMap = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);
  if (!isMap(doc)) return fail('--env-setup file must map "owner/name" to versions, e.g. {"acme/calc": {"1.0": {"install": ["pip install -e ."]}}}');
  const setup: EnvSetup = new Map();
  const errors: TaskLoadError[] = [];
  const bad = (field: string, detail: string) => errors.push(new TaskLoadError(shown, `${field} ${detail}`, { field }));
  for (const [repo, versions] of Object.entries(doc)) {
    if (!REPO.test(repo)) bad(repo, 'is not a repo: keys are "owner/name"');
    if (!isMap(versions)) {
      bad(repo, 'must map versions (or "*") to setup, e.g. {"1.0": {"install": ["pip install -e ."]}}');
      continue;
    }
    const byVersion = new Map<string, EnvSetupEntry>();
    for (const [version, entry] of Object.entries(versions)) {
      const at = `${repo}.${version}`;
      if (!isMap(entry)) {
        bad(at, "must be a mapping with image_setup / install / base_image / install_timeout_sec");
        continue;
      }
      for (const key of Object.keys(entry)) if (!["base_image", "image_setup", "install", "install_timeout_sec"].includes(key)) bad(`${at}.${key}`, "is not a known key (base_image, image_setup, install, install_timeout_sec)");
      const commands = (key: string): string[] => {
        const v = entry[key];
        if (v === undefined) return [];
        if (typeof v === "string") return [v];
        if (Array.isArray(v) && v.every((c) => typeof c === "string")) return v as string[];
        bad(`${at}.${key}`, "must be a command or a list of commands");
        return [];
      };
      const base = entry.base_image;
      if (base !== undefined && (typeof base !== "string" || base.trim() === "")) bad(`${at}.base_image`, "must be an image name");
      const timeout = entry.install_timeout_sec === undefined ? 600 : Number(entry.install_timeout_sec);
      if (!(Number.isFinite(timeout) && timeout > 0)) bad(`${at}.install_timeout_sec`, `must be a positive number of seconds, got ${describe(entry.install_timeout_sec)}`);
      byVersion.set(version, { baseImage: typeof base === "string" ? base : null, imageSetup: commands("image_setup"), install: commands("install"), installTimeoutSec: timeout });
    }
    setup.set(repo, byVersion);
  }
  return { setup, errors };
}

/**
 * The derived image's build context: the base (a named image, or the Python test image) and the
 * image_setup commands as one `sh -e` script, so multi-line commands keep their meaning.
 */
function derivedContext(base: string | null, commands: readonly string[]): { rel: string; content: string; executable: boolean }[] {
  const head = base === null ? DEFAULT_DOCKERFILE : `FROM ${base}\n`;
  const dockerfile = `${head}COPY proctor-env-setup.sh /tmp/proctor-env-setup.sh\nRUN sh -e /tmp/proctor-env-setup.sh && rm -f /tmp/proctor-env-setup.sh\nWORKDIR ${SWEBENCH_WORKDIR}\n`;
  return [
    { rel: "Dockerfile", content: dockerfile, executable: false },
    { rel: "proctor-env-setup.sh", content: `${commands.join("\n")}\n`, executable: true },
  ];
}

/** The entry for a row's version: exact, else numerically equal ("1" for 1.0), else "*". */
function setupFor(versions: Map<string, EnvSetupEntry> | undefined, version: string | null): EnvSetupEntry | null {
  if (!versions) return null;
  if (version !== null) {
    const exact = versions.get(version);
    if (exact) return exact;
    const n = Number(version);
    for (const [key, entry] of versions) if (key !== "*" && key.trim() !== "" && Number.isFinite(n) && Number(key) === n) return entry;
  }
  return versions.get("*") ?? null;
}

/** The workdir every SWE-bench instance is checked out into. */
export const SWEBENCH_WORKDIR = "/testbed";
/** The image the default Python test image is built from (debootstrap'd Debian with python3 and git). */
export const SWEBENCH_BASE_IMAGE = "proctor/base:bookworm";
/** Log parsers the grader knows; `pytest` unless the row's `log_parser` (or its test_cmd) says otherwise. */
export const SWEBENCH_LOG_PARSERS = ["pytest", "unittest", "django", "sympy", "go", "cargo", "jest", "mocha"] as const;
export type SwebenchLogParser = (typeof SWEBENCH_LOG_PARSERS)[number];

/**
 * What the grader needs from a row, kept in `task.extra.swebench`. The verifier spec of a
 * SWE-bench task is a placeholder: the engine grades `format: "swebench"` tasks with these.
 */
export const SwebenchGrading = z.object({
  instanceId: z.string(),
  repo: z.string(),
  testPatch: z.string().min(1),
  failToPass: z.array(z.string()),
  passToPass: z.array(z.string()),
  /**
   * Shell command run in /testbed: the row's `test_cmd`, else derived from SWE-bench's per-repo,
   * per-version table (swebench-specs.ts); null: `python3 -m pytest -rA <files the test patch touches>`.
   */
  testCmd: z.string().nullable(),
  /** The table entry testCmd was derived from ("django/django 3.0"); absent when the row gave it or none applies. */
  testSpec: z.string().optional(),
  logParser: z.enum(SWEBENCH_LOG_PARSERS),
});
export type SwebenchGrading = z.infer<typeof SwebenchGrading>;

/** The gold patch's applier: git apply, then git apply --3way, then patch --fuzz (same chain as the patches agent). */
const APPLY_SCRIPT = `#!/bin/sh
# usage: apply.sh PATCH  (run in the repository)
p="$1"
git apply --verbose "$p" && exit 0
git apply --verbose --3way "$p" && exit 0
patch --batch --forward --fuzz=5 -p1 -i "$p" && exit 0
echo "proctor: the patch does not apply (git apply, git apply --3way, patch --fuzz=5 all failed)" >&2
exit 1
`;

const DEFAULT_DOCKERFILE = `FROM ${SWEBENCH_BASE_IMAGE}
RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3-pytest git patch && rm -rf /var/lib/apt/lists/*
WORKDIR ${SWEBENCH_WORKDIR}
`;

const KNOWN = new Set([
  "instance_id", "repo", "base_commit", "patch", "test_patch", "FAIL_TO_PASS", "PASS_TO_PASS", "problem_statement", "version",
  "environment_setup_commit", "image_name", "test_cmd", "log_parser",
]);
const REPO = /^[A-Za-z0-9_.-]+\/[A-Za-z0-9_.-]+$/;

/** Whether a file is a dataset of SWE-bench-style rows (by its name: .jsonl, or .json). */
export function isSwebenchFile(path: string): boolean {
  return /\.(jsonl|json)$/i.test(path);
}

/** The bare mirror expected for `owner/name` under `reposDir`. */
export function mirrorPath(reposDir: string, repo: string): string {
  return join(resolve(reposDir), `${repo.replace("/", "__")}.git`);
}

interface Row {
  line: number;
  value: unknown;
}

/**
 * Load every row of a SWE-bench / SWE-smith dataset (JSONL, or a JSON array) as a task. Every bad
 * row is reported (file:line, the field, what was expected) and the good rows still load.
 */
export async function loadSwebenchFile(file: string, options: SwebenchOptions = {}): Promise<{ tasks: TaskSpec[]; errors: TaskLoadError[] }> {
  const path = resolve(file);
  const shown = displayPath(path);
  const errors: TaskLoadError[] = [];
  let text: string;
  try {
    text = await readFile(path, "utf8");
  } catch (error) {
    return { tasks: [], errors: [new TaskLoadError(shown, `cannot be read: ${(error as Error).message}`, { cause: error })] };
  }
  const rows = path.toLowerCase().endsWith(".json") && text.trimStart().startsWith("[") ? parseArray(text, shown, errors) : parseLines(text, shown, errors);
  const cacheDir = options.cacheDir ?? defaultCacheDir();
  let envSetup: EnvSetup | null = null;
  if (options.envSetup !== undefined) {
    const read = await readEnvSetup(options.envSetup);
    if (read.errors.length > 0) return { tasks: [], errors: [...errors, ...read.errors] };
    envSetup = read.setup;
  }
  let defaultBuild: string | null = null;
  const tasks: TaskSpec[] = [];
  const missingMirrors = new Map<string, string[]>();
  const missingSetup = new Map<string, string[]>();
  const seen = new Map<string, number>();
  for (const row of rows) {
    const at = `${shown}:${row.line}`;
    const parsed = parseRow(row.value, at, errors);
    if (!parsed) continue;
    const first = seen.get(parsed.instanceId);
    if (first !== undefined) {
      errors.push(new TaskLoadError(at, `instance_id ${JSON.stringify(parsed.instanceId)} is also on line ${first}: instance ids must be unique`, { field: "instance_id", taskId: parsed.instanceId }));
      continue;
    }
    seen.set(parsed.instanceId, row.line);
    let repo = parsed.repo;
    if (options.reposDir !== undefined) {
      const mirror = mirrorPath(options.reposDir, parsed.repo);
      if (!existsSync(mirror)) {
        missingMirrors.set(mirror, [...(missingMirrors.get(mirror) ?? []), parsed.instanceId]);
        continue;
      }
      repo = mirror;
    }
    let image = parsed.imageName ?? (options.imageTemplate !== undefined ? fillTemplate(options.imageTemplate, parsed) : null);
    let buildContext: string | null = null;
    let setup: EnvSetupEntry | null = null;
    if (envSetup !== null) {
      setup = setupFor(envSetup.get(parsed.repo), parsed.version);
      if (setup === null) {
        const key = `${parsed.repo} version ${parsed.version ?? "(none)"}`;
        missingSetup.set(key, [...(missingSetup.get(key) ?? []), parsed.instanceId]);
        continue;
      }
      if (setup.imageSetup.length > 0) {
        // One context per (base, commands): the runtime builds it once and caches it by content hash.
        buildContext = await prepareDir(cacheDir, "swebench-env", derivedContext(setup.baseImage ?? image, setup.imageSetup));
        image = null;
      } else if (setup.baseImage !== null) image = setup.baseImage;
    }
    if (image === null && buildContext === null) {
      defaultBuild ??= await prepareDir(cacheDir, "swebench-python-image", [{ rel: "Dockerfile", content: DEFAULT_DOCKERFILE, executable: false }]);
      buildContext = defaultBuild;
    }
    const solution =
      parsed.patch.trim() === ""
        ? null
        : {
            dir: await prepareDir(cacheDir, `swebench-gold-${parsed.instanceId}`, [
              { rel: "gold.patch", content: parsed.patch, executable: false },
              { rel: "apply.sh", content: APPLY_SCRIPT, executable: true },
            ]),
            command: 'sh "${PROCTOR_SOLUTION_DIR:-/solution}/apply.sh" "${PROCTOR_SOLUTION_DIR:-/solution}/gold.patch"',
            // The oracle applies gold.patch itself (git apply, --3way, then a fuzzy apply on the host).
            patch: "gold.patch",
          };
    const grading: SwebenchGrading = {
      instanceId: parsed.instanceId,
      repo: parsed.repo,
      testPatch: parsed.testPatch,
      failToPass: parsed.failToPass,
      passToPass: parsed.passToPass,
      testCmd: parsed.testCmd,
      ...(parsed.testSpec !== null ? { testSpec: parsed.testSpec } : {}),
      logParser: parsed.logParser,
    };
    const spec: TaskSpec = {
      id: parsed.instanceId,
      format: "swebench",
      sourcePath: path,
      instruction: parsed.problemStatement,
      category: parsed.repo,
      difficulty: typeof parsed.extra.difficulty === "string" ? parsed.extra.difficulty : null,
      tags: [],
      environment: {
        dockerImage: image,
        buildContext,
        buildTimeoutSec: DEFAULT_BUILD_TIMEOUT_SEC,
        cpus: null,
        memoryMb: null,
        storageMb: null,
        gpus: 0,
        allowInternet: false,
        workdir: SWEBENCH_WORKDIR,
        env: {},
      },
      agent: { timeoutSec: DEFAULT_AGENT_TIMEOUT_SEC },
      // The engine grades swebench tasks itself (test_patch, test command, log parser): this
      // command is never run. No agent process may be alive while the tests run.
      verifier: { mode: "reward-file", command: "proctor-swebench-grade", testsDir: null, timeoutSec: DEFAULT_VERIFIER_TIMEOUT_SEC, env: {}, isolateProcesses: true, allowChanges: [] },
      solution,
      workspace: { repo, baseCommit: parsed.baseCommit, version: parsed.version, language: null, install: setup?.install ?? [], installTimeoutSec: setup?.installTimeoutSec ?? 600 },
      // The --env-setup entry is part of the spec, so its hash (run.json) changes with it.
      extra: {
        ...parsed.extra,
        swebench: grading,
        environment_setup_commit: parsed.environmentSetupCommit,
        ...(setup !== null ? { env_setup: { base_image: setup.baseImage, image_setup: setup.imageSetup, install: setup.install } } : {}),
      },
    };
    const checked = TaskSpec.safeParse(spec);
    if (!checked.success) {
      for (const issue of checked.error.issues) errors.push(new TaskLoadError(at, `the loaded task is invalid at ${issue.path.join(".")}: ${issue.message}`, { taskId: parsed.instanceId }));
      continue;
    }
    tasks.push(checked.data);
  }
  for (const [mirror, ids] of missingMirrors) {
    errors.push(
      new TaskLoadError(
        shown,
        `--repos-dir has no mirror ${displayPath(mirror)} (needed by ${ids.length} instance(s): ${ids.slice(0, 3).join(", ")}${ids.length > 3 ? ", ..." : ""}); create it with: git clone --bare https://github.com/${ids.length > 0 ? repoOfMirror(mirror) : "OWNER/NAME"}.git ${displayPath(mirror)}`,
        { field: "repo" },
      ),
    );
  }
  for (const [key, ids] of missingSetup) {
    errors.push(
      new TaskLoadError(
        displayPath(resolve(options.envSetup ?? "")),
        `--env-setup has no entry for ${key} (needed by ${ids.length} instance(s): ${ids.slice(0, 3).join(", ")}${ids.length > 3 ? ", ..." : ""}); add one under "${key.split(" version ")[0]}" (or a "*" version)`,
        { field: key.split(" version ")[0] },
      ),
    );
  }
  return { tasks, errors };
}

function repoOfMirror(mirror: string): string {
  return (mirror.split("/").pop() ?? "").replace(/\.git$/, "").replace("__", "/");
}

function fillTemplate(template: string, row: ParsedRow): string {
  return template.replaceAll("{repo}", row.repo).replaceAll("{version}", row.version ?? "").replaceAll("{instance_id}", row.instanceId);
}

/** One JSON value per non-blank line. */
function parseLines(text: string, shown: string, errors: TaskLoadError[]): Row[] {
  const rows: Row[] = [];
  text.split("\n").forEach((raw, index) => {
    if (raw.trim() === "") return;
    try {
      rows.push({ line: index + 1, value: JSON.parse(raw) });
    } catch (error) {
      errors.push(new TaskLoadError(`${shown}:${index + 1}`, `is not valid JSON: ${(error as Error).message}`));
    }
  });
  return rows;
}

/** A JSON array; each element keeps the line it starts on, for messages. */
function parseArray(text: string, shown: string, errors: TaskLoadError[]): Row[] {
  let values: unknown;
  try {
    values = JSON.parse(text);
  } catch (error) {
    errors.push(new TaskLoadError(shown, `is not valid JSON: ${(error as Error).message}`));
    return [];
  }
  if (!Array.isArray(values)) {
    errors.push(new TaskLoadError(shown, "must hold a JSON array of instances (or be a .jsonl file, one instance per line)"));
    return [];
  }
  const lines = elementLines(text);
  return values.map((value: unknown, i) => ({ line: lines[i] ?? 1, value }));
}

/** The line each top-level array element starts on (a scan that respects strings). */
function elementLines(text: string): number[] {
  const out: number[] = [];
  let depth = 0;
  let line = 1;
  let inString = false;
  let expectElement = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (c === "\n") line++;
    if (inString) {
      if (c === "\\") i++;
      else if (c === '"') inString = false;
      continue;
    }
    if (c === " " || c === "\n" || c === "\r" || c === "\t") continue;
    if (depth === 1 && expectElement && c !== "]") {
      out.push(line);
      expectElement = false;
    }
    if (c === '"') inString = true;
    else if (c === "[" || c === "{") {
      depth++;
      if (depth === 1) expectElement = true;
    } else if (c === "]" || c === "}") depth--;
    else if (c === "," && depth === 1) expectElement = true;
  }
  return out;
}

interface ParsedRow {
  instanceId: string;
  repo: string;
  baseCommit: string;
  patch: string;
  testPatch: string;
  failToPass: string[];
  passToPass: string[];
  problemStatement: string;
  version: string | null;
  environmentSetupCommit: string | null;
  imageName: string | null;
  testCmd: string | null;
  /** The table entry testCmd came from ("django/django 3.0"); null when the row gave it, or none applies. */
  testSpec: string | null;
  logParser: SwebenchLogParser;
  extra: Record<string, unknown>;
}

/** A row's fields checked one by one, every problem recorded; null when any field is bad. */
function parseRow(value: unknown, at: string, errors: TaskLoadError[]): ParsedRow | null {
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    errors.push(new TaskLoadError(at, `must be a JSON object with instance_id, repo, base_commit, ..., got ${describe(value)}`));
    return null;
  }
  const row = value as Record<string, unknown>;
  const idValue = row.instance_id;
  const taskId = typeof idValue === "string" ? idValue : undefined;
  const before = errors.length;
  const bad = (field: string, detail: string) => errors.push(new TaskLoadError(at, `${taskId ? `${taskId}: ` : ""}${field} ${detail}`, { field, taskId }));
  const str = (field: string, { required = true, empty = false } = {}): string | null => {
    const v = row[field];
    if (v === undefined || v === null) {
      if (required) bad(field, "is missing");
      return null;
    }
    if (typeof v !== "string") {
      bad(field, `must be a string, got ${describe(v)}`);
      return null;
    }
    if (!empty && v.trim() === "") {
      bad(field, "must not be empty");
      return null;
    }
    return v;
  };
  const tests = (field: string): string[] => {
    let v = row[field];
    if (v === undefined || v === null) {
      bad(field, 'is missing (a list of test ids, or a JSON-encoded list: "[\\"tests/test_x.py::test_y\\"]")');
      return [];
    }
    if (typeof v === "string") {
      try {
        v = JSON.parse(v);
      } catch {
        bad(field, `is a string that is not a JSON-encoded list: ${describe(v)}`);
        return [];
      }
    }
    if (!Array.isArray(v) || v.some((t) => typeof t !== "string")) {
      bad(field, `must be a list of test ids (strings), got ${describe(v)}`);
      return [];
    }
    return v as string[];
  };

  const instanceId = str("instance_id");
  if (instanceId !== null && !TASK_ID_PATTERN.test(instanceId)) bad("instance_id", `${JSON.stringify(instanceId)} is not a valid task id: use 1-128 of [A-Za-z0-9._-], starting with a letter or digit`);
  const repo = str("repo");
  if (repo !== null && !REPO.test(repo)) bad("repo", `must be "owner/name", got ${describe(repo)}`);
  const baseCommit = str("base_commit");
  if (baseCommit !== null && !COMMIT_ID.test(baseCommit)) bad("base_commit", `must be a full commit id (40 or 64 hex digits), got ${describe(baseCommit)}`);
  const patch = str("patch", { required: false, empty: true }) ?? "";
  const testPatch = str("test_patch");
  const failToPass = tests("FAIL_TO_PASS");
  const passToPass = tests("PASS_TO_PASS");
  if (errors.length === before && failToPass.length + passToPass.length === 0) bad("FAIL_TO_PASS", "and PASS_TO_PASS are both empty: with no test to check, nothing would be verified");
  const problemStatement = str("problem_statement", { empty: true });
  let version: string | null = null;
  if (typeof row.version === "number") version = String(row.version);
  else if (row.version !== undefined && row.version !== null) version = str("version");
  const environmentSetupCommit = str("environment_setup_commit", { required: false });
  const imageName = str("image_name", { required: false });
  let testCmd: string | null = null;
  if (Array.isArray(row.test_cmd) && row.test_cmd.every((c) => typeof c === "string")) testCmd = (row.test_cmd as string[]).join("\n");
  else testCmd = str("test_cmd", { required: false });
  let logParser: SwebenchLogParser = guessParser(testCmd);
  // Official rows carry no test command: the harness's table gives it for the repo and version.
  let testSpec: string | null = null;
  if (testCmd === null && repo !== null && testPatch !== null) {
    const derived = deriveTestSpec(repo, version, testPatch);
    if (derived) {
      testCmd = derived.command;
      logParser = derived.parser;
      testSpec = derived.source;
    }
  }
  if (row.log_parser !== undefined && row.log_parser !== null) {
    if (typeof row.log_parser === "string" && (SWEBENCH_LOG_PARSERS as readonly string[]).includes(row.log_parser)) logParser = row.log_parser as SwebenchLogParser;
    else bad("log_parser", `must be one of ${SWEBENCH_LOG_PARSERS.join(", ")}, got ${describe(row.log_parser)}`);
  }
  if (errors.length > before || instanceId === null || repo === null || baseCommit === null || testPatch === null || problemStatement === null) return null;
  const extra = Object.fromEntries(Object.entries(row).filter(([key]) => !KNOWN.has(key)));
  return { instanceId, repo, baseCommit, patch, testPatch, failToPass, passToPass, problemStatement, version, environmentSetupCommit, imageName, testCmd, testSpec, logParser, extra };
}

/** The log parser a test command implies. */
function guessParser(testCmd: string | null): SwebenchLogParser {
  if (testCmd === null) return "pytest";
  if (/\bgo test\b/.test(testCmd)) return "go";
  if (/\bcargo (test|nextest)\b/.test(testCmd)) return "cargo";
  if (/\bpytest\b/.test(testCmd)) return "pytest";
  if (/runtests\.py|manage\.py test/.test(testCmd)) return "django";
  if (/\bunittest\b/.test(testCmd)) return "unittest";
  if (/\bbin\/test\b/.test(testCmd)) return "sympy";
  if (/\bjest\b/.test(testCmd)) return "jest";
  if (/\bmocha\b/.test(testCmd)) return "mocha";
  return "pytest";
}
