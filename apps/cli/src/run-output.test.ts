import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { execFileSync } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdir, mkdtemp, readFile, readdir, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { dockerTestGate } from "@proctor/sandbox-docker";
import { proctor, repoRoot } from "./test-support";

// What a user sees while and after a run: where the run is, why a trial failed and where its
// verifier log is, image builds as they happen, what a source holds, and flaky task definitions.

const examples = join(repoRoot, "examples/tasks");
const exampleIds = (await readdir(examples)).sort();
let out: string;

beforeAll(async () => {
  out = await mkdtemp(join(tmpdir(), "proctor-run-output-"));
});
afterAll(async () => {
  await rm(out, { recursive: true, force: true });
});

/** A native task whose files are given inline (paths relative to the task dir). */
async function task(dir: string, files: Record<string, string>): Promise<void> {
  for (const [path, text] of Object.entries(files)) {
    await mkdir(join(dir, path, ".."), { recursive: true });
    await writeFile(join(dir, path), text);
  }
}

const REWARD = '"${PROCTOR_LOGS_DIR:-/logs}/verifier/reward.txt"';

describe("proctor run tells you what happened (local runtime)", () => {
  test("the run dir is printed at start and end; every FAIL line says why and where the verifier log is", async () => {
    const r = await proctor(["run", examples, "--runtime", "local", "-a", "nop", "-o", out, "--run-id", "nop-lines", "-n", "2"]);
    expect(r.code, r.stderr).toBe(0);
    const runDir = join(out, "nop-lines");
    const start = r.stderr.indexOf(`run directory: ${runDir}\n`);
    expect(start).toBeGreaterThanOrEqual(0);
    expect(start).toBeLessThan(r.stderr.indexOf("[1/4]"));
    expect(r.stdout.trimEnd().endsWith(`run directory: ${runDir}`)).toBe(true);
    for (const id of exampleIds) {
      const line = r.stderr.split("\n").find((l) => l.includes(` FAIL ${id}__1 `));
      expect(line, r.stderr).toBeDefined();
      const m = / — reward 0; agent exit 0; verifier log (\S+) \(passed \d+ failed \d+ errored 0, ETA /.exec(line ?? "");
      expect(m, line).not.toBeNull();
      expect(existsSync(m?.[1] ?? "missing")).toBe(true);
      expect(m?.[1]).toMatch(new RegExp(`trials/${id}__1/verifier/test-stdout\\.txt$`));
    }
    expect(r.stderr).toMatch(/\[1\/4\] FAIL .* \(passed 0 failed 1 errored 0, ETA \d+s\)/);
  });

  test("--json: summary.json plus runDir on stdout, the run dir on stderr at start and end", async () => {
    const r = await proctor(["run", examples, "--runtime", "local", "-o", out, "--run-id", "oracle-json", "-i", "greeting-file", "--json"]);
    expect(r.code, r.stderr).toBe(0);
    const printed = JSON.parse(r.stdout);
    expect(printed.runDir).toBe(join(out, "oracle-json"));
    expect(printed.trials).toMatchObject({ total: 1, passed: 1 });
    expect(r.stderr.split(`run directory: ${join(out, "oracle-json")}\n`)).toHaveLength(3);
  });

  test("an ERROR line names the error kind and the message", async () => {
    const tasks = join(out, "error-tasks");
    await task(join(tasks, "no-reward"), {
      "instruction.md": "Do nothing.",
      "tests/test.sh": "echo 'checking'\nexit 0\n",
      "solution/solve.sh": "true\n",
    });
    const r = await proctor(["run", tasks, "--runtime", "local", "-o", out, "--run-id", "errors"]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).toMatch(/\[1\/1\] ERROR no-reward__1 reward=- \S+ — verifier error: the verifier wrote no reward[^\n]*; agent exit 0; verifier log \S+\/trials\/no-reward__1\/verifier\/test-stdout\.txt/);
    expect(r.stdout).toMatch(/errors\s+verifier 1/);
  });
});

describe("proctor tasks list", () => {
  test("a table of id, category, difficulty, kind and path; --json gives the same", async () => {
    const r = await proctor(["tasks", "list", "examples/tasks"]);
    expect(r.code, r.stderr).toBe(0);
    const lines = r.stdout.trimEnd().split("\n");
    expect(lines[0]).toMatch(/^task\s+category\s+difficulty\s+kind\s+path$/);
    expect(r.stdout).toMatch(/^greeting-file\s+file-ops\s+easy\s+native\s+examples\/tasks\/greeting-file$/m);
    expect(r.stdout).toMatch(/^word-frequency\s+text-processing\s+medium\s+native\s+examples\/tasks\/word-frequency$/m);
    expect(lines.at(-1)).toBe(`${exampleIds.length} task(s)`);
    const j = await proctor(["tasks", "list", examples, "--json", "-x", "git-*"]);
    expect(j.code, j.stderr).toBe(0);
    const listed = JSON.parse(j.stdout);
    expect(listed.errors).toEqual([]);
    expect(listed.tasks.map((t: { id: string }) => t.id)).toEqual(exampleIds.filter((id) => !id.startsWith("git-")));
    expect(listed.tasks[0]).toEqual({ id: "fizzbuzz-python", category: "scripting", difficulty: "easy", kind: "native", path: "examples/tasks/fizzbuzz-python" });
  });

  test("a bad source exits 2 naming the path and what is wrong", async () => {
    const empty = join(out, "empty-source");
    await mkdir(join(empty, "just-a-dir"), { recursive: true });
    const file = join(out, "notes.txt");
    await writeFile(file, "not tasks");
    const broken = join(out, "broken-source");
    await task(join(broken, "bad-timeout"), { "instruction.md": "x", "tests/test.sh": "exit 0\n", "task.toml": '[agent]\ntimeout_sec = "abc"\n' });
    await task(join(broken, "fine"), { "instruction.md": "x", "tests/test.sh": "exit 0\n" });
    const [missing, none, notArchive, invalid] = await Promise.all([join(out, "nope"), empty, file, broken].map((source) => proctor(["tasks", "list", source])));
    expect(missing?.code).toBe(2);
    expect(missing?.stderr).toContain(`${join(out, "nope")}: no such file or directory`);
    expect(none?.code).toBe(2);
    expect(none?.stderr).toMatch(/empty-source: holds no tasks: expected a task directory/);
    expect(notArchive?.code).toBe(2);
    expect(notArchive?.stderr).toContain(`${file}: not a directory, and not a .zip, .tar or .tar.gz archive`);
    if (!invalid) throw new Error("no result");
    expect(invalid.code).toBe(2);
    expect(invalid.stderr).toMatch(/bad-timeout\/task\.toml: \[agent\]\.timeout_sec must be a positive number, got "abc"/);
    expect(invalid.stdout).toMatch(/^fine\s+-\s+-\s+native\s/m);
  });
});

describe("proctor report RUN1 RUN2 RUN3: flaky task definitions", () => {
  test("a task whose oracle outcome flips across 3 oracle runs is flagged in table and json", async () => {
    const tasks = join(out, "flaky-tasks");
    const counter = join(out, "flaky-counter");
    // Passes on the 1st and 3rd verification, fails on the 2nd: flaky as defined.
    await task(join(tasks, "coin-flip"), {
      "instruction.md": "Nothing to do.",
      "tests/test.sh": `n=$(cat '${counter}' 2>/dev/null || echo 0); n=$((n + 1)); echo "$n" > '${counter}'\nmkdir -p "$(dirname ${REWARD})"\nif [ $((n % 2)) -eq 1 ]; then echo 1 > ${REWARD}; else echo 0 > ${REWARD}; fi\n`,
      "solution/solve.sh": "true\n",
    });
    await task(join(tasks, "steady"), {
      "instruction.md": "Nothing to do.",
      "tests/test.sh": `mkdir -p "$(dirname ${REWARD})"\necho 1 > ${REWARD}\n`,
      "solution/solve.sh": "true\n",
    });
    const runs: string[] = [];
    for (const n of [1, 2, 3]) {
      const r = await proctor(["run", tasks, "--runtime", "local", "-o", out, "--run-id", `flaky-${n}`, "-n", "1"]);
      expect(r.code, r.stderr).toBe(0);
      runs.push(join(out, `flaky-${n}`));
    }
    const [report, jsonReport, two] = await Promise.all([
      proctor(["report", ...runs]),
      proctor(["report", ...runs, "--format", "json"]),
      proctor(["report", runs[0] ?? "", runs[1] ?? ""]),
    ]);
    expect(report.code, report.stderr).toBe(0);
    expect(report.stdout).toContain("Flaky task definitions (1)");
    expect(report.stdout).toMatch(/^coin-flip\s+oracle\s+2\/3\s+3\s+oracle should always pass$/m);
    expect(report.stdout).not.toMatch(/^steady\s+oracle/m);
    expect(JSON.parse(jsonReport.stdout).flakyTasks.tasks).toEqual([{ taskId: "coin-flip", agent: "oracle", passed: 2, attempts: 3, runs: 3 }]);
    // Two runs are a comparison, not a flakiness check.
    expect(two.code, two.stderr).toBe(0);
    expect(two.stdout).not.toContain("Flaky");
  });
});

const docker = await dockerTestGate();

describe.skipIf(!docker)("proctor run on Docker: image builds", () => {
  test("a task's Dockerfile build shows which image, the elapsed time and the last build log line", async () => {
    const tasks = join(out, "build-tasks");
    const unique = `${process.pid}-${Date.now()}-${Math.random().toString(36).slice(2)}`;
    await task(join(tasks, "built"), {
      "instruction.md": "Write hello to /app/out.txt",
      "task.toml": "[agent]\ntimeout_sec = 60\n[verifier]\ntimeout_sec = 60\n",
      // busybox has no bash: a shim so the verifier's `bash test.sh` runs.
      "environment/Dockerfile": `FROM proctor/busybox\nLABEL proctor.test.unique="${unique}"\nRUN printf '#!/bin/sh\\nexec /bin/sh "$@"\\n' > /bin/bash && chmod +x /bin/bash && echo shim-ready-${unique}\n`,
      "tests/test.sh": `mkdir -p /logs/verifier\nif [ -f /app/out.txt ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi\n`,
      "solution/solve.sh": "echo hello > /app/out.txt\n",
    });
    const r = await proctor(["run", tasks, "--runtime", "docker", "-o", out, "--run-id", "build-progress"]);
    try {
      expect(r.code, r.stderr).toBe(0);
      const started = /^building image (proctor-build\/[0-9a-f]{12}) for built from \S+\/build-tasks\/built\/environment$/m.exec(r.stderr);
      expect(started, r.stderr).not.toBeNull();
      const image = started?.[1] ?? "missing";
      expect(r.stderr).toMatch(new RegExp(`^building ${image} \\(built\\) \\d+s: \\S`, "m"));
      expect(r.stderr).toMatch(new RegExp(`^built image ${image} in \\d+s$`, "m"));
      expect(r.stderr.indexOf(`built image ${image}`)).toBeLessThan(r.stderr.indexOf("[1/1] PASS built__1"));
      const types = (await readFile(join(out, "build-progress", "events.jsonl"), "utf8")).trim().split("\n").map((l) => JSON.parse(l).type as string);
      expect(types).toEqual(expect.arrayContaining(["image_build_started", "image_build_progress", "image_build_finished"]));
      expect(types.indexOf("image_build_started")).toBeLessThan(types.indexOf("image_build_finished"));
    } finally {
      const ids = execFileSync("docker", ["images", "-q", "--filter", `label=proctor.test.unique=${unique}`]).toString().trim().split("\n").filter(Boolean);
      if (ids.length > 0) execFileSync("docker", ["rmi", "-f", ...ids], { stdio: "ignore" });
    }
  });
});
