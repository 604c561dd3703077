import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, test } from "vitest";
import { codeAgent, resolveEntrypoint } from "./code";
import { createAgent } from "./create";
import { AgentConfigError } from "./errors";

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), "proctor-agent-"));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe("resolveEntrypoint", () => {
  test("agent.toml entrypoint and setup win over files", async () => {
    await writeFile(join(dir, "agent.toml"), 'entrypoint = "python3 $PROCTOR_AGENT_DIR/x.py"\nsetup = "pip install foo"\n');
    await writeFile(join(dir, "run.sh"), "echo hi\n");
    expect(resolveEntrypoint(dir)).toEqual({ command: "python3 $PROCTOR_AGENT_DIR/x.py", setup: "pip install foo", source: "agent.toml" });
  });

  test("files are found in order: run.sh before agent.py before index.js", async () => {
    await writeFile(join(dir, "index.js"), "");
    expect(resolveEntrypoint(dir).command).toBe('node "${PROCTOR_AGENT_DIR:-/agent}/index.js"');
    await writeFile(join(dir, "agent.py"), "");
    expect(resolveEntrypoint(dir).command).toBe('python3 "${PROCTOR_AGENT_DIR:-/agent}/agent.py"');
    await writeFile(join(dir, "run.sh"), "");
    expect(resolveEntrypoint(dir)).toMatchObject({ command: 'bash "${PROCTOR_AGENT_DIR:-/agent}/run.sh"', source: "run.sh", setup: null });
  });

  test("no entrypoint names the directory and every name looked for", async () => {
    await writeFile(join(dir, "README.md"), "");
    expect(() => createAgent({ kind: "code", dir })).toThrow(AgentConfigError);
    expect(() => resolveEntrypoint(dir)).toThrow(new RegExp(`${dir}.*agent.toml, run.sh, agent.py, main.py, agent.js, index.js`));
  });

  test("agent.toml without an entrypoint, or broken TOML, says which file and field", async () => {
    await writeFile(join(dir, "agent.toml"), 'setup = "x"\n');
    expect(() => codeAgent(dir)).toThrow(/agent\.toml: entrypoint/);
    await writeFile(join(dir, "agent.toml"), "entrypoint = \n");
    expect(() => codeAgent(dir)).toThrow(/agent\.toml: not valid TOML/);
  });

  test("a missing directory is reported as such", () => {
    expect(() => resolveEntrypoint(join(dir, "nope"))).toThrow(/does not exist/);
  });
});
