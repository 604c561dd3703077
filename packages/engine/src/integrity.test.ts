import type { FileChange } from "@proctor/sandbox";
import { describe, expect, it } from "vitest";
import { findTampering, type TamperProbe } from "./integrity";

const probe = (existing: string[] = [], files: Record<string, string> = {}): TamperProbe => ({
  exists: async (paths) => new Set(paths.filter((p) => existing.includes(p))),
  readText: async (path) => files[path] ?? null,
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
  it("flags start-up files, conftest and sitecustomize anywhere but /tests", async () => {
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
    expect(await findTampering(changes, [], probe())).toEqual([
      "/app/conftest.py", "/conftest.py", "/etc/ld.so.preload", "/etc/profile.d/zz.sh", "/pytest.ini", "/root/.bashrc",
      "/usr/local/lib/python3.11/dist-packages/sitecustomize.py",
    ]);
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
    expect(await findTampering(changes, [], probe())).toEqual([
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
    ]);
    const files = { "/usr/local/lib/python3.11/dist-packages/requests-2.0.dist-info/entry_points.txt": "[console_scripts]\nx = y:z\n" };
    expect(await findTampering(changes, [], probe([], files))).toEqual([]);
  });

  it("a new interpreter tampers only when it shadows one later on PATH", async () => {
    const changes = withParents([added("/usr/local/bin/bash"), added("/usr/local/bin/python3"), added("/usr/local/bin/node")]);
    const found = await findTampering(changes, [], probe(["/usr/bin/bash", "/usr/bin/python3"]));
    expect(found).toEqual(["/usr/local/bin/bash", "/usr/local/bin/python3"]);
  });

  it("a pytest plugin registered by the agent tampers", async () => {
    const path = "/usr/local/lib/python3.11/dist-packages/evil-1.0.dist-info/entry_points.txt";
    expect(await findTampering(withParents([added(path)]), [], probe([], { [path]: "[pytest11]\nevil = evil\n" }))).toEqual([path]);
  });

  it("paths the task allows, and Proctor's own, are never flagged", async () => {
    const changes = withParents([added("/etc/profile.d/app.sh"), added("/.proctor"), added("/usr/sbin/docker-init"), added("/logs/agent/x"), added("/etc/profile.d/other.sh")]);
    expect(await findTampering(changes, ["/etc/profile.d/app.sh"], probe())).toEqual(["/etc/profile.d/other.sh"]);
  });
});
