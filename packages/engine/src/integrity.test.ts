import { createHash } from "node:crypto";
import type { FileChange } from "@proctor/sandbox";
import { describe, expect, it } from "vitest";
import { findTampering, startUpFiles, type TamperProbe } from "./integrity";

const sha = (text: string) => createHash("sha256").update(text).digest("hex");
const probe = (existing: string[] = [], files: Record<string, string> = {}): TamperProbe => ({
  exists: async (paths) => new Set(paths.filter((p) => existing.includes(p))),
  readText: async (path) => files[path] ?? null,
  sha256: async (paths) => new Map(paths.flatMap((p) => (files[p] === undefined ? [] : [[p, sha(files[p])] as const]))),
});
const added = (path: string): FileChange => ({ path, kind: "added" });
const modified = (path: string): FileChange => ({ path, kind: "modified" });
const deleted = (path: string): FileChange => ({ path, kind: "deleted" });
/** Parent directories show up as modified in a real diff. */
const withParents = (changes: FileChange[]): FileChange[] => {
  const dirs = new Set<string>();
  for (const c of changes) for (let d = c.path.slice(0, c.path.lastIndexOf("/")); d; d = d.slice(0, d.lastIndexOf("/"))) dirs.add(d);
  return [...[...dirs].map(modified), ...changes];
};

