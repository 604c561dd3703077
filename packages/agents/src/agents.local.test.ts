import { mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { LocalRuntime, type Sandbox } from "@proctor/sandbox";
import type { TaskSpec } from "@proctor/schema";
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, test } from "vitest";
import { execLogged } from "./capture";
import { createAgent } from "./create";
import { AgentSetupError, MissingSolutionError } from "./errors";
import { testContext, testTask } from "./test-support";
import type { AgentContext } from "./types";

let root: string;
let runtime: LocalRuntime;
let sandbox: Sandbox;
let logDir: string;

const task = (overrides: Partial<TaskSpec> = {}): TaskSpec => testTask({ sourcePath: root, instruction: "Say \"hello\" & mean it.\nSecond line.", ...overrides });

function context(t: TaskSpec, timeoutMs = 30_000): AgentContext {
  return testContext(sandbox, t, logDir, timeoutMs);
}

async function agentDir(files: Record<string, string>): Promise<string> {
  const dir = await mkdtemp(join(root, "agent-"));
  for (const [name, content] of Object.entries(files)) await writeFile(join(dir, name), content);
  return dir;
}

beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), "proctor-agents-"));
  await mkdir(join(root, "sandboxes"));
  runtime = new LocalRuntime({ rootDir: join(root, "sandboxes") });
});
afterAll(() => rm(root, { recursive: true, force: true }));
beforeEach(async () => {
  sandbox = await runtime.create({ image: "local" });
  logDir = await mkdtemp(join(root, "logs-"));
});
afterEach(() => sandbox.kill());

describe("code agent", () => {
  test("runs run.sh in the workdir with the instruction, its file, the workdir and the deadline", async () => {
    const dir = await agentDir({
      "run.sh": [
        'printf "%s" "$PROCTOR_INSTRUCTION" > "$PROCTOR_WORKDIR/env.txt"',
        'cp "$PROCTOR_INSTRUCTION_FILE" file.txt',
        'echo "$TASK_PROMPT|$REPO_DIR|$PROCTOR_WORKDIR|$(pwd)|$PROCTOR_DEADLINE_MS"',
        "echo to-stderr >&2; exit 3",
      ].join("\n"),
    });
    const agent = createAgent({ kind: "code", dir });
    const ctx = context(task());
    await agent.setup?.(ctx);
    const result = await agent.run(ctx);
    expect(result).toMatchObject({ exitCode: 3, timedOut: false, outputTruncated: false });
    expect(await sandbox.readFile("/app/env.txt")).toEqual(Buffer.from(task().instruction));
    expect(await sandbox.readFile("/app/file.txt")).toEqual(Buffer.from(task().instruction));
    const [prompt, repo, workdir, cwd, deadline] = (await readFile(join(logDir, "stdout.txt"), "utf8")).trim().split("|");
    expect(prompt).toMatch(/\/logs\/agent\/instruction\.md$/);
    expect(repo).toBe(workdir);
    expect(cwd).toBe(workdir);
    expect(workdir).toMatch(/\/app$/);
    expect(Number(deadline)).toBe(ctx.deadlineMs);
    expect(await readFile(join(logDir, "stderr.txt"), "utf8")).toBe("to-stderr\n");
  });

  test("agent.toml: setup runs first; a failing setup throws AgentSetupError with its exit code", async () => {
    const ok = await agentDir({ "agent.toml": 'setup = "echo prepared > $PROCTOR_WORKDIR/setup.txt"\nentrypoint = "cat setup.txt"\n' });
    const agent = createAgent({ kind: "code", dir: ok });
    const ctx = context(task());
    await agent.setup?.(ctx);
    expect((await agent.run(ctx)).exitCode).toBe(0);
    expect(await readFile(join(logDir, "stdout.txt"), "utf8")).toBe("prepared\n");

    const bad = await agentDir({ "agent.toml": 'setup = "echo missing-dependency >&2; exit 7"\nentrypoint = "true"\n' });
    const failing = createAgent({ kind: "code", dir: bad });
    const error = await failing.setup?.(context(task())).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(AgentSetupError);
    expect(error).toMatchObject({ exitCode: 7, timedOut: false });
    expect((error as Error).message).toMatch(/exited with 7: missing-dependency/);
  });

  test("agent.py runs with python3, and a timeout stops it", async () => {
    const dir = await agentDir({ "agent.py": "import time, os\nprint('started', flush=True)\ntime.sleep(30)\n" });
    const agent = createAgent({ kind: "code", dir });
    // Long enough for python3 to start and print on a loaded machine; the sleep outlasts it.
    const ctx = context(task(), 8000);
    await agent.setup?.(ctx);
    const result = await agent.run(ctx);
    expect(result).toMatchObject({ timedOut: true, exitCode: null });
    expect(await readFile(join(logDir, "stdout.txt"), "utf8")).toBe("started\n");
  });
});

describe("oracle and nop", () => {
  test("the oracle uploads the solution and runs its command in the workdir", async () => {
    const solution = await agentDir({ "solve.sh": 'echo solved > answer.txt; ls "$PROCTOR_SOLUTION_DIR"' });
    const agent = createAgent({ kind: "oracle" });
    const ctx = context(task({ solution: { dir: solution, command: 'bash "$PROCTOR_SOLUTION_DIR/solve.sh"' } }));
    await agent.setup?.(ctx);
    expect((await agent.run(ctx)).exitCode).toBe(0);
    expect((await sandbox.readFile("/app/answer.txt"))?.toString()).toBe("solved\n");
    expect(await readFile(join(logDir, "stdout.txt"), "utf8")).toBe("solve.sh\n");
  });

  test("the oracle refuses a task without a solution", async () => {
    await expect(createAgent({ kind: "oracle" }).setup?.(context(task()))).rejects.toBeInstanceOf(MissingSolutionError);
  });

  test("nop touches nothing", async () => {
    const result = await createAgent({ kind: "nop" }).run(context(task()));
    expect(result).toMatchObject({ exitCode: 0, timedOut: false });
    expect(await sandbox.readFile("/logs/agent/instruction.md")).toBeNull();
  });
});

test("execLogged caps each log file", async () => {
  const result = await execLogged(context(task()), { shell: "head -c 5000 /dev/zero | tr '\\0' x" }, { capBytes: 1000 });
  expect(result.outputTruncated).toBe(true);
  const out = await readFile(join(logDir, "stdout.txt"), "utf8");
  expect(out.startsWith("x".repeat(1000) + "\n[proctor: output cut at 1000 bytes]")).toBe(true);
});
