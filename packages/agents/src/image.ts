import { existsSync, readFileSync, statSync } from "node:fs";
import { join, resolve } from "node:path";
import { parse as parseToml } from "smol-toml";
import { z } from "zod";
import { execLogged, toRunResult } from "./capture";
import { AgentConfigError } from "./errors";
import type { Agent, AgentContext } from "./types";

/** Build args every agent image gets (MLE-bench's names); agent.toml [build_args] cannot change them. */
export const AGENT_IMAGE_BUILD_ARGS = Object.freeze({
  SUBMISSION_DIR: "/home/submission",
  LOGS_DIR: "/home/logs",
  CODE_DIR: "/home/code",
  AGENT_DIR: "/home/agent",
});

/** The image an agent brings: built from `buildContext` with `buildArgs`; the trial's sandbox is made from it. */
export interface AgentImage {
  buildContext: string;
  buildArgs: Record<string, string>;
  /**
   * agent.toml `privileged = true` (MLE-bench's per-agent flag, e.g. for Docker-in-Docker): the
   * agent's sandbox runs privileged, which the runtime refuses before any trial unless
   * I_ACCEPT_RUNNING_PRIVILEGED_CONTAINERS=True.
   */
  privileged?: true;
}

const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;
const Scalar = z.union([z.string(), z.number(), z.boolean()]).transform(String);
const ImageAgentToml = z.object({
  name: z.string().trim().min(1),
  start: z.string().trim().min(1),
  env: z.record(z.string().regex(ENV_NAME, "env names are letters, digits and _"), Scalar).default({}),
  build_args: z.record(z.string().regex(ENV_NAME, "build arg names are letters, digits and _"), Scalar).default({}),
  privileged: z.boolean().default(false),
}).strict();

export interface ImageAgentConfig {
  name: string;
  /** Shell string run in the sandbox (the image's USER, cwd AGENT_DIR) as the agent. */
  start: string;
  env: Record<string, string>;
  image: AgentImage;
}

/** Reads `<dir>/agent.toml` and checks `<dir>/Dockerfile`; throws AgentConfigError naming the file and field. */
export function readImageAgent(dir: string): ImageAgentConfig {
  const abs = resolve(dir);
  if (!existsSync(abs) || !statSync(abs).isDirectory()) throw new AgentConfigError(`agent image directory ${abs} does not exist or is not a directory`, abs);
  if (!existsSync(join(abs, "Dockerfile"))) throw new AgentConfigError(`agent image directory ${abs} has no Dockerfile: an image agent is built from <dir>/Dockerfile`, abs);
  const tomlPath = join(abs, "agent.toml");
  if (!existsSync(tomlPath)) throw new AgentConfigError(`${tomlPath} is missing: an image agent needs name = "..." and start = "<command>"`, tomlPath);
  let raw: unknown;
  try {
    raw = parseToml(readFileSync(tomlPath, "utf8"));
  } catch (error) {
    throw new AgentConfigError(`${tomlPath}: not valid TOML: ${(error as Error).message.split("\n")[0]}`, tomlPath, { cause: error });
  }
  const parsed = ImageAgentToml.safeParse(raw);
  if (!parsed.success) {
    const issues = parsed.error.issues.map((i) => `${i.path.join(".") || "(root)"}: ${i.message}`).join("; ");
    throw new AgentConfigError(`${tomlPath}: ${issues} (expected name, start, optional privileged = true|false, and optional [env] and [build_args] tables)`, tomlPath);
  }
  const { name, start, env, build_args: buildArgs, privileged } = parsed.data;
  const reserved = Object.keys(buildArgs).filter((key) => key in AGENT_IMAGE_BUILD_ARGS);
  if (reserved.length > 0) throw new AgentConfigError(`${tomlPath}: [build_args] ${reserved.join(", ")} are set by Proctor and cannot be overridden`, tomlPath);
  return { name, start, env, image: { buildContext: abs, buildArgs: { ...buildArgs, ...AGENT_IMAGE_BUILD_ARGS }, ...(privileged ? { privileged: true as const } : {}) } };
}

/**
 * An agent shipped as a Docker image (MLE-bench style): the engine builds `<dir>/Dockerfile`
 * with the AGENT_IMAGE_BUILD_ARGS (cached by content hash) and makes the trial's sandbox from it;
 * `run` starts agent.toml's `start` command as the image's user in AGENT_DIR, with its [env],
 * the build args' dirs and the instruction, under the agent timeout.
 */
export function imageAgent(dir: string): Agent & { image: AgentImage } {
  const config = readImageAgent(dir);
  return {
    name: `image:${config.name}`,
    image: config.image,
    async run(ctx: AgentContext) {
      const env: Record<string, string> = {
        ...config.env,
        ...AGENT_IMAGE_BUILD_ARGS,
        ...ctx.env,
        PROCTOR_DEADLINE_MS: String(ctx.deadlineMs),
        PROCTOR_TIMEOUT_SEC: String(Math.max(1, Math.floor(ctx.timeoutMs / 1000))),
      };
      return toRunResult(await execLogged(ctx, { shell: config.start }, { env, cwd: AGENT_IMAGE_BUILD_ARGS.AGENT_DIR }));
    },
  };
}
