import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { execFileSync } from "node:child_process";
import { mkdtemp, readFile, rm, mkdir, writeFile, chmod } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { dockerTestGate } from "@proctor/sandbox-docker";
import { proctor } from "./test-support";

const git = (cwd: string, ...args: string[]) =>
  execFileSync("git", ["-c", "user.name=t", "-c", "user.email=t@t", ...args], { cwd }).toString().trim();

let work: string;
let archive: string;

/**
 * A term-executor upload: a Python repo with two bugs, two tasks (fix add, fix sub) each with a
 * check script, and an agent that only knows how to fix add. One task must score 1, the other 0.
 */
beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), "proctor-te-"));
  const repo = join(work, "calc-repo");
  await mkdir(repo);
  git(repo, "init", "-q", "-b", "main");
  await writeFile(join(repo, "calc.py"), "def add(a, b):\n    return a - b\n\n\ndef sub(a, b):\n    return a + b\n");
  git(repo, "add", ".");
  git(repo, "commit", "-qm", "buggy calc");
  const base = git(repo, "rev-parse", "HEAD");
  // A later commit the tasks must NOT see: checkout has to honour base_commit.
  await writeFile(join(repo, "later.txt"), "from the future\n");
  git(repo, "add", ".");
  git(repo, "commit", "-qm", "later");

  const root = join(work, "upload", "submission");
  for (const [id, fn, expected] of [["fix-add", "add", "5"], ["fix-sub", "sub", "-1"]] as const) {
    const dir = join(root, "tasks", id);
    await mkdir(join(dir, "tests"), { recursive: true });
    await writeFile(join(dir, "workspace.yaml"), `repo: ${repo}\nbase_commit: ${base}\nlanguage: python\ninstall:\n  - python3 -c "import calc"\n`);
    await writeFile(join(dir, "prompt.md"), `Fix the ${fn} function in calc.py.\n`);
    await writeFile(join(dir, "tests", "check_result.sh"), `python3 -c "import calc; r = calc.${fn}(2, 3); print('got', r); assert r == ${expected}"\n`);
    await writeFile(join(dir, "tests", "check_clean.sh"), `test ! -e later.txt && echo "base commit honoured"\n`);
  }
  await mkdir(join(root, "agent_code"), { recursive: true });
  await writeFile(join(root, "agent_code", "run.sh"), [
    "#!/bin/bash",
    "set -e",
    'cd "$REPO_DIR"',
    'grep -q "Fix the add" "$TASK_PROMPT" && sed -i "s/return a - b/return a + b  # fixed by the agent/" calc.py',
    'echo "agent saw: $PROCTOR_INSTRUCTION"',
    "",
  ].join("\n"));
  await chmod(join(root, "agent_code", "run.sh"), 0o755);
  archive = join(work, "submission.tar.gz");
  execFileSync("tar", ["-czf", archive, "-C", join(work, "upload"), "submission"]);
});

afterAll(async () => {
  if (!process.env.KEEP) await rm(work, { recursive: true, force: true });
});

async function check(runtime: string) {
  const out = join(work, `runs-${runtime}`);
  // Check tasks isolate the verifier by default, which only Docker can guarantee.
  const isolation = runtime === "local" ? ["--no-isolate-verifier"] : [];
  const r = await proctor(["run", archive, "--runtime", runtime, "-o", out, "--run-id", "te", "--json", ...isolation]);
  expect(r.code, r.stderr).toBe(0);
  const summary = JSON.parse(r.stdout);
  expect(summary.trials).toMatchObject({ total: 2, passed: 1, failed: 1, errored: 0 });
  const lines = (await readFile(join(out, "te", "results.jsonl"), "utf8")).trim().split("\n").map((l) => JSON.parse(l));
  const byTask = Object.fromEntries(lines.map((l) => [l.taskId, l]));
  expect(byTask["fix-add"].reward).toBe(1);
  expect(byTask["fix-sub"].reward).toBe(0);
  const sub = JSON.parse(await readFile(join(out, "te", "trials", "fix-sub__1", "result.json"), "utf8"));
  const checks = Object.fromEntries(sub.checks.map((c: { name: string }) => [c.name, c]));
  expect(Object.keys(checks).sort()).toEqual(["check_clean.sh", "check_result.sh"]);
  expect(checks["check_result.sh"]).toMatchObject({ passed: false });
  expect(checks["check_result.sh"].exitCode).not.toBe(0);
  expect(checks["check_result.sh"].output).toContain("got 5");
  expect(checks["check_clean.sh"]).toMatchObject({ passed: true, exitCode: 0 });
  expect(checks["check_clean.sh"].output).toContain("base commit honoured");
  const add = JSON.parse(await readFile(join(out, "te", "trials", "fix-add__1", "result.json"), "utf8"));
  expect(add.checks.every((c: { passed: boolean }) => c.passed)).toBe(true);
}

const docker = await dockerTestGate();

describe("proctor run <term-executor archive>", () => {
  test("local runtime refuses check tasks' strict isolation unless told, naming the flag", async () => {
    const r = await proctor(["run", archive, "--runtime", "local", "-o", join(work, "runs-refused"), "--run-id", "te"]);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/strict verifier isolation .* --no-isolate-verifier/);
  });

  test("local runtime: the fixed task scores 1, the other 0, with per-check output", async () => {
    await check("local");
  });

  test.skipIf(!docker)("docker runtime: the same archive gives the same rewards", async () => {
    await check("docker");
  });
});
