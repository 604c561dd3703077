import { afterAll, afterEach, beforeAll, describe, expect, test, vi } from "vitest";
import { existsSync } from "node:fs";
import { cp, mkdir, mkdtemp, readdir, rm, writeFile } from "node:fs/promises";
import { availableParallelism, tmpdir } from "node:os";
import { join } from "node:path";
import { ClientError } from "@proctor/client";
import { concurrencyWarning } from "./limits";
import { formatFields, stderrLogger } from "./logger";
import { parseAgent } from "./commands/run";
import { clientToken } from "./commands/submit";
import { explain } from "./commands/slots";
import { finish, listeningUrl, proctor, repoRoot, spawnProctor, type Finished } from "./test-support";

// What a newcomer (often from Harbor or Inspect) tried first, and the answer each now gets. The
// runs use the local runtime, and a temp dir of their own (TMPDIR), so their sandbox roots and
// reaping stay out of the host's /tmp.

const examples = join(repoRoot, "examples/tasks");
const TOKEN = "newcomer-token-0123456789abcdef";

let work: string;
let temp: string;
beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), "proctor-newcomer-"));
  temp = join(work, "tmp");
  await mkdir(temp);
});
afterAll(() => rm(work, { recursive: true, force: true }));
afterEach(() => {
  vi.unstubAllEnvs();
});

/** `proctor <args>` with this file's TMPDIR (and `env`); a variable set to undefined is left out. */
const run = (args: string[], env: Record<string, string | undefined> = {}) => proctor(args, { env: { TMPDIR: temp, ...env } as Record<string, string> });

/** Exactly one `proctor:` line on stderr (none doubled as `proctor: proctor ...`), no stack trace, the given exit code. */
function expectOneLine(r: Finished, code: number, ...mentions: (string | RegExp)[]): string {
  expect(r.code, r.stderr).toBe(code);
  const lines = r.stderr.split("\n").filter((l) => l.startsWith("proctor:"));
  expect(lines, r.stderr).toHaveLength(1);
  expect(r.stderr).not.toMatch(/^\s+at /m);
  expect(r.stderr).not.toMatch(/proctor: proctor /);
  for (const m of mentions) expect(lines[0]).toMatch(m);
  return lines[0] as string;
}

