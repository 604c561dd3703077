import { mkdir, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { describe, expect, test } from "vitest";
import { tempDir } from "../testing/fixtures";
import { namesTestsImport, testEnvironment, topLevelModule } from "./modules";

describe("modules the outputs must not shadow", () => {
  test("a module at the top of a directory: a file, an extension, a package, a link", () => {
    expect(topLevelModule("/app/pluggy.py")).toEqual({ path: "/app/pluggy.py", name: "pluggy" });
    expect(topLevelModule("/app/_json.cpython-311-x86_64-linux-gnu.so")).toEqual({ path: "/app/_json.cpython-311-x86_64-linux-gnu.so", name: "_json" });
    expect(topLevelModule("/app/pluggy/__init__.py")).toEqual({ path: "/app/pluggy", name: "pluggy" });
    expect(topLevelModule("pluggy", true)).toEqual({ path: "pluggy", name: "pluggy" });
    expect(topLevelModule("pluggy")).toBeNull();
    expect(topLevelModule("/app/data.csv")).toBeNull();
    expect(topLevelModule("/app/my-tool.py")).toBeNull();
  });

  test("the Python a test command runs: its activation, and an interpreter it names by path", () => {
    expect(testEnvironment(null)).toEqual({ preamble: "", interpreters: [] });
    expect(testEnvironment("python3 -m pytest -rA tests/test_ops.py")).toEqual({ preamble: "", interpreters: [] });
    expect(testEnvironment(". /opt/venv/bin/activate && python -m pytest tests")).toEqual({ preamble: ". /opt/venv/bin/activate", interpreters: [] });
    expect(testEnvironment("if [ -f /opt/miniconda3/bin/activate ]; then . /opt/miniconda3/bin/activate && conda activate testbed; fi\nexport LANG=C.UTF-8\npytest -rA")).toMatchObject({ interpreters: [] });
    expect(testEnvironment("PYTHONWARNINGS=ignore /opt/venv/bin/python -m pytest")).toEqual({ preamble: "", interpreters: ["/opt/venv/bin/python"] });
    expect(testEnvironment("/opt/venv/bin/pytest -q")).toEqual({ preamble: "", interpreters: ["/opt/venv/bin/python3", "/opt/venv/bin/python"] });
  });

  test("the modules the test files and commands import", async () => {
    const root = await tempDir("proctor-imports-");
    try {
      await mkdir(join(root.path, "sub"));
      await writeFile(join(root.path, "test_outputs.py"), "import os, requests as rq\nfrom solution import answer\nfrom . import helpers\n");
      await writeFile(join(root.path, "sub", "test.sh"), "python3 -c 'import numpy; print(1)'\n");
      const names = await namesTestsImport(root.path, ["python3 -c 'import yaml'"]);
      expect([...names].sort()).toEqual(["numpy", "os", "requests", "solution", "yaml"]);
    } finally {
      await root.cleanup();
    }
  });
});
