import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { finish, proctor, repoRoot, spawnProctor } from "./test-support";

const examples = join(repoRoot, "examples/tasks");
let out: string;

beforeAll(async () => {
  out = await mkdtemp(join(tmpdir(), "proctor-report-test-"));
  const [oracle, nop] = await Promise.all([
    proctor(["run", examples, "--runtime", "local", "-o", out, "--run-id", "a-oracle", "-n", "2"]),
    proctor(["run", examples, "--runtime", "local", "-o", out, "--run-id", "b-nop", "-a", "nop", "-n", "2"]),
  ]);
  expect(oracle.code, oracle.stderr).toBe(0);
  expect(nop.code, nop.stderr).toBe(0);
});
afterAll(async () => {
  await rm(out, { recursive: true, force: true });
});

describe("proctor report", () => {
  test("one run lists its failed trials with reasons and verifier logs", async () => {
    const r = await proctor(["report", join(out, "b-nop")]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/pass rate\s+0\.0% \[0\.0%, \d+\.\d%\] \(0\/4 finished trials/);
    expect(r.stdout).toContain("Failed, errored and flagged trials (4)");
    expect(r.stdout).toMatch(/greeting-file__1\s+failed\s+-\s+reward 0; first failure: FAIL: greeting\.txt is missing\s+trials\/greeting-file__1\/verifier\/test-stdout\.txt/);
  });

  test("two runs print a paired comparison", async () => {
    const r = await proctor(["report", join(out, "a-oracle"), join(out, "b-nop")]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toContain("Comparison: B (b-nop) against A (a-oracle)");
    expect(r.stdout).toContain("flips          0 fail->pass, 4 pass->fail");
    // 4 discordant pairs all one way: 2 * 1/16
    expect(r.stdout).toContain("McNemar        p = 0.1250");
    expect(r.stdout).toMatch(/reward B - A\s+-1\.000 \[-1\.000, -1\.000\]/);
  });

  test("--format junit -o FILE writes the file; swebench of two runs is bad usage", async () => {
    const file = join(out, "junit.xml");
    const r = await proctor(["report", join(out, "a-oracle"), "--format", "junit", "-o", file]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toBe("");
    expect(await readFile(file, "utf8")).toMatch(/<testsuites name="proctor" tests="4" failures="0" errors="0"/);
    const bad = await proctor(["report", join(out, "a-oracle"), join(out, "b-nop"), "--format", "swebench"]);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain("one run");
    const missing = await proctor(["report", join(out, "nope")]);
    expect(missing.code).toBe(2);
    expect(missing.stderr).toContain("not a run directory");
  });

  test("proctor view serves the runs of a runs root until SIGTERM", async () => {
    const child = spawnProctor(["view", out, "--port", "0"]);
    let stderr = "";
    const url = await new Promise<string>((done, fail) => {
      child.stderr?.on("data", (c: Buffer) => {
        stderr += c.toString();
        const m = /viewer at (http:\/\/127\.0\.0\.1:\d+\/)/.exec(stderr);
        if (m?.[1]) done(m[1]);
      });
      child.on("exit", () => fail(new Error(`view exited: ${stderr}`)));
    });
    const { runs } = (await (await fetch(new URL("/api/runs", url))).json()) as { runs: { runId: string; passRate: number }[] };
    expect(runs.map((r) => [r.runId, r.passRate]).sort()).toEqual([["a-oracle", 1], ["b-nop", 0]]);
    expect(await (await fetch(url)).text()).toContain('<script type="module" src="app.js">');
    const done = finish(child);
    child.kill("SIGTERM");
    expect((await done).code).toBe(0);
  });
});
