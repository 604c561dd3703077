import { Command, CommanderError, InvalidArgumentError, Option } from "commander";
import { workerCommand } from "@proctor/worker";
import { DEFAULT_TRIAL_LIMITS } from "@proctor/schema";
import type { SlotsAction } from "./commands/slots";
import { CliError, UsageError } from "./errors";
import { stderrLogger } from "./logger";
import packageJson from "../package.json" with { type: "json" };

/** This package's version, from its package.json (bundled into dist at build time). */
export const VERSION: string = packageJson.version;

const collect = (value: string, previous: string[]) => [...previous, value];
const positiveInt = (flag: string) => (value: string) => {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1) throw new InvalidArgumentError(`${flag} must be a whole number >= 1, got "${value}"`);
  return n;
};
const nonNegativeInt = (flag: string) => (value: string) => {
  const n = Number(value);
  if (value.trim() === "" || !Number.isInteger(n) || n < 0) throw new InvalidArgumentError(`${flag} must be a whole number >= 0, got "${value}"`);
  return n;
};
const nonNegativeNumber = (flag: string) => (value: string) => {
  const n = Number(value);
  if (value.trim() === "" || !Number.isFinite(n) || n < 0) throw new InvalidArgumentError(`${flag} must be a number >= 0 (0 = no limit), got "${value}"`);
  return n;
};
const positiveNumber = (flag: string) => (value: string) => {
  const n = Number(value);
  if (!Number.isFinite(n) || n <= 0) throw new InvalidArgumentError(`${flag} must be a positive number, got "${value}"`);
  return n;
};

/** Harbor's `harbor run` flags that Proctor spells otherwise (--n-concurrent and --n-attempts are taken as they are). */
const HARBOR_FLAGS: Record<string, string> = {
  "--path": "Proctor takes the tasks as arguments: proctor run <task dir | dir of tasks | archive>",
  "-p": "Proctor takes the tasks as arguments: proctor run <task dir | dir of tasks | archive>",
  "--jobs-dir": "Proctor's is -o, --out DIR (where run directories go)",
};

/** Commander's "unknown option '--path'" for `proctor run`, with what Proctor calls a Harbor flag. */
function withHarborHint(message: string): string {
  const flag = /unknown option '([^']+)'/.exec(message)?.[1];
  const hint = flag !== undefined ? HARBOR_FLAGS[flag] : undefined;
  return hint ? `${message.trimEnd()} (Harbor's ${flag}? ${hint})\n` : message;
}

