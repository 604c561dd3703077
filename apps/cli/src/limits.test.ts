import { mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { dockerTestGate, parseContainerConfig } from "@proctor/sandbox-docker";
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { describeLimits, resolveRunLimits } from "./limits";
import { proctor } from "./test-support";

const haveDocker = await dockerTestGate();

describe("a run's default limits", () => {
  test("the server's defaults, changed by the container config, then by the flags (0 = none)", () => {
    const plain = resolveRunLimits({}, undefined);
    expect(plain.limits).toEqual({ defaults: { memoryMb: 2048, cpus: 2, pidsLimit: 1024, storageMb: 5120 } });
    expect(describeLimits(plain, true)).toBe(
      "limits per trial: memory 2048 MB (default), 2 CPUs (default), 1024 processes (default), disk 5120 MB (default); a task's own [environment] values win",
    );
    const mle = parseContainerConfig('{"mem_limit": null, "nano_cpus": 4e9}', "default.json");
    const resolved = resolveRunLimits({ storageMb: 0, pidsLimit: 4096 }, mle);
    expect(resolved.limits).toEqual({ defaults: { cpus: 4, pidsLimit: 4096 } });
    expect(describeLimits(resolved, false)).toBe(
      "limits per trial: memory unlimited (--container-config), 4 CPUs (--container-config), 4096 processes (--pids-limit), disk unlimited (--storage-mb); a task's own [environment] values win (not enforced on the local runtime)",
    );
    expect(resolveRunLimits({ memoryMb: 3072 }, mle).limits?.defaults?.memoryMb).toBe(3072);
  });
});

describe.skipIf(!haveDocker)("proctor run gives tasks without limits the defaults (Docker)", () => {
  let root: string;
  let taskDir: string;
  beforeAll(async () => {
    root = await mkdtemp(join(tmpdir(), "proctor-limits-"));
    // A task that names no limits; its solution records the memory cap its sandbox got (cgroup v2 or v1).
    taskDir = join(root, "tasks", "mem-cap");
    const files: Record<string, string> = {
      "task.toml": "[agent]\ntimeout_sec = 120\n",
      "instruction.md": "Report your memory limit.\n",
      "solution/solve.sh": "{ cat /sys/fs/cgroup/memory.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes; } > /logs/agent/memory.txt\n",
      "tests/test.sh": 'echo 1 > "${PROCTOR_LOGS_DIR:-/logs}/verifier/reward.txt"\n',
    };
    for (const [path, text] of Object.entries(files)) {
      await mkdir(join(taskDir, path, ".."), { recursive: true });
      await writeFile(join(taskDir, path), text);
    }
  });
  afterAll(async () => {
    await rm(root, { recursive: true, force: true });
  });

  const capOf = async (runId: string) => (await readFile(join(root, "runs", runId, "trials", "mem-cap__1", "logs", "agent", "memory.txt"), "utf8")).trim();

  test("the default memory cap applies; --memory-mb and the task's own memory_mb change it; the header says which limits apply", async () => {
    const plain = await proctor(["run", taskDir, "--runtime", "docker", "-o", join(root, "runs"), "--run-id", "plain"]);
    expect(plain.code, plain.stderr).toBe(0);
    expect(plain.stderr).toContain("limits per trial: memory 2048 MB (default), 2 CPUs (default), 1024 processes (default), disk 5120 MB (default); a task's own [environment] values win\n");
    expect(await capOf("plain")).toBe(String(2048 * 1024 * 1024));
    const stored = JSON.parse(await readFile(join(root, "runs", "plain", "run.json"), "utf8")) as { limits?: unknown };
    expect(stored.limits).toEqual({ defaults: { memoryMb: 2048, cpus: 2, pidsLimit: 1024, storageMb: 5120 } });
    // A resume repeats the stored limits (nothing changed, nothing reruns).
    const resumed = await proctor(["run", "--resume", join(root, "runs", "plain")]);
    expect(resumed.code, resumed.stderr).toBe(0);
    expect(resumed.stderr).toContain("memory 2048 MB (run.json)");

    const flagged = await proctor(["run", taskDir, "--runtime", "docker", "-o", join(root, "runs"), "--run-id", "flagged", "--memory-mb", "3072"]);
    expect(flagged.code, flagged.stderr).toBe(0);
    expect(flagged.stderr).toContain("memory 3072 MB (--memory-mb)");
    expect(await capOf("flagged")).toBe(String(3072 * 1024 * 1024));

    await writeFile(join(taskDir, "task.toml"), "[agent]\ntimeout_sec = 120\n\n[environment]\nmemory_mb = 4096\n");
    const own = await proctor(["run", taskDir, "--runtime", "docker", "-o", join(root, "runs"), "--run-id", "own", "--memory-mb", "3072"]);
    expect(own.code, own.stderr).toBe(0);
    expect(await capOf("own")).toBe(String(4096 * 1024 * 1024));
  }, 300_000);

  test("a bad limit flag is one line naming it, exit 2", async () => {
    const r = await proctor(["run", taskDir, "--runtime", "docker", "-o", join(root, "runs"), "--memory-mb", "lots"]);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('--memory-mb must be a number >= 0 (0 = no limit), got "lots"');
  });
});
