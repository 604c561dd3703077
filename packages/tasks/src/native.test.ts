import { join } from "node:path";
import { describe, expect, test } from "vitest";
import { nativeFiles, script, tempDir, writeTree } from "../test/fixtures";
import { loadNativeTask, NATIVE_SOLUTION_COMMAND, NATIVE_TEST_COMMAND } from "./native";

const FULL_TOML = `
version = "1.0"
source = "hand-written"

[metadata]
category = "file-ops"
difficulty = "hard"
tags = ["files", "bash"]
author_name = "Ada"

[agent]
timeout_sec = 120

[verifier]
timeout_sec = 45.5
env = { STRICT = "1", LEVEL = 3 }

[environment]
docker_image = "proctor/base:bookworm"
build_timeout_sec = 900
cpus = 1.5
memory_mb = 4096
storage_mb = 10240
gpus = 1
allow_internet = true
workdir = "/work"
env = { LANG = "C.UTF-8" }
mcp_servers = []

[solution]
env = { X = "1" }
`;

async function load(files: Record<string, Parameters<typeof writeTree>[1][string]>, name = "my-task") {
  const root = await tempDir();
  const dir = join(root, name);
  await writeTree(dir, files);
  return { dir, ...(await loadNativeTask(dir)) };
}

describe("loadNativeTask", () => {
  test("[verifier] isolate_processes and allow_changes; a relative allow_changes path is an error naming the field", async () => {
    const { task, errors } = await load(nativeFiles({ "task.toml": '[verifier]\nisolate_processes = true\nallow_changes = ["/etc/profile.d/app.sh"]\n' }));
    expect(errors).toEqual([]);
    expect(task?.verifier).toMatchObject({ isolateProcesses: true, allowChanges: ["/etc/profile.d/app.sh"] });
    const bad = await load(nativeFiles({ "task.toml": '[verifier]\nisolate_processes = "yes"\nallow_changes = "etc/x"\n' }));
    expect(bad.errors.map((e) => e.message).join("\n")).toMatch(/isolate_processes/);
    expect(bad.errors.map((e) => e.message).join("\n")).toMatch(/allow_changes: "etc\/x" must be an absolute/);
  });

  test("reads every task.toml field into the spec", async () => {
    const { dir, task, errors } = await load(
      nativeFiles({
        "task.toml": FULL_TOML,
        "environment/Dockerfile": "FROM proctor/base:bookworm\n",
        "solution/solve.sh": script("echo hi > hello.txt\n"),
      }),
    );
    expect(errors).toEqual([]);
    expect(task).toEqual({
      id: "my-task",
      format: "native",
      sourcePath: dir,
      instruction: "Write hello.txt\n",
      category: "file-ops",
      difficulty: "hard",
      tags: ["files", "bash"],
      environment: {
        dockerImage: "proctor/base:bookworm",
        buildContext: join(dir, "environment"),
        buildTimeoutSec: 900,
        cpus: 1.5,
        memoryMb: 4096,
        storageMb: 10240,
        gpus: 1,
        allowInternet: true,
        workdir: "/work",
        env: { LANG: "C.UTF-8" },
      },
      agent: { timeoutSec: 120 },
      verifier: { mode: "reward-file", testsDir: join(dir, "tests"), command: NATIVE_TEST_COMMAND, timeoutSec: 45.5, env: { STRICT: "1", LEVEL: "3" }, isolateProcesses: false, allowChanges: [] },
      solution: { dir: join(dir, "solution"), command: NATIVE_SOLUTION_COMMAND },
      workspace: null,
      extra: {
        version: "1.0",
        source: "hand-written",
        metadata: { author_name: "Ada" },
        environment: { mcp_servers: [] },
        solution: { env: { X: "1" } },
      },
    });
    expect(NATIVE_TEST_COMMAND).toBe('bash "$PROCTOR_TESTS_DIR/test.sh"');
  });

  test("without task.toml: defaults (600 s, no internet, no image, no solution)", async () => {
    const { task, errors } = await load(nativeFiles());
    expect(errors).toEqual([]);
    expect(task?.agent.timeoutSec).toBe(600);
    expect(task?.verifier.timeoutSec).toBe(600);
    expect(task?.environment).toMatchObject({ dockerImage: null, buildContext: null, buildTimeoutSec: 600, allowInternet: false, gpus: 0, memoryMb: null });
    expect(task?.solution).toBeNull();
    expect(task?.extra).toEqual({});
  });

  test.each([
    ['memory = "2G"', 2048],
    ['memory = "512M"', 512],
    ['memory = "1.5G"', 1536],
    ['memory = "2Gi"', 2048],
  ])("legacy %s -> %d MB", async (line, mb) => {
    const { task, errors } = await load(nativeFiles({ "task.toml": `[environment]\n${line}\nstorage = "10G"\n` }));
    expect(errors).toEqual([]);
    expect(task?.environment.memoryMb).toBe(mb);
    expect(task?.environment.storageMb).toBe(10240);
  });

  test.each([
    ['"none"', false],
    ['"bridge"', true],
  ])("network_mode = %s sets allowInternet %s", async (mode, allowed) => {
    const { task, errors } = await load(nativeFiles({ "task.toml": `[environment]\nnetwork_mode = ${mode}\n` }));
    expect(errors).toEqual([]);
    expect(task?.environment.allowInternet).toBe(allowed);
  });

  test("bad values: every one reported, naming file and field, saying what was expected", async () => {
    const { dir, task, errors } = await load(
      nativeFiles({
        "task.toml": `
[metadata]
tags = "one"
[agent]
timeout_sec = "abc"
[verifier]
timeout_sec = -5
env = { "BAD-NAME" = "x" }
[environment]
memory = "lots"
cpus = 0
gpus = 1.5
workdir = "app"
network_mode = "overlay"
`,
      }),
    );
    expect(task).toBeNull();
    const file = join(dir, "task.toml");
    expect(errors.map((e) => e.message)).toEqual([
      `${file}: [metadata].tags must be a list of strings, got "one"`,
      `${file}: [agent].timeout_sec must be a positive number, got "abc"`,
      `${file}: [verifier].timeout_sec must be a positive number, got -5`,
      `${file}: [verifier].env must be a table of NAME = "value" pairs (names are letters, digits and _), got {"BAD-NAME":"x"}`,
      `${file}: [environment].cpus must be a positive number, got 0`,
      `${file}: [environment].memory must be a size such as "2G" or "512M" (or use memory_mb = 2048), got "lots"`,
      `${file}: [environment].gpus must be a whole number >= 0, got 1.5`,
      `${file}: [environment].network_mode must be "bridge", "none" or "host", got "overlay"`,
      `${file}: [environment].workdir must be an absolute path such as "/app", got "app"`,
    ]);
    expect(errors[1]).toMatchObject({ name: "TaskLoadError", file, field: "[agent].timeout_sec", taskId: "my-task" });
  });

  test("memory and memory_mb together, or contradicting allow_internet/network_mode, are reported", async () => {
    const { dir, errors } = await load(
      nativeFiles({ "task.toml": '[environment]\nmemory_mb = 100\nmemory = "2G"\nallow_internet = true\nnetwork_mode = "none"\n' }),
    );
    const file = join(dir, "task.toml");
    expect(errors.map((e) => e.message)).toEqual([
      `${file}: [environment].memory and memory_mb are both set: keep only memory_mb`,
      `${file}: [environment].network_mode is "none" but [environment].allow_internet is true: keep only allow_internet`,
    ]);
  });

  test("invalid TOML says where", async () => {
    const { dir, errors } = await load(nativeFiles({ "task.toml": "[agent]\ntimeout_sec = = 3\n" }));
    expect(errors).toHaveLength(1);
    expect(errors[0]?.message).toMatch(new RegExp(`^${join(dir, "task.toml")}: is not valid TOML \\(line 2, column \\d+\\)`));
  });

  test("a key or section the loader does not know is refused, naming the nearest known one", async () => {
    const { dir, task, errors } = await load(
      nativeFiles({
        "task.toml": `verison = "1.0"
[agent]
timeout_secs = 60
timeout = 60
[verifer]
timeout_sec = 60
[environment]
docker_imgae = "proctor/base:bookworm"
shm_size = "1g"
[solution]
envs = { X = "1" }
[tests]
x = 1
`,
      }),
    );
    expect(task).toBeNull();
    const file = join(dir, "task.toml");
    expect(errors.map((e) => e.message)).toEqual([
      `${file}: unknown top-level key "verison" (did you mean "version"?)`,
      `${file}: unknown section [verifer] (did you mean [verifier]?)`,
      `${file}: unknown section [tests] (the sections are [metadata], [agent], [verifier], [environment] and [solution])`,
      `${file}: [agent] has no key "timeout_secs" (did you mean "timeout_sec"?)`,
      `${file}: [agent] has no key "timeout" (did you mean "timeout_sec"?)`,
      `${file}: [environment] has no key "docker_imgae" (did you mean "docker_image"?)`,
      `${file}: [environment] has no key "shm_size" (it takes docker_image, build_timeout_sec, cpus, memory_mb, storage_mb, gpus, allow_internet, network_mode, workdir, env, memory, storage)`,
      `${file}: [solution] has no key "envs" (did you mean "env"?)`,
    ]);
    expect(errors[3]).toMatchObject({ field: "[agent].timeout_secs", taskId: "my-task" });
  });

  test("what Harbor and Terminal-Bench 2 task.toml files carry still loads; [metadata] and [task] are free-form", async () => {
    // As Harbor's registry serves a TB2 task, and as the terminal-bench-2 repository writes one.
    const registry = `schema_version = "1.1"
artifacts = []

[task]
name = "terminal-bench/extract-elf"
description = "Parse an ELF file."
keywords = ["file-operations"]
[[task.authors]]
name = "Ada"
email = "ada@example.com"

[metadata]
author_name = "Ada"
author_email = "ada@example.com"
difficulty = "medium"
category = "file-operations"
tags = []
expert_time_estimate_min = 30.0
junior_time_estimate_min = 240.0
anything_the_author_likes = { nested = true }

[verifier]
timeout_sec = 900.0
user = "root"

[agent]
timeout_sec = 900.0

[environment]
build_timeout_sec = 600.0
docker_image = "alexgshaw/extract-elf:20251031"
cpus = 1
memory_mb = 2048
storage_mb = 10240
gpus = 0
allow_internet = true
mcp_servers = []
os = "linux"

[verifier.env]

[environment.env]

[solution.env]
`;
    const repo = `version = "1.0"

[metadata]
author_name = "Ada"
author_email = "ada@example.com"
difficulty = "hard"
category = "software-engineering"
tags = ["c"]

[verifier]
timeout_sec = 900.0

[agent]
timeout_sec = 900.0

[environment]
build_timeout_sec = 600.0
docker_image = "alexgshaw/x:20251031"
cpus = 1
memory = "2G"
storage = "10G"
`;
    for (const toml of [registry, repo]) {
      const { task, errors } = await load(nativeFiles({ "task.toml": toml }));
      expect(errors.map((e) => e.message)).toEqual([]);
      expect(task?.agent.timeoutSec).toBe(900);
      expect(task?.environment.memoryMb).toBe(2048);
    }
    const { task } = await load(nativeFiles({ "task.toml": registry }));
    expect(task?.extra).toMatchObject({ schema_version: "1.1", artifacts: [], task: { name: "terminal-bench/extract-elf" }, metadata: { author_name: "Ada", expert_time_estimate_min: 30 }, verifier: { user: "root" }, environment: { mcp_servers: [], os: "linux" }, solution: { env: {} } });
  });

  test("CRLF line endings in tests/test.sh (or solution/solve.sh) are an error saying so, not a syntax error at run time", async () => {
    const { dir, task, errors } = await load(
      nativeFiles({
        "tests/test.sh": script("#!/bin/bash\r\nmkdir -p /logs/verifier\r\necho 1 > /logs/verifier/reward.txt\r\n"),
        "solution/solve.sh": script("#!/bin/bash\r\necho hi > hello.txt\r\n"),
      }),
    );
    expect(task).toBeNull();
    expect(errors.map((e) => e.message)).toEqual([
      `${dir}: CRLF line endings in tests/test.sh: bash reads each line's "\\r" as part of the command (a syntax error, or "$'\\r': command not found"); convert it to LF line endings (dos2unix tests/test.sh, or sed -i 's/\\r$//' tests/test.sh)`,
      `${dir}: CRLF line endings in solution/solve.sh: bash reads each line's "\\r" as part of the command (a syntax error, or "$'\\r': command not found"); convert it to LF line endings (dos2unix solution/solve.sh, or sed -i 's/\\r$//' solution/solve.sh)`,
    ]);
    expect(errors[0]).toMatchObject({ field: "tests/test.sh", taskId: "my-task" });
  });

  test("a section that is not a table is reported", async () => {
    const { dir, errors } = await load(nativeFiles({ "task.toml": "agent = 5\n" }));
    expect(errors.map((e) => e.message)).toEqual([`${join(dir, "task.toml")}: [agent] must be a table, got 5`]);
  });

  test("missing instruction.md and tests/test.sh are errors", async () => {
    const { dir, task, errors } = await load({ "task.toml": "", "solution/solve.sh": "true\n" });
    expect(task).toBeNull();
    expect(errors.map((e) => e.message)).toEqual([
      `${dir}: instruction.md is missing: a native task needs instruction.md (what the agent is told)`,
      `${dir}: tests/test.sh is missing: a native task is verified by tests/test.sh writing /logs/verifier/reward.txt`,
    ]);
  });

  test("an empty instruction.md is an error", async () => {
    const { dir, errors } = await load(nativeFiles({ "instruction.md": "  \n" }));
    expect(errors.map((e) => e.message)).toEqual([`${join(dir, "instruction.md")}: is empty: write what the agent is asked to do`]);
  });

  test("a directory name that is not a task id is an error", async () => {
    const { errors } = await load(nativeFiles(), "bad name!");
    expect(errors).toHaveLength(1);
    expect(errors[0]?.message).toContain('directory name "bad name!" is not a valid task id');
  });
});
