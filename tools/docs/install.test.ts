import { describe, expect, test } from "vitest";
import { execFile } from "node:child_process";
import { mkdtemp, readlink, rm, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { promisify } from "node:util";

const run = promisify(execFile);
const repo = resolve(import.meta.dirname, "../..");
const wrapper = join(repo, "tools/bin/proctor");

async function attempt(file: string, args: string[], options: { cwd?: string; env?: NodeJS.ProcessEnv } = {}) {
  return run(file, args, { cwd: options.cwd ?? repo, env: { ...process.env, ...options.env } }).then(
    (r) => ({ code: 0, stdout: r.stdout, stderr: r.stderr }),
    (e: { code: number; stdout: string; stderr: string }) => ({ code: e.code, stdout: e.stdout, stderr: e.stderr }),
  );
}

describe("the proctor command from a clone", () => {
  test("pnpm install's postinstall links proctor into the bin dir, and the link runs the CLI from any directory", async () => {
    const bin = await mkdtemp(join(tmpdir(), "proctor-bin-"));
    try {
      const linked = await attempt("node", ["tools/bin/link.mjs"], { env: { PROCTOR_BIN_DIR: bin } });
      expect(linked.code).toBe(0);
      expect(linked.stderr).toContain(`linked ${join(bin, "proctor")} -> ${wrapper}`);
      expect(await readlink(join(bin, "proctor"))).toBe(wrapper);
      // Paths resolve from where the user stands.
      const listed = await attempt("proctor", ["tasks", "list", "tasks", "--json"], { cwd: join(repo, "examples"), env: { PATH: `${bin}:${process.env.PATH}` } });
      expect(listed.code, listed.stderr).toBe(0);
      expect(JSON.parse(listed.stdout).tasks.map((t: { id: string }) => t.id)).toContain("greeting-file");
    } finally {
      await rm(bin, { recursive: true, force: true });
    }
  });

  test("the link script leaves a proctor that is not a clone's link alone and says so", async () => {
    const bin = await mkdtemp(join(tmpdir(), "proctor-bin-"));
    try {
      await writeFile(join(bin, "proctor"), "#!/bin/sh\necho npm-installed\n", { mode: 0o755 });
      const kept = await attempt("node", ["tools/bin/link.mjs"], { env: { PROCTOR_BIN_DIR: bin } });
      expect(kept.code).toBe(0);
      expect(kept.stderr).toMatch(/exists and is not a link to a clone; left as it is/);
      await rm(join(bin, "proctor"));
      // A link to another clone is replaced by this one.
      await symlink("/elsewhere/proctor/tools/bin/proctor", join(bin, "proctor"));
      const moved = await attempt("node", ["tools/bin/link.mjs"], { env: { PROCTOR_BIN_DIR: bin } });
      expect(moved.stderr).toContain("(was /elsewhere/proctor/tools/bin/proctor)");
      expect(await readlink(join(bin, "proctor"))).toBe(wrapper);
    } finally {
      await rm(bin, { recursive: true, force: true });
    }
  });

  test("a fresh clone installs clean: no warning, no box about build scripts", async () => {
    const dir = await mkdtemp(join(tmpdir(), "proctor-clone-"));
    try {
      const clone = join(dir, "proctor");
      expect((await attempt("git", ["clone", "-q", repo, clone])).code).toBe(0);
      // Offline from the store this checkout's own install filled; the link goes to a dir of the test's.
      const installed = await attempt("pnpm", ["install", "--frozen-lockfile", "--offline"], { cwd: clone, env: { PROCTOR_BIN_DIR: join(dir, "bin"), CI: "true" } });
      const output = `${installed.stdout}\n${installed.stderr}`;
      expect(installed.code, output).toBe(0);
      expect(output).not.toMatch(/WARN|Ignored build scripts|approve-builds/);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  }, 300_000);

  test("pnpm -s proctor resolves paths from the user's directory and prints nothing but the command's output", async () => {
    const listed = await attempt("pnpm", ["-s", "proctor", "tasks", "list", "tasks", "--json"], { cwd: join(repo, "examples") });
    expect(listed.code, listed.stderr).toBe(0);
    expect(JSON.parse(listed.stdout).tasks).toHaveLength(4);
  });
});
