import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, test } from "vitest";
import { AGENT_IMAGE_BUILD_ARGS, readImageAgent } from "./image";

const dirs: string[] = [];
afterAll(async () => {
  await Promise.all(dirs.map((dir) => rm(dir, { recursive: true, force: true })));
});

async function agentDir(files: Record<string, string>): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), "proctor-image-agent-"));
  dirs.push(dir);
  await mkdir(dir, { recursive: true });
  for (const [name, text] of Object.entries(files)) await writeFile(join(dir, name), text);
  return dir;
}

describe("image agents", () => {
  test("agent.toml gives name, start, env and build args; Proctor's build args always win", async () => {
    const dir = await agentDir({ Dockerfile: "FROM x\n", "agent.toml": 'name = "a"\nstart = "bash /home/agent/start.sh"\n[env]\nN = 3\n[build_args]\nPY = "3.11"\n' });
    expect(readImageAgent(dir)).toEqual({ name: "a", start: "bash /home/agent/start.sh", env: { N: "3" }, image: { buildContext: dir, buildArgs: { PY: "3.11", ...AGENT_IMAGE_BUILD_ARGS } } });
  });

  test("problems name the file and field", async () => {
    expect(() => readImageAgent(join(tmpdir(), "no-such-agent-dir"))).toThrow(/does not exist/);
    const noDockerfile = await agentDir({ "agent.toml": 'name = "a"\nstart = "x"\n' });
    expect(() => readImageAgent(noDockerfile)).toThrow(/has no Dockerfile/);
    const noStart = await agentDir({ Dockerfile: "FROM x\n", "agent.toml": 'name = "a"\n' });
    expect(() => readImageAgent(noStart)).toThrow(/agent\.toml: start: /);
    const reserved = await agentDir({ Dockerfile: "FROM x\n", "agent.toml": 'name = "a"\nstart = "x"\n[build_args]\nLOGS_DIR = "/tmp"\n' });
    expect(() => readImageAgent(reserved)).toThrow(/LOGS_DIR are set by Proctor/);
  });
});