describe("Harbor's flags", () => {
  test("--n-concurrent and --n-attempts stand for -n and -k (hidden from --help); -m is --model; Harbor's --path gets a line naming what Proctor takes", async () => {
    const r = await run(["run", examples, "-i", "greeting-file", "--runtime", "local", "-o", work, "--n-concurrent", "2", "--n-attempts", "2", "--json"]);
    expect(r.code, r.stderr).toBe(0);
    expect(JSON.parse(r.stdout).trials).toMatchObject({ total: 2, passed: 2 });
    expect(r.stderr).toMatch(/run \S+: 1 tasks x 2 attempts on local, concurrency 2\n/);

    const disagree = await run(["run", examples, "-o", work, "-n", "3", "--n-concurrent", "5"]);
    expectOneLine(disagree, 2, "--concurrency 3 and --n-concurrent 5 (Harbor's name for it) disagree");

    const help = await run(["run", "--help"]);
    expect(help.stdout).toContain("-m, --model <name>");
    expect(help.stdout).not.toContain("--n-concurrent");

    // -m is --model: with an agent that takes none it is refused as --model is.
    const m = await run(["run", examples, "--runtime", "local", "-o", work, "--agent", "nop", "-m", "gpt-4o"]);
    expectOneLine(m, 2, /^proctor: --model goes with an agent that takes a model \(--agent llm, claude-code, codex, installed:<dir>, or a code agent's directory with --llm-proxy\); --agent nop takes no model$/);

    const path = await run(["run", "--path", "tasks"]);
    expectOneLine(path, 2, "unknown option '--path' (Harbor's --path? Proctor takes the tasks as arguments: proctor run <task dir");
  });

  test("a typo'd --agent names the nearest agent and every kind there is; a file names the directory holding it; nothing is run", async () => {
    const kinds = "(--agent takes oracle, nop, llm, claude-code[@VER], codex[@VER], installed:<dir>[@VER], patches:<file>, image:<dir>, or a code agent's directory)";
    for (const [typo, meant] of [["claude", "claude-code"], ["codx", "codex"], ["orcale", "oracle"]] as const) {
      const r = await run(["run", examples, "--runtime", "local", "-o", join(work, "typo"), "--agent", typo]);
      expectOneLine(r, 2, `--agent ${typo}: no such agent, and no such directory; did you mean --agent ${meant}? ${kinds}`);
    }
    const path = await run(["run", examples, "--runtime", "local", "-o", join(work, "typo"), "--agent", "./no/such/agent"]);
    expect(expectOneLine(path, 2, kinds)).not.toContain("did you mean");

    const script = join(repoRoot, "examples/agents/scripted-solver/run.sh");
    const file = await run(["run", examples, "--runtime", "local", "-o", join(work, "typo"), "--agent", script]);
    expectOneLine(file, 2, `--agent ${script} is a file: name the directory holding it (--agent ${join(repoRoot, "examples/agents/scripted-solver")})`);
    expect(existsSync(join(work, "typo")), "a refused run leaves no run directory").toBe(false);
  });
});

describe("--agent llm: the model's provider and its key", () => {
  test("--model provider/name picks the provider's endpoint and key variable when --base-url is not given; a plain name and a given --base-url are as before", () => {
    vi.stubEnv("OPENAI_BASE_URL", "");
    vi.stubEnv("OPENAI_API_KEY", "k");
    vi.stubEnv("ANTHROPIC_API_KEY", "k");
    vi.stubEnv("OPENROUTER_API_KEY", "k");
    expect(parseAgent("llm", null, { model: "openai/gpt-4o" })).toEqual({ kind: "llm", model: "gpt-4o", baseUrl: "https://api.openai.com/v1", apiKeyEnv: "OPENAI_API_KEY" });
    expect(parseAgent("llm", null, { model: "anthropic/claude-sonnet-4-5" })).toEqual({ kind: "llm", model: "claude-sonnet-4-5", baseUrl: "https://api.anthropic.com/v1", apiKeyEnv: "ANTHROPIC_API_KEY" });
    expect(parseAgent("llm", null, { model: "openrouter/meta-llama/llama-3.3-70b-instruct" })).toEqual({ kind: "llm", model: "meta-llama/llama-3.3-70b-instruct", baseUrl: "https://openrouter.ai/api/v1", apiKeyEnv: "OPENROUTER_API_KEY" });
    // --api-key-env still names the variable; --base-url (README's OpenRouter command) sends the name as given.
    vi.stubEnv("MY_KEY", "k");
    expect(parseAgent("llm", null, { model: "openai/gpt-4o", apiKeyEnv: "MY_KEY" })).toMatchObject({ model: "gpt-4o", baseUrl: "https://api.openai.com/v1", apiKeyEnv: "MY_KEY" });
    expect(parseAgent("llm", null, { model: "anthropic/claude-sonnet-4", baseUrl: "https://openrouter.ai/api/v1", apiKeyEnv: "OPENROUTER_API_KEY" })).toMatchObject({ model: "anthropic/claude-sonnet-4", baseUrl: "https://openrouter.ai/api/v1" });
    // A plain name, a name of another org (Hugging Face style) and $OPENAI_BASE_URL (a vLLM server) are unchanged.
    expect(parseAgent("llm", null, { model: "gpt-4.1-mini" })).toEqual({ kind: "llm", model: "gpt-4.1-mini", baseUrl: "https://api.openai.com/v1", apiKeyEnv: "OPENAI_API_KEY" });
    vi.stubEnv("OPENAI_BASE_URL", "http://127.0.0.1:8000/v1");
    expect(parseAgent("llm", null, { model: "openai/gpt-oss-20b" })).toMatchObject({ model: "openai/gpt-oss-20b", baseUrl: "http://127.0.0.1:8000/v1" });
    expect(parseAgent("llm", null, { model: "Qwen/Qwen3-8B", baseUrl: "http://127.0.0.1:8000/v1" })).toMatchObject({ model: "Qwen/Qwen3-8B", baseUrl: "http://127.0.0.1:8000/v1" });
  });

  test("the run's first lines say which endpoint and key variable --model provider/name picked", async () => {
    // No Docker answers at DOCKER_HOST: the run stops (exit 3) after its first lines, before any model request.
    const r = await run(["run", examples, "-i", "greeting-file", "--runtime", "docker", "-o", work, "--agent", "llm", "-m", "anthropic/claude-sonnet-4-5"], {
      DOCKER_HOST: `unix://${join(work, "no-docker.sock")}`,
      ANTHROPIC_API_KEY: "sk-test-not-a-key",
      OPENAI_BASE_URL: "",
    });
    expect(r.code, r.stderr).toBe(3);
    const [agent, model] = r.stderr.split("\n");
    expect(agent).toBe("agent: llm, model claude-sonnet-4-5 at https://api.anthropic.com/v1");
    expect(model).toBe("model: --model anthropic/claude-sonnet-4-5 picked Anthropic's OpenAI-compatible endpoint at https://api.anthropic.com/v1, the key in $ANTHROPIC_API_KEY, and sends the model as claude-sonnet-4-5 (--base-url and --api-key-env pick others)");
  });

  test("an unset default key variable is refused before any trial, naming it, as an unset --api-key-env is; a server of your own may still take none", async () => {
    const out = join(work, "no-key");
    const openai = await run(["run", examples, "--runtime", "local", "-o", out, "--agent", "llm", "--model", "gpt-4o"], { OPENAI_API_KEY: "", OPENAI_BASE_URL: "" });
    expectOneLine(openai, 2, "$OPENAI_API_KEY is not set, and the model requests go to https://api.openai.com/v1, which needs a key: export OPENAI_API_KEY, name the variable holding it with --api-key-env VAR, or point --base-url at a server that takes none");
    const anthropic = await run(["run", examples, "--runtime", "local", "-o", out, "--agent", "llm", "-m", "anthropic/claude-sonnet-4-5"], { ANTHROPIC_API_KEY: "", OPENAI_BASE_URL: "" });
    expectOneLine(anthropic, 2, "$ANTHROPIC_API_KEY is not set, and --model anthropic/claude-sonnet-4-5 goes to Anthropic's OpenAI-compatible endpoint at https://api.anthropic.com/v1, which needs a key");
    expect(existsSync(out), "a refused run leaves no run directory").toBe(false);

    vi.stubEnv("OPENAI_API_KEY", "");
    vi.stubEnv("OPENAI_BASE_URL", "");
    expect(parseAgent("llm", null, { model: "Qwen/Qwen3-8B", baseUrl: "http://127.0.0.1:8000/v1" })).toMatchObject({ apiKeyEnv: "OPENAI_API_KEY" });
  });
});

describe("-n larger than the host holds", () => {
  test("on a 2-core host, -n 100000 gets one line with the CPUs and memory against the limits per trial; the default -n and -n the host holds get none", () => {
    const host = { cpus: 2, memoryMb: 8192 };
    expect(concurrencyWarning(100000, 400, { cpus: 1, memoryMb: 2048 }, host)).toBe(
      "warning: -n 100000: 400 trials would run at once (all of the run's 400 trials), but this host holds about 2 at 1 CPU and 2048 MB per trial (2 CPUs: 2; 8192 MB memory: 4); past that, trials share CPUs and memory, run slower and may time out or run out of memory. Going on (-n 2 fits)",
    );
    expect(concurrencyWarning(100000, 400, { memoryMb: 1024 }, { cpus: 16, memoryMb: 4096 })).toContain("this host holds about 4 at 1 CPU (no CPU limit) and 1024 MB per trial (16 CPUs: 16; 4096 MB memory: 4)");
    expect(concurrencyWarning(4, 400, { cpus: 1, memoryMb: 2048 }, host)).toBeNull();
    expect(concurrencyWarning(100000, 2, { cpus: 1, memoryMb: 2048 }, host)).toBeNull();
  });

  test("proctor run -n 100000 warns once on stderr and runs", async () => {
    // One trial per host: every CPU for each trial.
    const r = await run(["run", examples, "-i", "greeting-file", "-k", "2", "-n", "100000", "--cpus", String(availableParallelism()), "--runtime", "local", "-o", work, "--json"]);
    expect(r.code, r.stderr).toBe(0);
    const warnings = r.stderr.split("\n").filter((l) => l.startsWith("warning: -n"));
    expect(warnings, r.stderr).toHaveLength(1);
    expect(warnings[0]).toMatch(new RegExp(`^warning: -n 100000: 2 trials would run at once \\(all of the run's 2 trials\\), but this host holds about 1 at ${availableParallelism()} CPUs? and 2048 MB per trial \\(${availableParallelism()} CPUs?: 1; \\d+ MB memory: \\d+\\);`));
    expect(JSON.parse(r.stdout).trials).toMatchObject({ total: 2, passed: 2 });
  });
});

describe("log lines", () => {
  test("fields are words (id=... exitCode=126), not a JSON object", () => {
    expect(formatFields({ id: "abc", exitCode: 126 })).toBe(" id=abc exitCode=126");
    expect(formatFields({ path: "/tmp/a b", empty: "", skipped: undefined, ok: true, none: null, list: [1, 2], nested: { a: 1 } })).toBe(' path="/tmp/a b" empty="" ok=true none=null list=[1,2] nested={"a":1}');
    expect(formatFields({})).toBe("");
    const written: string[] = [];
    const spy = vi.spyOn(process.stderr, "write").mockImplementation((chunk) => (written.push(String(chunk)), true));
    try {
      stderrLogger(false).warn("sandbox exec failed", { id: "sbx-1", exitCode: 126 });
    } finally {
      spy.mockRestore();
    }
    expect(written).toEqual(["warning: sandbox exec failed id=sbx-1 exitCode=126\n"]);
  });

  test("a local run's warning ends in words", async () => {
    const r = await run(["run", examples, "-i", "greeting-file", "--runtime", "local", "-o", work]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).toContain(`warning: local runtime: cpus, memory, pids and network limits are not enforced; commands run as host processes rootDir=${temp}\n`);
    expect(r.stderr).not.toMatch(/\{"/);
    expect(r.stderr).not.toContain("builds no images");
  });

  test("a local run of a task with an environment/Dockerfile says the image is not built", async () => {
    const tasks = join(work, "dockerfile-tasks");
    await cp(join(examples, "greeting-file"), join(tasks, "greeting-file"), { recursive: true });
    await mkdir(join(tasks, "greeting-file", "environment"));
    await writeFile(join(tasks, "greeting-file", "environment", "Dockerfile"), "FROM proctor/base:bookworm\nRUN apt-get install -y cowsay\n");
    const r = await run(["run", tasks, "--runtime", "local", "-o", work]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).toContain("warning: the local runtime builds no images: 1 task(s) with an environment/Dockerfile (greeting-file) run on this host as it is; --runtime docker builds them\n");
  });
});

describe("one prefix per message", () => {
  test("a missing source, an unknown option: `proctor:` once", async () => {
    expectOneLine(await run(["run"]), 2, /^proctor: give at least one task source: proctor run <source>\.\.\./);
    expectOneLine(await run(["tasks", "list"]), 2, /^proctor: /);
    expectOneLine(await run(["run", examples, "--bogus"]), 2, /^proctor: unknown option '--bogus'$/);
  });

  test("a deleted slot says so once", () => {
    const error = explain(new ClientError(404, "not_found", "POST /v1/slots/s-1/exec: 404 no slot s-1"), "http://127.0.0.1:8080", "s-1");
    expect(error.message).toBe("POST /v1/slots/s-1/exec: 404 no slot s-1; it was released, or the server at http://127.0.0.1:8080 restarted: create one with proctor slots create");
  });
});

describe("proctor serve and its clients", () => {
  test("serve with no flags and no hotkeys says --auth token is the other way, in the same line", async () => {
    const r = await run(["serve", "--runtime", "local", "--unsafe-local-runtime", "--port", "0", "--data-dir", join(work, "data-none")], { PROCTOR_HOTKEYS: undefined, PROCTOR_HOTKEYS_FILE: undefined });
    expectOneLine(r, 2, "no hotkey allowlist configured", "or serve bearer tokens instead: export PROCTOR_TOKENS=$(openssl rand -hex 32) and pass --auth token");
  });

  test("the README's `export PROCTOR_TOKENS=...` signs the client in too (one token, PROCTOR_TOKEN unset); PROCTOR_TOKEN still wins", async () => {
    expect(clientToken(undefined, { PROCTOR_TOKENS: "a" })).toBe("a");
    expect(clientToken(undefined, { PROCTOR_TOKENS: "a", PROCTOR_TOKEN: "b" })).toBe("b");
    expect(clientToken("c", { PROCTOR_TOKENS: "a", PROCTOR_TOKEN: "b" })).toBe("c");
    expect(clientToken(undefined, { PROCTOR_TOKENS: "a,b" })).toBeUndefined();
    expect(clientToken(undefined, { PROCTOR_TOKENS: "sha256:00ff" })).toBeUndefined();

    const server = spawnProctor(["serve", "--port", "0", "--auth", "token", "--runtime", "local", "--unsafe-local-runtime", "--data-dir", join(work, "data-token")], { PROCTOR_TOKENS: TOKEN, TMPDIR: temp });
    try {
      const url = await listeningUrl(server);
      const shell = { PROCTOR_TOKENS: TOKEN, PROCTOR_TOKEN: "", PROCTOR_HOTKEY_URI: "", PROCTOR_HOTKEY_FILE: "" };
      // Signed in: the server answers the request itself (no such batch), not 401 or "no credentials".
      const r = await run(["status", "b1", "--server", url], shell);
      expectOneLine(r, 1, /404 no batch with id "b1"/);
      expect(r.stderr).not.toContain(TOKEN);
      const several = await run(["status", "b1", "--server", url], { ...shell, PROCTOR_TOKENS: `${TOKEN},other-token-0123456789` });
      expectOneLine(several, 2, "no credentials", "$PROCTOR_TOKENS holds several tokens: pick yours with --token or PROCTOR_TOKEN");
    } finally {
      const closed = finish(server);
      server.kill("SIGTERM");
      await closed;
    }
    expect((await readdir(temp)).filter((name) => name.startsWith("proctor-sbx-"))).toEqual([]);
  });
});
