import { mkdir, writeFile } from "node:fs/promises";
import { join } from "node:path";
import type { TaskSpec } from "@proctor/schema";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { inlineTask, tempDir } from "../testing/fixtures";
import { pathsNamedByTests, planGrading } from "./plan";
import { changesRunner, isBytecode } from "./repo-diff";

describe("planGrading", () => {
  let root: { path: string; cleanup: () => Promise<void> };
  beforeAll(async () => {
    root = await tempDir("proctor-plan-");
  });
  afterAll(() => root.cleanup());

  async function testsDir(name: string, files: Record<string, string>): Promise<string> {
    const dir = join(root.path, name);
    for (const [path, text] of Object.entries(files)) {
      await mkdir(join(dir, path, ".."), { recursive: true });
      await writeFile(join(dir, path), text);
    }
    return dir;
  }

  function harbor(id: string, tests: string | null, verifier: Partial<TaskSpec["verifier"]> = {}): TaskSpec {
    return inlineTask(id, join(root.path, "src"), {
      format: "native",
      verifier: { mode: "reward-file", command: "bash /tests/test.sh", testsDir: tests, timeoutSec: 60, env: {}, isolateProcesses: false, allowChanges: [], ...verifier } as TaskSpec["verifier"],
    });
  }

  it("names only the paths a test reads outside the workdir and the verifier's own dirs", async () => {
    const dir = await testsDir("named", {
      "test.sh": [
        "#!/usr/bin/env bash",
        "curl -LsSf https://astral.sh/uv/0.7.13/install.sh | sh",
        "source $HOME/.local/bin/env",
        'W="${PROCTOR_WORKDIR:-/app}"; cat "$W"/out.txt ${W}/x "${W}"/y',
        "uvx pytest /tests/test_outputs.py -rA > /tmp/log 2>/dev/null",
        "echo 1 > /logs/verifier/reward.txt",
      ].join("\n"),
      "test_outputs.py": 'from pathlib import Path\nSITE = Path("/etc/nginx/conf.d/site.conf")\nassert Path("/app/index.html").exists()\nratio = 1/2\nfetch("http://127.0.0.1:8080/index.html")\n',
    });
    expect(await pathsNamedByTests(dir, "/app")).toEqual(["/etc/nginx/conf.d/site.conf"]);
  });

  it("grades fresh when the tests name nothing outside the workdir, shared when they read elsewhere, fresh with declared outputs", async () => {
    const inside = await testsDir("inside", { "test.sh": "python3 -m pytest /tests/t.py\nexit 0\n", "t.py": "open('/app/answer.txt')\n" });
    const outside = await testsDir("outside", { "test.sh": "nginx -t && grep -q listen /etc/nginx/nginx.conf\n" });
    expect(await planGrading({ task: harbor("in", inside), workdir: "/app", runGrading: null })).toEqual({
      mode: "fresh",
      why: "the tests name nothing outside /app",
      outputs: ["/app"],
      repository: false,
    });
    const shared = await planGrading({ task: harbor("out", outside), workdir: "/app", runGrading: null });
    expect(shared).toMatchObject({ mode: "shared", why: "the tests read /etc/nginx/nginx.conf outside /app", outputs: ["/app", "/etc/nginx/nginx.conf"] });
    expect(await planGrading({ task: harbor("declared", outside, { outputs: ["/etc/nginx"] }), workdir: "/app", runGrading: null })).toMatchObject({ mode: "fresh", outputs: ["/etc/nginx"] });
    expect(await planGrading({ task: harbor("asked", outside, { grading: "fresh" }), workdir: "/app", runGrading: null })).toMatchObject({ mode: "fresh", why: 'task.toml [verifier] grading = "fresh"', outputs: ["/app"] });
    expect(await planGrading({ task: harbor("run", inside), workdir: "/app", runGrading: "shared" })).toMatchObject({ mode: "shared", why: "--grading shared" });
  });

  it("grades a repository task fresh, as its diff at the base commit", async () => {
    const task = { ...harbor("repo", null), workspace: { repo: "acme/calc", baseCommit: "a".repeat(40), version: null, language: null, install: [], installTimeoutSec: 60 } };
    expect(await planGrading({ task, workdir: "/testbed", runGrading: null })).toMatchObject({ mode: "fresh", repository: true, outputs: ["/testbed"] });
  });
});

describe("test-runner files in the outputs", () => {
  it("counts a change to how pytest or Python starts, not other edits of the same files", () => {
    expect(changesRunner("conftest.py", null, "import pytest")).toBe(true);
    expect(changesRunner("tests/conftest.py", "a", "a")).toBe(false);
    expect(changesRunner("setup.cfg", "[metadata]\nname = x\n[tool:pytest]\nmarkers = a\n", "[metadata]\nname = y\n[tool:pytest]\nmarkers = a\n")).toBe(false);
    expect(changesRunner("setup.cfg", "[tool:pytest]\nmarkers = a\n", "[tool:pytest]\nmarkers = a\naddopts = -p evil\n")).toBe(true);
    expect(changesRunner("sub/pytest.ini", null, "[pytest]\naddopts = --co\n")).toBe(true);
    expect(changesRunner("zz.pth", null, "import zz")).toBe(true);
    expect(changesRunner("src/_pytest/__init__.py", "old", "new")).toBe(false); // pytest's own sources
    expect(changesRunner("pytest/__init__.py", null, "x")).toBe(true); // a new package shadowing pytest
    expect(changesRunner("calc/ops.py", null, "x")).toBe(false);
    expect(isBytecode("calc/__pycache__/ops.cpython-311.pyc")).toBe(true);
    expect(isBytecode("calc/ops.py")).toBe(false);
  });
});
