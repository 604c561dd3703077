import { existsSync, readFileSync, statSync } from "node:fs";
import { join, resolve } from "node:path";
import { SANDBOX_PATHS } from "@proctor/sandbox";
import { parse as parseToml } from "smol-toml";
import { z } from "zod";
import { execLogged, toRunResult } from "./capture";
import { AgentConfigError, AgentSetupError } from "./errors";
import type { Agent, AgentContext } from "./types";

/** How a code agent is started, found in its directory. */
export interface Entrypoint {
  /** Shell string run by /bin/sh in the task's workdir. */
  command: string;
  /** Shell string run once before `command` (e.g. installing packages), or null. */
  setup: string | null;
  /** What the entrypoint came from: "agent.toml" or the file name that was found. */
  source: string;
}

/** Files looked for, in order, when there is no agent.toml. */
export const ENTRYPOINT_FILES: readonly { file: string; interpreter: string }[] = [
  { file: "run.sh", interpreter: "bash" },
  { file: "agent.py", interpreter: "python3" },
  { file: "main.py", interpreter: "python3" },
  { file: "agent.js", interpreter: "node" },
  { file: "index.js", interpreter: "node" },
];

const AgentToml = z.object({
  entrypoint: z.string().trim().min(1),
  setup: z.string().trim().min(1).optional(),
});

/** The sandbox path of the agent directory, as a shell expression that works on every runtime. */
const AGENT_DIR_EXPR = `\${PROCTOR_AGENT_DIR:-${SANDBOX_PATHS.agent}}`;

/** Env vars above this size are left out (Linux caps one env string at 128 KiB). */
const MAX_INSTRUCTION_ENV_BYTES = 96 * 1024;

/**
 * Find how to start the agent in `dir`: agent.toml's `entrypoint` (and optional `setup`),
 * else the first of run.sh, agent.py, main.py, agent.js, index.js.
 * Throws AgentConfigError naming the directory and what was looked for.
 */
export function resolveEntrypoint(dir: string): Entrypoint {
  const abs = resolve(dir);
  if (!existsSync(abs) || !statSync(abs).isDirectory()) {
    throw new AgentConfigError(`agent directory ${abs} does not exist or is not a directory`, abs);
  }
  const tomlPath = join(abs, "agent.toml");
  if (existsSync(tomlPath)) {
    let raw: unknown;
    try {
      raw = parseToml(readFileSync(tomlPath, "utf8"));
    } catch (error) {
      throw new AgentConfigError(`${tomlPath}: not valid TOML: ${(error as Error).message}`, tomlPath, { cause: error });
    }
    const parsed = AgentToml.safeParse(raw);
    if (!parsed.success) {
      const issues = parsed.error.issues.map((i) => `${i.path.join(".") || "(root)"}: ${i.message}`).join("; ");
      throw new AgentConfigError(
        `${tomlPath}: ${issues} (expected entrypoint = "<shell command>" and optionally setup = "<shell command>")`,
        tomlPath,
      );
    }
    return { command: parsed.data.entrypoint, setup: parsed.data.setup ?? null, source: "agent.toml" };
  }
  for (const { file, interpreter } of ENTRYPOINT_FILES) {
    if (existsSync(join(abs, file))) {
      return { command: `${interpreter} "${AGENT_DIR_EXPR}/${file}"`, setup: null, source: file };
    }
  }
  const names = ["agent.toml", ...ENTRYPOINT_FILES.map((e) => e.file)].join(", ");
  throw new AgentConfigError(`agent directory ${abs} has no entrypoint: add one of ${names}`, abs);
}

/** Shell prologue that exports the agent's environment, resolved inside the sandbox. */
function prologue(): string {
  return [
    `export PROCTOR_WORKDIR="$PWD"`,
    `export REPO_DIR="$PWD"`,
    `export PROCTOR_INSTRUCTION_FILE="\${PROCTOR_AGENT_LOGS_DIR:-${SANDBOX_PATHS.agentLogs}}/instruction.md"`,
    `export TASK_PROMPT="$PROCTOR_INSTRUCTION_FILE"`,
  ].join("\n");
}

function agentEnv(ctx: AgentContext): Record<string, string> {
  const env: Record<string, string> = { ...ctx.env, PROCTOR_DEADLINE_MS: String(ctx.deadlineMs) };
  if (Buffer.byteLength(ctx.task.instruction) <= MAX_INSTRUCTION_ENV_BYTES) {
    env.PROCTOR_INSTRUCTION = ctx.task.instruction;
  } else {
    ctx.logger?.warn("instruction too large for an env var; PROCTOR_INSTRUCTION left out, read PROCTOR_INSTRUCTION_FILE", {
      taskId: ctx.task.id,
      bytes: Buffer.byteLength(ctx.task.instruction),
    });
  }
  return env;
}

/**
 * An agent given as a host directory: uploaded to /agent, started by its entrypoint in the
 * task's workdir with PROCTOR_INSTRUCTION, PROCTOR_INSTRUCTION_FILE, PROCTOR_WORKDIR,
 * PROCTOR_DEADLINE_MS, TASK_PROMPT (the instruction file) and REPO_DIR (the workdir), plus
 * `ctx.env` (the model proxy's OPENAI_BASE_URL / OPENAI_API_KEY when the run has one).
 * Throws AgentConfigError at once when the directory has no entrypoint.
 */
export function codeAgent(dir: string): Agent {
  const hostDir = resolve(dir);
  const entry = resolveEntrypoint(hostDir);
  return {
    name: `code:${hostDir}`,
    async setup(ctx) {
      await ctx.sandbox.upload(hostDir, SANDBOX_PATHS.agent);
      await ctx.sandbox.writeFile(`${SANDBOX_PATHS.agentLogs}/instruction.md`, ctx.task.instruction);
      if (!entry.setup) return;
      const result = await execLogged(ctx, { shell: `${prologue()}\n${entry.setup}` }, { env: agentEnv(ctx), prefix: "setup-" });
      if (result.timedOut || result.aborted || result.exitCode !== 0) {
        const how = result.timedOut ? "timed out" : result.aborted ? "was aborted" : `exited with ${result.exitCode}`;
        const tail = result.stderr.trim().split("\n").slice(-5).join("\n");
        throw new AgentSetupError(
          `agent setup (agent.toml setup = ${JSON.stringify(entry.setup)}) ${how}${tail ? `: ${tail}` : ""}`,
          result.timedOut || result.aborted ? null : result.exitCode,
          result.timedOut,
        );
      }
    },
    async run(ctx) {
      const result = await execLogged(ctx, { shell: `${prologue()}\n${entry.command}` }, { env: agentEnv(ctx) });
      return toRunResult(result);
    },
  };
}