/** The command table: parse flags, call the command's function, keep its exit code. */
export function buildProgram(setExitCode: (code: number) => void): Command {
  const logger = stderrLogger();
  const program = new Command("proctor")
    .description("Run AI agents on benchmark tasks in sandboxes, verify every attempt with the task's tests, report pass rates.")
    .version(VERSION)
    .exitOverride()
    // Commander's own errors (an unknown option, a bad value) carry the prefix every other message has.
    .configureOutput({ writeErr: (s) => process.stderr.write(s), outputError: (s, write) => write(s.replace(/^error: /, "proctor: ")) });

  program
    .command("run")
    .description("run an agent on tasks: a task dir, a dir of task dirs, an archive (.zip/.tar.gz), or SWE-bench rows (.jsonl/.json)")
    .argument("[source...]", "task sources (optional with --resume): paths, NAME@VERSION of a registry dataset, or git+URL@COMMIT#PATH")
    .option("-d, --dataset <name@version>", "a dataset from the registry (repeatable; NAME alone: its only version)", collect, [])
    .option("--registry <file|url>", "registry of datasets, Harbor's registry.json format (default $PROCTOR_REGISTRY, else Harbor's public registry)")
    .option("-a, --agent <agent>", "oracle | nop | llm | claude-code[@VER] | codex[@VER] | installed:<dir>[@VER] | patches:<predictions.jsonl> | image:<dir> | <agent-dir> (default: the archive's agent_code, else oracle)")
    .addOption(new Option("--runtime <runtime>", "sandbox runtime").choices(["auto", "docker", "local"]).default("auto"))
    // 4 is also DEFAULT_CONCURRENCY in limits.ts (never warned about); not imported, so the engine is not loaded here.
    .option("-n, --concurrency <n>", "trials at once (a -n past what the host holds gets a warning)", positiveInt("--concurrency"), 4)
    .option("-k, --attempts <k>", "attempts per task", positiveInt("--attempts"), 1)
    // Harbor's names for -n and -k, for commands copied from Harbor's docs.
    .addOption(new Option("--n-concurrent <n>", "Harbor's name for --concurrency").argParser(positiveInt("--n-concurrent")).hideHelp())
    .addOption(new Option("--n-attempts <k>", "Harbor's name for --attempts").argParser(positiveInt("--n-attempts")).hideHelp())
    .option("-i, --include <glob>", "only task ids matching (repeatable)", collect, [])
    .option("-x, --exclude <glob>", "skip task ids matching (repeatable)", collect, [])
    .option("--tasks-file <file>", "only the task ids listed in FILE (one per line, # comments)")
    .option("-o, --out <dir>", "runs root directory", "runs")
    .option("--run-id <id>", "run id (default: timestamp + random)")
    .option("--resume <run-dir>", "continue a run: skip finished trials, refuse a changed config")
    .option("--retry <what>", "with --resume: run these finished trials again: errors, infra, agent-errors, or a task id or glob (repeatable)", collect, [])
    .option("--timeout-multiplier <x>", "scale every task timeout", positiveNumber("--timeout-multiplier"), 1)
    .option("--repos-dir <dir>", "SWE-bench rows: bare mirrors named <owner>__<name>.git (no network clone)")
    .option("--image <template>", "SWE-bench rows without image_name: image to use, {repo} {version} {instance_id} filled in (default: a built Python image)")
    .option("--env-setup <file>", "SWE-bench rows: YAML/JSON per repo and version: image_setup commands (an image derived once, cached by hash), install commands (in /testbed before the agent)")
    .option("--default-image <image>", "image for tasks that name none (default on Docker: proctor/base:bookworm)")
    .option("--isolate-verifier", "no agent process may be alive when the verifier starts, for every task (default: each task decides)")
    .option("--no-isolate-verifier", "let agent processes live through verification, for every task (trusted agents; listed and flagged)")
    .addOption(new Option("--grading <mode>", "where verifiers run: fresh (a new sandbox from the task's image with only the agent's outputs) or shared (the agent's own sandbox); default: each task's mode").choices(["fresh", "shared"]))
    .option("-m, --model <name>", "--agent llm / claude-code / codex / installed: the model to evaluate (required with them); with --agent llm, openai/, anthropic/, openrouter/, google/, mistral/, groq/ or together/ before the name picks that provider's endpoint and key variable when --base-url is not given")
    .option("--base-url <url>", "the model API's root (default: $OPENAI_BASE_URL, else https://api.openai.com/v1; for claude-code $ANTHROPIC_BASE_URL, else https://api.anthropic.com/v1)")
    .option("--api-key-env <var>", "NAME of the env var holding the API key (default OPENAI_API_KEY; ANTHROPIC_API_KEY for claude-code)")
    .option("--max-turns <n>", "--agent llm: model requests per trial", positiveInt("--max-turns"))
    .option("--temperature <t>", "--agent llm: sampling temperature (0-2)", (v) => {
      const n = Number(v);
      if (v.trim() === "" || !Number.isFinite(n) || n < 0 || n > 2) throw new InvalidArgumentError(`--temperature must be a number from 0 to 2, got "${v}"`);
      return n;
    })
    .option("--max-output-tokens <n>", "--agent llm: max_tokens per model reply", positiveInt("--max-output-tokens"))
    .option("--llm-concurrency <n>", "--agent llm: most model requests in flight (shrinks on 429s, grows back)", positiveInt("--llm-concurrency"))
    .option("--llm-proxy", "code agent: give it --model through Proctor's per-trial proxy (OPENAI_BASE_URL + a per-trial OPENAI_API_KEY)")
    .option("--llm-budget-tokens <n>", "--llm-proxy: prompt + completion tokens per trial; beyond it the agent is stopped", positiveInt("--llm-budget-tokens"))
    .option("--llm-budget-requests <n>", "--llm-proxy: model requests per trial; beyond it the agent is stopped", positiveInt("--llm-budget-requests"))
    .option("--price-table <file>", "prices instead of the price library's (self-hosted models): JSON {\"<model>\": {\"input\", \"output\", \"cache_read\", \"cache_write\"}} in USD per million tokens")
    .option("--max-cost <usd>", "run budget: no trial starts once the finished trials cost this many USD (exit 6, resumable)", positiveNumber("--max-cost"))
    .option("--max-tokens <n>", "run budget: no trial starts once the finished trials used this many model tokens (exit 6, resumable)", positiveInt("--max-tokens"))
    .option("--trial-max-cost <usd>", "stop a trial's agent once its model cost passes this many USD (an agent error; --agent llm's loop, or the model proxy's next request)", positiveNumber("--trial-max-cost"))
    .option("--compute-price <usd>", "USD per CPU-hour of the trials' sandboxes (CPU-seconds as Docker measures them): a trial's cost is then its tokens + its compute", nonNegativeNumber("--compute-price"))
    .addOption(new Option("--on-budget <what>", "at a run budget, running trials finish (default) or are stopped (counted as not run)").choices(["finish", "stop"]))
    .option("--container-config <file>", "JSON: mem_limit, shm_size, nano_cpus, gpus (-1 = all), runtime, privileged (needs I_ACCEPT_RUNNING_PRIVILEGED_CONTAINERS=True)")
    .option("--memory-mb <n>", `default memory limit per trial in MB, 0 = none (default ${DEFAULT_TRIAL_LIMITS.memoryMb}; a task's own memory_mb wins)`, nonNegativeNumber("--memory-mb"))
    .option("--cpus <n>", `default CPUs per trial, 0 = no limit (default ${DEFAULT_TRIAL_LIMITS.cpus}; a task's own cpus wins)`, nonNegativeNumber("--cpus"))
    .option("--pids-limit <n>", `default process cap per trial (default ${DEFAULT_TRIAL_LIMITS.pidsLimit})`, positiveInt("--pids-limit"))
    .option("--storage-mb <n>", `default disk limit per trial in MB, 0 = none (default ${DEFAULT_TRIAL_LIMITS.storageMb}; a task's own storage_mb wins)`, nonNegativeNumber("--storage-mb"))
    .option("--queue <url>", "run the trials on proctor workers through Redis (redis://HOST:PORT/DB); run dir and progress stay here")
    .option("--bundles-dir <dir>", "--queue: a directory every worker sees at the same path, for task bundles (default: served to the workers over HTTP)")
    .option("--bundles-host <host>", "--queue: the address task bundles are served on, as workers reach this host (default: every interface, given as this host's first non-loopback IPv4)")
    .option("--image-registry <host:port[/prefix]>", "share task images through this registry: pull before a build, push after one (default $PROCTOR_IMAGE_REGISTRY; docs/images.md)")
    .option("--image-cache-gb <n>", "keep task images (proctor-build/*) under N GB, least recently used removed first (default $PROCTOR_IMAGE_CACHE_GB, else a quarter of the Docker data root's disk)", positiveNumber("--image-cache-gb"))
    .option("--json", "print summary.json on stdout", false)
    .addOption(new Option("--fail-on <what>", "exit 5 when the run finished with a trial that errored (errors) or that did not pass (failures: failed, errored or flagged); never: exit 0 whatever the rewards").choices(["errors", "failures", "never"]).default("never"))
    .configureOutput({ writeErr: (s) => process.stderr.write(s), outputError: (s, write) => write(withHarborHint(s.replace(/^error: /, "proctor: "))) })
    .action(async (sources: string[], o, command: Command) => {
      // --n-concurrent / --n-attempts (Harbor's names) stand for -n / -k; both given must agree.
      const harbor = (name: "concurrency" | "attempts", alias: "nConcurrent" | "nAttempts", flag: string) => {
        const value = o[alias] as number | undefined;
        if (value !== undefined && command.getOptionValueSource(name) === "cli" && value !== o[name]) throw new UsageError(`--${name} ${o[name]} and ${flag} ${value} (Harbor's name for it) disagree: give one of them`);
        return (value ?? o[name]) as number;
      };
      const concurrency = harbor("concurrency", "nConcurrent", "--n-concurrent");
      const attempts = harbor("attempts", "nAttempts", "--n-attempts");
      setExitCode(
        await (await import("./commands/run")).runCommand({
          failOn: o.failOn,
          images: { imageRegistry: o.imageRegistry, imageCacheGb: o.imageCacheGb },
          queue: o.queue,
          bundlesDir: o.bundlesDir,
          bundlesHost: o.bundlesHost,
          containerConfig: o.containerConfig,
          limits: { memoryMb: o.memoryMb, cpus: o.cpus, pidsLimit: o.pidsLimit, storageMb: o.storageMb },
          sources,
          datasets: o.dataset,
          registry: o.registry,
          agent: o.agent,
          runtime: o.runtime,
          concurrency,
          attempts,
          include: o.include,
          exclude: o.exclude,
          tasksFile: o.tasksFile,
          out: o.out,
          runId: o.runId,
          resume: o.resume,
          retry: o.retry,
          timeoutMultiplier: o.timeoutMultiplier,
          defaultImage: o.defaultImage,
          reposDir: o.reposDir,
          image: o.image,
          envSetup: o.envSetup,
          isolateVerifier: o.isolateVerifier,
          grading: o.grading,
          llm: {
            model: o.model,
            baseUrl: o.baseUrl,
            apiKeyEnv: o.apiKeyEnv,
            maxTurns: o.maxTurns,
            temperature: o.temperature,
            maxOutputTokens: o.maxOutputTokens,
            llmConcurrency: o.llmConcurrency,
            llmProxy: o.llmProxy,
            llmBudgetTokens: o.llmBudgetTokens,
            llmBudgetRequests: o.llmBudgetRequests,
            priceTable: o.priceTable,
          },
          computePrice: o.computePrice,
          budget: { maxCostUsd: o.maxCost, maxTokens: o.maxTokens, trialMaxCostUsd: o.trialMaxCost, onBudget: o.onBudget },
          json: o.json,
          logger,
        }),
      );
    });

  // The worker app's own command (same flags and environment variables as proctor-worker).
  program.addCommand(workerCommand(setExitCode, "worker", "proctor worker").copyInheritedSettings(program));

  program
    .command("report")
    .description("report runs: pass rate with CI, per category, failed/errored trials with reasons; two runs give a paired comparison")
    .argument("<run-dir...>")
    .addOption(new Option("-f, --format <format>", "output format").choices(["table", "md", "json", "junit", "html", "csv", "swebench"]).default("table"))
    .option("--json", "same as --format json", false)
    .option("-o, --out <file>", "write to FILE instead of stdout")
    .option("--seed <n>", "bootstrap seed", (v) => Number(v))
    .option("--leaderboard", "one leaderboard over the runs (run dirs or dirs holding them): by dataset and agent + model; --format table|md|json|html (html adds the plots)", false)
    .action(async (runDirs: string[], o) =>
      setExitCode(await (await import("./commands/report")).reportCommand({ runDirs, format: o.json ? "json" : o.format, out: o.out, seed: o.seed, leaderboard: o.leaderboard })),
    );

  program
    .command("regrade")
    .description("grade the outputs a run's trials kept again, against the same or a fixed task version, without running the agent; writes a new run")
    .argument("<run-dir>", "the run to grade again")
    .option("--tasks <source>", "where the tasks come from (a task dir, a dir of tasks, an archive, dataset rows), matched by task id (default: the run's own sources)")
    .option("-o, --out <dir>", "runs root for the new run (default: the regraded run's)")
    .option("--run-id <id>", "the new run's id (default: <run-id>-regrade-<time>)")
    .option("-n, --concurrency <n>", "trials at once", positiveInt("--concurrency"), 4)
    .option("--json", "print the new run's summary.json on stdout", false)
    .action(async (runDir: string, o) =>
      setExitCode(
        await (await import("./commands/regrade")).regradeCommand({ runDir, tasks: o.tasks, out: o.out, runId: o.runId, concurrency: o.concurrency, json: o.json, logger }),
      ),
    );

  program
    .command("view")
    .description("serve the web viewer over run dirs (live while runs progress)")
    .argument("[paths...]", "a runs root or run dirs (default: runs)")
    .option("--host <host>", "address to bind", "127.0.0.1")
    .option("--port <port>", "port to bind", (v) => Number(v), 4180)
    .action(async (paths: string[], o) => setExitCode(await (await import("./commands/view")).viewCommand({ paths, host: o.host, port: o.port, logger })));

  const datasets = program.command("datasets").description("datasets by name: the registry's datasets, and what the cache holds");
  const datasetAction = (action: "list" | "info" | "pull" | "rm") => async (...args: unknown[]) => {
    const o = args.at(-2) as { registry?: string; json?: boolean };
    const name = typeof args[0] === "string" ? args[0] : undefined;
    setExitCode(await (await import("./commands/datasets")).datasetsCommand({ action, name, registry: o.registry, json: Boolean(o.json) }));
  };
  const registryOption = (command: Command) => command.option("--registry <file|url>", "registry in Harbor's registry.json format (default $PROCTOR_REGISTRY, else Harbor's public registry)");
  registryOption(datasets.command("list").description("the registry's datasets: versions, task counts, what is cached and its size")).option("--json", "print as JSON", false).action(datasetAction("list"));
  registryOption(datasets.command("info").description("a dataset's versions, or one version's tasks (repository, commit, path, cached)").argument("<name[@version]>")).option("--json", "print as JSON", false).action(datasetAction("info"));
  registryOption(datasets.command("pull").description("fetch a dataset (or git+URL@COMMIT#PATH) into the cache, so runs of it need no network").argument("<name@version>")).action(datasetAction("pull"));
  registryOption(datasets.command("rm").description("remove a dataset's tasks from the cache (tasks another dataset of the registry uses are kept)").argument("<name@version>")).action(datasetAction("rm"));

  const tasks = program.command("tasks").description("work with task directories");
  tasks
    .command("list")
    .description("list what task sources hold (id, category, difficulty, kind, path), loaded as proctor run loads them")
    .argument("<source...>", "a task dir, a dir of task dirs, or an archive (.zip/.tar.gz)")
    .option("-i, --include <glob>", "only task ids matching (repeatable)", collect, [])
    .option("-x, --exclude <glob>", "skip task ids matching (repeatable)", collect, [])
    .option("--json", "print {tasks, errors} as JSON", false)
    .option("--registry <file|url>", "registry for sources that name a dataset (NAME@VERSION; default $PROCTOR_REGISTRY, else Harbor's public registry)")
    .action(async (sources: string[], o) =>
      setExitCode(await (await import("./commands/tasks-list")).tasksListCommand({ sources, registry: o.registry, include: o.include, exclude: o.exclude, json: o.json, logger })),
    );
  tasks
    .command("validate")
    .description("run the oracle and nop on every task (SWE-bench rows: oracle must resolve, nop must not); name each broken task with its failing tests; exit 1 when any is broken")
    .argument("<source...>", "a task dir, a dir of task dirs, an archive, or dataset rows (.jsonl/.json)")
    .addOption(new Option("--runtime <runtime>", "sandbox runtime of the oracle and nop trials (auto: Docker when a daemon answers, else local)").choices(["auto", "docker", "local"]).default("auto"))
    .option("-n, --concurrency <n>", "trials at once", positiveInt("--concurrency"), 4)
    .option("-i, --include <glob>", "only task ids matching (repeatable)", collect, [])
    .option("-x, --exclude <glob>", "skip task ids matching (repeatable)", collect, [])
    .option("--repos-dir <dir>", "SWE-bench rows: bare mirrors named <owner>__<name>.git (no network clone)")
    .option("--image <template>", "SWE-bench rows without image_name: image to use, {repo} {version} {instance_id} filled in")
    .option("--env-setup <file>", "SWE-bench rows: per-repo, per-version image_setup / install commands (see proctor run)")
    .option("--default-image <image>", "image for tasks that name none")
    .option("--keep", "keep the validation run directories", false)
    .option("--registry <file|url>", "registry for sources that name a dataset (NAME@VERSION; default $PROCTOR_REGISTRY, else Harbor's public registry)")
    .action(async (paths: string[], o) =>
      setExitCode(
        await (await import("./commands/validate")).validateCommand({ paths, registry: o.registry, runtime: o.runtime, concurrency: o.concurrency, include: o.include, exclude: o.exclude, reposDir: o.reposDir, image: o.image, envSetup: o.envSetup, defaultImage: o.defaultImage, keep: o.keep, logger }),
      ),
    );

  program
    .command("serve")
    .description("run the batch server: uploads over HTTP, live progress over WebSocket")
    .option("--host <host>", "address to bind", "127.0.0.1")
    .option("--port <port>", "port to bind", (v) => Number(v), 8080)
    .option("--data-dir <dir>", "where batches (run directories) are kept", "proctor-data")
    .option("--auth <mode>", "none | token (bearer tokens from $PROCTOR_TOKENS or $PROCTOR_TOKENS_FILE) | epistula (hotkeys from --hotkeys-file or $PROCTOR_HOTKEYS) | hotkey-header-insecure", "epistula")
    .addOption(new Option("--runtime <runtime>", "sandbox runtime of the batches' trials (auto: Docker when a daemon answers, else local; local needs --unsafe-local-runtime)").choices(["auto", "docker", "local"]).default("auto"))
    .option("--default-image <image>", "image for tasks that name none (default on Docker: proctor/base:bookworm)")
    .option("--max-active-batches <n>", "batches running at once", positiveInt("--max-active-batches"), 1)
    .option("--max-queued-batches <n>", "batches waiting; more get 429", positiveInt("--max-queued-batches"), 10)
    .option("--max-concurrent-tasks <n>", "largest ?concurrent_tasks", positiveInt("--max-concurrent-tasks"), 8)
    .option("--hotkeys-file <file>", "allowlisted SS58 hotkeys, one per line (else $PROCTOR_HOTKEYS)")
    .option("--retention-days <days>", "delete finished batches older than this", positiveNumber("--retention-days"))
    .option("--allow-local-repos", "let uploads name repositories on this machine's disk", false)
    .option("--insecure", "allow --auth none on a non-loopback address", false)
    .option("--unsafe-local-runtime", "run uploads on the local runtime (host processes, no isolation): trusted uploads only", false)
    .option("--isolate-verifier", "no agent process may be alive when any verifier starts (default: each task decides; check tasks isolate)")
    .option("--no-isolate-verifier", "let agent processes live through verification for every task (needed with --unsafe-local-runtime for check tasks)")
    .addOption(new Option("--grading <mode>", "where verifiers run: fresh (a new sandbox from the task's image with only the agent's outputs) or shared (the agent's own sandbox); default: each task's mode").choices(["fresh", "shared"]))
    .option("--admin-hotkeys <list>", "comma-separated SS58 hotkeys (or token:<id>) that see and cancel every batch (else $PROCTOR_ADMIN_HOTKEYS)")
    .option("--max-uploads <n>", "uploads in progress at once; more get 503", positiveInt("--max-uploads"), 8)
    .option("--max-uploads-per-key <n>", "uploads in progress at once per hotkey/token; more get 429", positiveInt("--max-uploads-per-key"), 2)
    .option("--allow-undigested-uploads", "accept signed uploads without Content-Digest (old clients; their body is read before the signature is checked)", false)
    .option("--receipt-key <file>", "sign each finished batch's receipt (GET /batch/:id/receipt) with the sr25519 key in FILE (a mnemonic, 0x seed or Bittensor hotkey JSON)")
    .option("--llm-proxy-base-url <url>", "give every batch's agent a model through Proctor's per-trial model proxy to this OpenAI-compatible URL")
    .option("--llm-api-key-env <var>", "--llm-proxy-base-url: NAME of the env var holding the upstream key (default OPENAI_API_KEY)")
    .option("--llm-models <list>", "--llm-proxy-base-url: comma-separated models a batch may name with ?model= (the first is the default)")
    .option("--llm-budget-tokens <n>", "--llm-proxy-base-url: prompt + completion tokens per trial", positiveInt("--llm-budget-tokens"))
    .option("--llm-budget-requests <n>", "--llm-proxy-base-url: model requests per trial", positiveInt("--llm-budget-requests"))
    .option("--agents <list>", "--llm-proxy-base-url: installed CLI agents batches may name with ?agent= (comma-separated: codex[@VER], claude-code[@VER], installed:<dir>[@VER]); such a batch uploads tasks/ only")
    .option("--agent-image-build-timeout <sec>", "an uploaded agent_image/ build running longer fails its batch", positiveNumber("--agent-image-build-timeout"), 600)
    .option("--agent-image-max-mb <n>", "largest uploaded agent_image/ build context and built image; larger fails the batch", positiveInt("--agent-image-max-mb"), 4096)
    .option("--agent-image-build-network", "let RUN steps of uploaded agent_image/ Dockerfiles reach the network (default: none)", false)
    .option("--queue <url>", "run no trials here: one job per trial on Redis (redis://HOST:PORT/DB) for proctor workers")
    .option("--worker-token <token>", "--queue: token workers send for GET /v1/bundles/:sha and /v1/workers (default $PROCTOR_WORKER_TOKEN)")
    .option("--public-url <url>", "--queue: this server's URL as workers reach it (default: the listen URL)")
    .option("--slots", "serve the /v1/slots API (sandbox slots for RL and data generation)", false)
    .option("--slots-per-sandbox <n>", "--slots: slots per sandbox", positiveInt("--slots-per-sandbox"), 4)
    .option("--slots-min-sandboxes <n>", "--slots: sandboxes kept started (of the default image)", nonNegativeInt("--slots-min-sandboxes"), 0)
    .option("--slots-max-sandboxes <n>", "--slots: sandboxes at most, per image", positiveInt("--slots-max-sandboxes"), 4)
    .option("--slots-acquire-timeout-s <s>", "--slots: how long POST /v1/slots waits for a free slot before 503", positiveNumber("--slots-acquire-timeout-s"), 30)
    .option("--slots-idle-timeout-s <s>", "--slots: a slot unused this long is reclaimed", positiveNumber("--slots-idle-timeout-s"), 600)
    .option("--slots-max-lifetime-s <s>", "--slots: a slot is reclaimed this long after it was created", positiveNumber("--slots-max-lifetime-s"), 3600)
    .option("--slots-tasks-dir <source>", "--slots: tasks a slot may name ({\"task\": id}; verify runs their tests): a task dir, a dir of tasks, or a SWE-bench dataset (.jsonl/.json; per-test verify)")
    .option("--slots-repos-dir <dir>", "--slots: git repositories a slot may name ({\"repo\": {name, commit}}), and a SWE dataset's bare mirrors: <dir>/<owner>__<name>.git")
    .option("--slots-image <template>", "--slots: SWE rows without image_name: image to use, {repo} {version} {instance_id} filled in (default: a built Python image)")
    .addHelpText(
      "after",
      [
        "",
        "Environment:",
        "  PROCTOR_TOKENS         --auth token: comma-separated bearer tokens (plain, or sha256:<hex>); PROCTOR_TOKENS_FILE: one per line",
        "  PROCTOR_HOTKEYS        --auth epistula: comma-separated SS58 hotkeys allowed to submit (or --hotkeys-file; PROCTOR_HOTKEYS_FILE)",
        "  PROCTOR_ADMIN_HOTKEYS  identities that see and cancel every batch (or --admin-hotkeys)",
        "  PROCTOR_WORKER_TOKEN   --queue: the token workers send (or --worker-token)",
        "",
        "Example: PROCTOR_TOKENS=$(openssl rand -hex 32) proctor serve --auth token",
      ].join("\n"),
    )
    .action(async (o) =>
      setExitCode(
        await (await import("./commands/serve")).serveCommand({
          queue: o.queue, workerToken: o.workerToken, publicUrl: o.publicUrl,
          host: o.host, port: o.port, dataDir: o.dataDir, auth: o.auth, runtime: o.runtime, defaultImage: o.defaultImage,
          maxActiveBatches: o.maxActiveBatches, maxQueuedBatches: o.maxQueuedBatches, maxConcurrentTasks: o.maxConcurrentTasks,
          insecure: o.insecure, hotkeysFile: o.hotkeysFile, retentionDays: o.retentionDays, allowLocalRepos: o.allowLocalRepos, unsafeLocalRuntime: o.unsafeLocalRuntime,
          isolateVerifier: o.isolateVerifier, grading: o.grading, adminHotkeys: o.adminHotkeys, maxUploads: o.maxUploads, maxUploadsPerKey: o.maxUploadsPerKey,
          allowUndigestedUploads: o.allowUndigestedUploads, receiptKey: o.receiptKey,
          agentImageBuildTimeoutSec: o.agentImageBuildTimeout, agentImageMaxMb: o.agentImageMaxMb, agentImageBuildNetwork: o.agentImageBuildNetwork,
          ...(o.slots
            ? {
                slots: {
                  slotsPerSandbox: o.slotsPerSandbox, minSandboxes: o.slotsMinSandboxes, maxSandboxes: o.slotsMaxSandboxes,
                  acquireTimeoutMs: Math.round(o.slotsAcquireTimeoutS * 1000), idleTimeoutMs: Math.round(o.slotsIdleTimeoutS * 1000),
                  maxLifetimeMs: Math.round(o.slotsMaxLifetimeS * 1000), tasksDir: o.slotsTasksDir ?? null, reposDir: o.slotsReposDir ?? null, imageTemplate: o.slotsImage ?? null,
                },
              }
            : {}),
          llmProxyBaseUrl: o.llmProxyBaseUrl, llmApiKeyEnv: o.llmApiKeyEnv, llmModels: o.llmModels, llmBudgetTokens: o.llmBudgetTokens, llmBudgetRequests: o.llmBudgetRequests, agents: o.agents,
          // A server says what it does: a line per batch and per trial.
          logger: stderrLogger(undefined, true),
        }),
      ),
    );

  program
    .command("submit")
    .description("upload an archive (tasks/ + agent_code/) to a server, follow it live, print the results")
    .argument("<archive>")
    .requiredOption("--server <url>", "server base URL, e.g. http://127.0.0.1:8080")
    .option("--key-file <file>", "hotkey file (else $PROCTOR_HOTKEY_URI or $PROCTOR_HOTKEY_FILE)")
    .option("--token <token>", "bearer token instead of a hotkey (else $PROCTOR_TOKEN, or $PROCTOR_TOKENS when it holds one token, as the server reads it)")
    .option("--signed-for <ss58>", "the server's hotkey, when it requires Epistula-Signed-For")
    .option("-n, --concurrent-tasks <n>", "tasks at once on the server", positiveInt("--concurrent-tasks"))
    .option("--max-cost <usd>", "batch budget: no task starts once the finished ones cost this many USD", positiveNumber("--max-cost"))
    .option("--max-tokens <n>", "batch budget: no task starts once the finished ones used this many model tokens", positiveInt("--max-tokens"))
    .option("--trial-max-cost <usd>", "stop a task's model-driven agent once its model cost passes this many USD", positiveNumber("--trial-max-cost"))
    .addOption(new Option("--on-budget <what>", "at the batch budget, running tasks finish (default) or are stopped").choices(["finish", "stop"]))
    .option("--json", "print the final batch status as JSON", false)
    .action(async (archive: string, o) =>
      setExitCode(
        await (await import("./commands/submit")).submitCommand({
          archive,
          server: o.server,
          keyFile: o.keyFile,
          token: o.token,
          signedFor: o.signedFor,
          concurrentTasks: o.concurrentTasks,
          budget: { maxCostUsd: o.maxCost, maxTokens: o.maxTokens, trialMaxCostUsd: o.trialMaxCost, onBudget: o.onBudget },
          json: o.json,
          logger,
        }),
      ),
    );

  const serverOptions = (command: Command) =>
    command
      .requiredOption("--server <url>", "server base URL, e.g. http://127.0.0.1:8080")
      .option("--key-file <file>", "hotkey file (else $PROCTOR_HOTKEY_URI or $PROCTOR_HOTKEY_FILE)")
      .option("--token <token>", "bearer token instead of a hotkey (else $PROCTOR_TOKEN, or $PROCTOR_TOKENS when it holds one token, as the server reads it)")
      .option("--signed-for <ss58>", "the server's hotkey, when it requires Epistula-Signed-For")
      .option("--json", "print the batch status as JSON", false);
  serverOptions(program.command("status").description("a submitted batch's status and per-task results (exit 1 if it failed or was cancelled)").argument("<batch-id>"))
    .action(async (batchId: string, o) =>
      setExitCode(await (await import("./commands/batch")).statusCommand({ batchId, server: o.server, keyFile: o.keyFile, token: o.token, signedFor: o.signedFor, json: o.json, logger })),
    );
  serverOptions(program.command("receipt").description("a finished batch's signed receipt (GET /batch/:id/receipt), for proctor verify-receipt").argument("<batch-id>"))
    .option("-o, --out <file>", "write the receipt to FILE instead of stdout")
    .action(async (batchId: string, o) =>
      setExitCode(await (await import("./commands/batch")).receiptCommand({ batchId, out: o.out, server: o.server, keyFile: o.keyFile, token: o.token, signedFor: o.signedFor, logger })),
    );
  serverOptions(program.command("follow").description("follow a submitted batch live until it ends (reconnects without losing events), then print its results").argument("<batch-id>"))
    .option("--since <seq>", "only events after this sequence number (resume an earlier follow)", nonNegativeInt("--since"))
    .action(async (batchId: string, o) =>
      setExitCode(await (await import("./commands/batch")).followCommand({ batchId, since: o.since, server: o.server, keyFile: o.keyFile, token: o.token, signedFor: o.signedFor, json: o.json, logger })),
    );

  // `proctor slots <sub>`: the /v1/slots API of a running `proctor serve --slots`, by hand.
  const slots = program.command("slots").description("sandbox slots on a running `proctor serve --slots`: create, exec, put/get files, verify, rm, pool");
  const slotAction = (command: Command, action: (args: string[], o: Record<string, unknown>) => SlotsAction) =>
    command
      .requiredOption("--server <url>", "server base URL, e.g. http://127.0.0.1:8080")
      .option("--key-file <file>", "hotkey file (else $PROCTOR_HOTKEY_URI or $PROCTOR_HOTKEY_FILE)")
      .option("--token <token>", "bearer token instead of a hotkey (else $PROCTOR_TOKEN, or $PROCTOR_TOKENS when it holds one token, as the server reads it)")
      .option("--signed-for <ss58>", "the server's hotkey, when it requires Epistula-Signed-For")
      .action(async (...args: unknown[]) => {
        const o = args.at(-2) as Record<string, string | undefined>;
        const credentials = { server: o.server as string, keyFile: o.keyFile, token: o.token, signedFor: o.signedFor, logger };
        setExitCode(await (await import("./commands/slots")).slotsCommand({ ...credentials, ...action(args.slice(0, -2) as string[], o) }));
      });
  slotAction(
    slots.command("create").description("acquire a slot; prints its id").option("--image <image>", "the slot's image (default: the server's)").option("--task <id>", "a task or SWE instance of the server's --slots-tasks-dir (verify runs its tests)").option("--repo <name@commit>", "a repository of the server's --slots-repos-dir, checked out at COMMIT").option("--ttl <s>", "release the slot after this many seconds", positiveNumber("--ttl")).option("--json", "print the slot as JSON", false),
    (_, o) => ({ action: "create", image: o.image as string | undefined, task: o.task as string | undefined, repo: o.repo as string | undefined, ttlSec: o.ttl as number | undefined, json: Boolean(o.json) }),
  );
  slotAction(
    slots.command("exec").description("run a command in the slot's workdir, print its output as it comes; exits with its exit code (124: timed out)").argument("<id>").argument("[command...]", "argv after --").option("-c, --shell <string>", "a shell string (sh -c) instead of argv").option("--timeout <s>", "kill the command's process tree after this many seconds", positiveNumber("--timeout")).option("--cwd <dir>", "working directory (relative: in the slot's workdir)"),
    ([id, argv], o) => ({ action: "exec", id: id as string, argv: (argv as unknown as string[] | undefined) ?? [], shell: o.shell as string | undefined, timeoutSec: o.timeout as number | undefined, cwd: o.cwd as string | undefined }),
  );
  slotAction(slots.command("put").description("upload a local file to PATH in the slot").argument("<id>").argument("<local>").argument("<path>", "relative to the slot's workdir, or absolute"), ([id, local, path]) => ({ action: "put", id: id as string, local: local as string, path: path as string }));
  slotAction(slots.command("get").description("download PATH from the slot (to LOCAL, else stdout)").argument("<id>").argument("<path>").argument("[local]"), ([id, path, local]) => ({ action: "get", id: id as string, path: path as string, local }));
  slotAction(slots.command("verify").description("run the slot's task tests; prints the reward (and the per-test table of a SWE instance); exit 1 without a reward").argument("<id>").option("--json", "print the result as JSON", false), ([id], o) => ({ action: "verify", id: id as string, json: Boolean(o.json) }));
  slotAction(slots.command("rm").description("release the slot (reset: kill its processes, restore its workdir)").argument("<id>").option("--no-reset", "release without resetting"), ([id], o) => ({ action: "rm", id: id as string, reset: o.reset !== false }));
  slotAction(slots.command("pool").description("the server's slot pool: sandboxes, slots, busy, waiting, quarantined").option("--json", "print as JSON", false), (_, o) => ({ action: "pool", json: Boolean(o.json) }));

  program
    .command("verify-receipt")
    .description("check a server's signed batch receipt: its signature, and with --run-dir the hashes of results, summary, tasks and agent code")
    .argument("<receipt>", "the receipt file (GET /batch/:id/receipt, or receipt.json in the batch's directory)")
    .option("--run-dir <dir>", "compare the hashes with this batch directory's files")
    .option("--signer <ss58>", "require this SS58 address (the server's key) to have signed")
    .option("--json", "print the verification result as JSON", false)
    .action(async (receipt: string, o) =>
      setExitCode(await (await import("./commands/verify-receipt")).verifyReceiptCommand({ receipt, runDir: o.runDir, signer: o.signer, json: o.json })),
    );

  const images = program.command("images").description("task images (proctor-build/*): build them ahead of a run, list them, keep them under a disk budget (docs/images.md)");
  images
    .command("build")
    .description("build (or pull from the registry) every image the tasks need, -n at once; with a registry, push each; one line per image, then a summary; exit 1 when any failed")
    .argument("<source...>", "a task dir, a dir of task dirs, or an archive")
    .option("-i, --include <glob>", "only task ids matching (repeatable)", collect, [])
    .option("-x, --exclude <glob>", "skip task ids matching (repeatable)", collect, [])
    .option("-n, --concurrency <n>", "builds at once (default: one per CPU, at most one per 2 GB of memory)", positiveInt("--concurrency"))
    .option("--image-registry <host:port[/prefix]>", "pull from and push to this registry (default $PROCTOR_IMAGE_REGISTRY)")
    .option("--image-cache-gb <n>", "disk budget of task images (default $PROCTOR_IMAGE_CACHE_GB, else a quarter of the Docker data root's disk)", positiveNumber("--image-cache-gb"))
    .action(async (sources: string[], o) =>
      setExitCode(
        await (await import("./commands/images")).imagesBuildCommand({ sources, include: o.include, exclude: o.exclude, concurrency: o.concurrency, imageRegistry: o.imageRegistry, imageCacheGb: o.imageCacheGb, logger }),
      ),
    );
  images
    .command("ls")
    .description("Proctor's task images, least recently used first: own size, size, last use, in use, the tasks that used them")
    .option("--json", "print {budgetBytes, usageBytes, images} as JSON", false)
    .action(async (o: { json: boolean }) => setExitCode(await (await import("./commands/images")).imagesLsCommand({ json: o.json, logger })));
  images
    .command("prune")
    .description("remove the least recently used task images until the rest fit the budget; never one in use")
    .option("--dry-run", "list what would be removed, and remove nothing", false)
    .option("--image-cache-gb <n>", "the budget (default $PROCTOR_IMAGE_CACHE_GB, else a quarter of the Docker data root's disk)", positiveNumber("--image-cache-gb"))
    .action(async (o: { dryRun: boolean; imageCacheGb?: number }) => setExitCode(await (await import("./commands/images")).imagesPruneCommand({ dryRun: o.dryRun, imageCacheGb: o.imageCacheGb, logger })));

  program
    .command("gc")
    .description("remove containers, sandbox roots and temp dirs left behind by dead runs")
    .option("--dry-run", "list what would be removed, and remove nothing", false)
    .action(async (o: { dryRun: boolean }) => setExitCode(await (await import("./commands/gc")).gcCommand({ logger, dryRun: o.dryRun })));

  program
    .command("doctor")
    .description("print what Proctor found on this host (engine, images, fast paths, Redis, Chromium, cache dirs), one line each, with what to do; exit 1 when something is slow or missing")
    .option("-o, --out <dir>", "runs root directory to check", "runs")
    .option("--json", "print the findings as JSON", false)
    .action(async (o: { out: string; json: boolean }) => setExitCode(await (await import("./commands/doctor")).doctorCommand(o)));

  return program;
}

/** Run the CLI; returns the process exit code (one place maps errors to codes). */
export async function main(argv: string[]): Promise<number> {
  let code = 0;
  const program = buildProgram((c) => (code = c));
  try {
    await program.parseAsync(argv, { from: "user" });
    return code;
  } catch (error) {
    if (error instanceof CommanderError) {
      // --help and --version exit 0; everything else commander rejects is bad usage.
      return error.exitCode === 0 ? 0 : 2;
    }
    if (error instanceof CliError) {
      process.stderr.write(`proctor: ${error.message}\n`);
      return error.exitCode;
    }
    // Loaded on the error path only, so a command starts without loading the engine.
    const { explainKnownError } = await import("./known-errors");
    const known = explainKnownError(error);
    if (known) {
      process.stderr.write(`proctor: ${known.line}\n`);
      return known.code;
    }
    process.stderr.write(`proctor: unexpected error: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
    return 1;
  }
}