describe("findTampering", () => {
  it("flags start-up files, conftest and sitecustomize anywhere but /tests; shell profiles are only reported", async () => {
    const changes = withParents([
      added("/etc/profile.d/zz.sh"),
      modified("/root/.bashrc"),
      added("/etc/ld.so.preload"),
      added("/app/conftest.py"),
      added("/conftest.py"),
      added("/usr/local/lib/python3.11/dist-packages/sitecustomize.py"),
      added("/pytest.ini"),
      added("/tests/conftest.py"),
    ]);
    expect(await findTampering(changes, [], probe())).toEqual({
      tampered: ["/app/conftest.py", "/conftest.py", "/etc/ld.so.preload", "/pytest.ini", "/usr/local/lib/python3.11/dist-packages/sitecustomize.py"],
      profileChanges: ["/etc/profile.d/zz.sh", "/root/.bashrc"],
    });
  });

  it("flags replaced shells, interpreters, libc and pytest, but not upgraded third-party packages", async () => {
    const changes = withParents([
      modified("/usr/bin/sh"),
      deleted("/usr/bin/python3.11"),
      modified("/usr/lib/x86_64-linux-gnu/libc.so.6"),
      modified("/usr/lib/python3.11/subprocess.py"),
      modified("/usr/lib/python3/dist-packages/_pytest/runner.py"),
      modified("/usr/local/lib/python3.11/dist-packages/numpy/__init__.py"),
      modified("/usr/lib/x86_64-linux-gnu/libssl.so.3"),
    ]);
    expect((await findTampering(changes, [], probe())).tampered).toEqual([
      "/usr/bin/python3.11", "/usr/bin/sh", "/usr/lib/python3.11/subprocess.py", "/usr/lib/python3/dist-packages/_pytest/runner.py", "/usr/lib/x86_64-linux-gnu/libc.so.6",
    ]);
  });

  it("installing software is not tampering: new programs, libraries and packages", async () => {
    const changes = withParents([
      added("/usr/bin/nginx"),
      added("/usr/local/bin/pytest"),
      added("/usr/lib/x86_64-linux-gnu/libfoo.so.1"),
      added("/usr/local/lib/python3.11/dist-packages/requests/__init__.py"),
      added("/usr/local/lib/python3.11/dist-packages/requests-2.0.dist-info/entry_points.txt"),
      modified("/var/lib/dpkg/status"),
      modified("/etc/ld.so.cache"),
      added("/app/solution.py"),
      added("/usr/local/lib/python3.11/dist-packages/distutils-precedence.pth"),
      added("/usr/local/lib/python3.11/dist-packages/__editable__.mypkg-0.1.pth"),
      modified("/root/.profile"),
    ]);
    const files = {
      "/usr/local/lib/python3.11/dist-packages/requests-2.0.dist-info/entry_points.txt": "[console_scripts]\nx = y:z\n",
      "/usr/local/lib/python3.11/dist-packages/distutils-precedence.pth": "import os; var = 'SETUPTOOLS_USE_DISTUTILS'; enabled = os.environ.get(var, 'local') == 'local'; enabled and __import__('_distutils_hack').add_shim(); \n",
      "/usr/local/lib/python3.11/dist-packages/__editable__.mypkg-0.1.pth": "import __editable___mypkg_0_1_finder; __editable___mypkg_0_1_finder.install()\n",
    };
    expect((await findTampering(changes, [], probe([], files))).tampered).toEqual([]);
  });

  it("a new interpreter tampers only when it shadows one later on PATH", async () => {
    const changes = withParents([added("/usr/local/bin/bash"), added("/usr/local/bin/python3"), added("/usr/local/bin/node")]);
    const found = await findTampering(changes, [], probe(["/usr/bin/bash", "/usr/bin/python3"]));
    expect(found.tampered).toEqual(["/usr/local/bin/bash", "/usr/local/bin/python3"]);
  });

  it("a pytest plugin registered by the agent tampers", async () => {
    const path = "/usr/local/lib/python3.11/dist-packages/evil-1.0.dist-info/entry_points.txt";
    expect((await findTampering(withParents([added(path)]), [], probe([], { [path]: "[pytest11]\nevil = evil\n" }))).tampered).toEqual([path]);
  });

  it("a .pth file that runs code at every Python start tampers", async () => {
    const path = "/usr/lib/python3/dist-packages/zz-evil.pth";
    const files = { [path]: "import os; exec(open('/tmp/x').read())\n" };
    expect((await findTampering(withParents([added(path)]), [], probe([], files))).tampered).toEqual([path]);
  });

  it("paths the task allows, and Proctor's own, are never flagged", async () => {
    const changes = withParents([added("/etc/ld.so.conf.d/app.conf"), added("/.proctor"), added("/usr/sbin/docker-init"), added("/logs/agent/x"), added("/etc/ld.so.conf.d/other.conf")]);
    expect((await findTampering(changes, ["/etc/ld.so.conf.d/app.conf"], probe())).tampered).toEqual(["/etc/ld.so.conf.d/other.conf"]);
  });

  describe("start-up files the workspace brought (baseline taken before the agent)", () => {
    const repo = { "/testbed/conftest.py": "import pytest\n", "/testbed/pkg/conftest.py": "X = 1\n", "/setup.cfg": "[tool:pytest]\n" };
    const uploaded = withParents([added("/testbed/conftest.py"), added("/testbed/pkg/conftest.py"), added("/setup.cfg"), added("/testbed/pkg/mod.py")]);
    const baseline = new Map(Object.entries(repo).map(([path, text]) => [path, sha(text)] as const));

    it("the baseline holds the start-up files among the changes, leaves only", () => {
      expect(startUpFiles([...uploaded, deleted("/testbed/old/conftest.py"), added("/tests/conftest.py")])).toEqual(["/setup.cfg", "/testbed/conftest.py", "/testbed/pkg/conftest.py"]);
    });

    it("unchanged baseline files are not tampering", async () => {
      expect((await findTampering(uploaded, [], probe([], repo), baseline)).tampered).toEqual([]);
    });

    it("a baseline file whose content changed tampers, and so does one deleted", async () => {
      const files: Record<string, string> = { ...repo, "/testbed/conftest.py": "def pytest_runtest_makereport(): ...\n" };
      delete files["/testbed/pkg/conftest.py"];
      // Added by the upload, then deleted by the agent: no longer in the diff at all.
      const changes = uploaded.filter((c) => c.path !== "/testbed/pkg/conftest.py");
      expect((await findTampering(changes, [], probe([], files), baseline)).tampered).toEqual(["/testbed/conftest.py", "/testbed/pkg/conftest.py"]);
    });

    it("a new conftest.py beside the baseline ones tampers", async () => {
      const changes = withParents([...uploaded, added("/testbed/tests/conftest.py")]);
      const files = { ...repo, "/testbed/tests/conftest.py": "import pytest\n" };
      expect((await findTampering(changes, [], probe([], files), baseline)).tampered).toEqual(["/testbed/tests/conftest.py"]);
    });
  });
});
