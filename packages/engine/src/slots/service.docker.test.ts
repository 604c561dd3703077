import { join } from "node:path";
import { silentLogger } from "@proctor/schema";
import { DockerRuntime, dockerTestGate } from "@proctor/sandbox-docker";
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { tempDir, EXAMPLES_DIR } from "../testing/fixtures";
import { buildSweCalc, CALC_OPS } from "../testing/swe-calc";
import { SlotService, SlotServiceError } from "./service";

const haveDocker = await dockerTestGate();

/** The calc project's mirror with one SWE row at the buggy commit (the mirror also holds the fix's later commit). */
async function buildFixture(root: string): Promise<{ dataset: string; mirrors: string; base: string; future: string }> {
  const calc = await buildSweCalc(root);
  const dataset = await calc.writeDataset([
    { id: "calc-1", patch: "", testPatch: calc.patches.testMul, failToPass: ["tests/test_ops.py::test_mul"], passToPass: ["tests/test_ops.py::test_add"], problem: "mul adds" },
  ]);
  return { dataset, mirrors: calc.mirrors, base: calc.base, future: calc.future };
}

describe.skipIf(!haveDocker)("SlotService on Docker", () => {
  let root: { path: string; cleanup: () => Promise<void> };
  let fixture: Awaited<ReturnType<typeof buildFixture>>;
  let swe: SlotService;

  beforeAll(async () => {
    root = await tempDir("proctor-slot-service-");
    fixture = await buildFixture(root.path);
    swe = new SlotService({
      runtime: new DockerRuntime(),
      defaultImage: "proctor/base:bookworm",
      slotsPerSandbox: 2,
      maxSandboxes: 1,
      acquireTimeoutMs: 60_000,
      tasksDir: fixture.dataset,
      reposDir: fixture.mirrors,
      // proctor/base:bookworm has python3, pytest and git.
      imageTemplate: "proctor/base:bookworm",
      cacheDir: join(root.path, "cache"),
      logger: silentLogger,
    });
    await swe.start();
  }, 120_000);
  afterAll(async () => {
    await swe?.close();
    await root?.cleanup();
  });

  test("a SWE instance's slot holds its repo at base_commit (no future), verify grades FAIL_TO_PASS / PASS_TO_PASS per test", async () => {
    const entry = await swe.create("token:alice", { task: "calc-1" });
    try {
      const { slot } = entry;
      expect((await slot.exec(["git", "rev-parse", "HEAD"])).stdout.trim()).toBe(fixture.base);
      expect((await slot.exec(["cat", "calc/ops.py"])).stdout).toBe(CALC_OPS);
      // Only the base commit is in the slot's repository: the fix's commit cannot be read.
      expect((await slot.exec(["git", "cat-file", "-e", fixture.future])).exitCode).not.toBe(0);
      expect((await slot.exec({ shell: "git log --all --format=%H" })).stdout.trim()).toBe(fixture.base);

      const before = await swe.verify(entry);
      expect(before).toMatchObject({ reward: 0, resolved: false, error: null });
      expect(before.tests).toEqual([
        { name: "tests/test_ops.py::test_mul", status: "FAILED", expected: "FAIL_TO_PASS" },
        { name: "tests/test_ops.py::test_add", status: "PASSED", expected: "PASS_TO_PASS" },
      ]);

      // An agent that also rewrites the test to pass is overruled: verify writes the test patch's files again.
      await slot.exec({ shell: "sed -i 's/return a + b  # bug/return a * b/' calc/ops.py && echo 'def test_mul(): pass' > tests/test_ops.py" });
      const after = await swe.verify(entry);
      expect(after).toMatchObject({ reward: 1, resolved: true, error: null });
      expect(after.tests?.map((t) => [t.name, t.status])).toEqual([
        ["tests/test_ops.py::test_mul", "PASSED"],
        ["tests/test_ops.py::test_add", "PASSED"],
      ]);
      // verify does not end the slot
      expect((await slot.exec(["python3", "-c", "from calc.ops import mul; print(mul(2, 5))"])).stdout).toBe("10\n");
    } finally {
      await swe.release(entry, true);
    }
  });

  test("ownership: the owner gets its slot, another credential 403, unknown or released 404; bad names 400", async () => {
    const entry = await swe.create("token:alice", {});
    const id = entry.slot.id;
    expect(swe.entry(id, (owner) => owner === "token:alice")).toBe(entry);
    expect(() => swe.entry(id, (owner) => owner === "token:bob")).toThrow(expect.objectContaining({ status: 403 }));
    expect(() => swe.entry("nope", () => true)).toThrow(expect.objectContaining({ status: 404 }));
    await swe.release(entry, true);
    expect(() => swe.entry(id, () => true)).toThrow(expect.objectContaining({ status: 404 }));
    await expect(swe.create(null, { task: "calc-9" })).rejects.toThrow(/no task "calc-9".*calc-1/);
    await expect(swe.create(null, { task: "calc-1", repo: { name: "acme/calc", commit: fixture.base } })).rejects.toThrow(/give task or repo, not both/);
    await expect(swe.create(null, { task: "calc-1", image: "x" })).rejects.toBeInstanceOf(SlotServiceError);
  });

  test("an expired slot is reclaimed: its holder gets 410", async () => {
    const entry = await swe.create("token:alice", { ttlSec: 1 });
    const id = entry.slot.id;
    // The pool reclaims on its own timer; wait for it (no fixed sleep).
    const deadline = Date.now() + 120_000;
    while (entry.slot.gone === null && Date.now() < deadline) await new Promise((r) => setTimeout(r, 200));
    expect(() => swe.entry(id, () => true)).toThrow(expect.objectContaining({ status: 410, code: "slot_gone" }));
    expect(() => swe.entry(id, () => true)).toThrow(expect.objectContaining({ status: 404 }));
  });

  test("a task dir's slot verifies with the task's reward-file tests; a slot without a task cannot verify", async () => {
    const tasks = new SlotService({ runtime: new DockerRuntime(), defaultImage: "proctor/base:bookworm", slotsPerSandbox: 1, maxSandboxes: 1, tasksDir: join(EXAMPLES_DIR, "tasks"), cacheDir: join(root.path, "cache"), logger: silentLogger });
    await tasks.start();
    try {
      const entry = await tasks.create(null, { task: "greeting-file" });
      expect(await tasks.verify(entry)).toMatchObject({ reward: 0, resolved: false, tests: null });
      await entry.slot.exec({ shell: "printf 'Hello, Proctor!\\n' > greeting.txt && mkdir -p archive && cp greeting.txt archive/ && chmod 600 archive/greeting.txt" });
      expect(await tasks.verify(entry)).toMatchObject({ reward: 1, resolved: true, error: null });
      await tasks.release(entry, false);
      const plain = await tasks.create(null, {});
      await expect(tasks.verify(plain)).rejects.toThrow(/not created with a task/);
      await tasks.release(plain, true);
    } finally {
      await tasks.close();
    }
  });
});
