import { execFile } from "node:child_process";
import { chmod, lstat, mkdir, mkdtemp, readFile, readlink, rm, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join, posix } from "node:path";
import { promisify } from "node:util";

const run = promisify(execFile);

/** The test patch could not be applied to base_commit: a per-trial verifier error. */
export class TestPatchError extends Error {
  override name = "TestPatchError";
}

/** The files a test patch leaves, computed on the host from base_commit (never from the sandbox). */
export interface TestFiles {
  /** Final content of every file the patch creates or changes, relative to the repo root. */
  files: { path: string; data: Buffer; mode: number; link: string | null }[];
  /** Paths the patch deletes (or renames away). */
  deleted: string[];
  /** Every path the patch touches (old and new names). */
  touched: string[];
}

/** Every path a unified / git diff touches, old and new names, without a/ b/ prefixes. */
export function patchPaths(patch: string): string[] {
  const paths = new Set<string>();
  const strip = (raw: string): string | null => {
    let p = raw.split("\t")[0]?.trimEnd() ?? "";
    if (p.startsWith('"') && p.endsWith('"')) p = JSON.parse(p) as string;
    if (p === "/dev/null" || p === "") return null;
    return p.replace(/^[ab]\//, "");
  };
  for (const line of patch.split("\n")) {
    let m: RegExpExecArray | null;
    if ((m = /^(?:---|\+\+\+) (.+)$/.exec(line))) {
      const p = strip(m[1] as string);
      if (p) paths.add(p);
    } else if ((m = /^rename (?:from|to) (.+)$/.exec(line)) || (m = /^copy (?:from|to) (.+)$/.exec(line))) {
      paths.add(m[1] as string);
    } else if ((m = /^diff --git a\/(.+) b\/(.+)$/.exec(line))) {
      // Mode-only and binary changes have no ---/+++ lines.
      if (m[1] === m[2]) paths.add(m[1] as string);
    }
  }
  for (const p of paths) {
    const parts = p.split("/");
    if (p.startsWith("/") || parts.includes("..") || parts.includes(".git") || parts.includes("")) {
      throw new TestPatchError(`test_patch touches ${JSON.stringify(p)}: a patch may only name relative paths inside the repository`);
    }
  }
  return [...paths].sort();
}

async function git(args: string[], cwd?: string): Promise<string> {
  const { stdout } = await run("git", args, { cwd, maxBuffer: 256 * 1024 * 1024, env: { ...process.env, GIT_TERMINAL_PROMPT: "0" } });
  return stdout;
}

function why(error: unknown): string {
  const e = error as { stdout?: string; stderr?: string; message?: string };
  return `${e.stderr ?? ""}${e.stdout ?? ""}`.trim() || e.message || String(error);
}

/**
 * The files `patch` leaves when applied to `commit` of the bare repository `bare`: only the
 * touched files are materialized (from the object store, no checkout), then the patch applies
 * with `git apply`, else `git apply --3way`, else `patch --fuzz=5`. A patch that applies nowhere
 * throws TestPatchError naming the file and hunk.
 */
export async function applyTestPatch(bare: string, commit: string, patch: string): Promise<TestFiles> {
  const touched = patchPaths(patch);
  if (touched.length === 0) throw new TestPatchError("test_patch names no file: it is not a unified diff");
  const parent = await mkdtemp(join(tmpdir(), "proctor-testpatch-"));
  const dir = join(parent, "repo");
  try {
    await git(["init", "--quiet", `--object-format=${commit.length === 64 ? "sha256" : "sha1"}`, "--end-of-options", dir]);
    const listing = await git(["--git-dir", bare, "ls-tree", "-z", "--end-of-options", commit, "--", ...touched]);
    for (const entry of listing.split("\0").filter(Boolean)) {
      const [meta = "", path = ""] = entry.split("\t");
      const [mode, type, id] = meta.split(" ");
      if (type !== "blob" || !id) continue;
      const target = join(dir, path);
      await mkdir(dirname(target), { recursive: true });
      const { stdout } = await run("git", ["--git-dir", bare, "cat-file", "blob", id], { encoding: "buffer", maxBuffer: 256 * 1024 * 1024 });
      if (mode === "120000") await symlink(stdout.toString("utf8"), target);
      else {
        await writeFile(target, stdout);
        if (mode === "100755") await chmod(target, 0o755);
      }
    }
    // A commit of the base files, so --3way finds the preimage blobs.
    await git(["add", "-A"], dir);
    await git(["-c", "user.name=proctor", "-c", "user.email=proctor@localhost", "commit", "--quiet", "--allow-empty", "-m", "base"], dir);
    const patchFile = join(parent, "test.patch");
    await writeFile(patchFile, patch.endsWith("\n") ? patch : `${patch}\n`);
    const attempts: [string, string[]][] = [
      ["git", ["apply", "--verbose", patchFile]],
      ["git", ["apply", "--verbose", "--3way", patchFile]],
      ["patch", ["--batch", "--forward", "--fuzz=5", "-p1", "--no-backup-if-mismatch", "--reject-file=-", "-i", patchFile]],
    ];
    const failures: string[] = [];
    let applied = false;
    for (const [cmd, args] of attempts) {
      try {
        await run(cmd, args, { cwd: dir, maxBuffer: 16 * 1024 * 1024 });
        applied = true;
        break;
      } catch (error) {
        failures.push(`${cmd} ${args.slice(0, -1).join(" ")}: ${why(error).split("\n").slice(-4).join(" | ")}`);
        // A failed --3way leaves conflict markers: start the next try from the base again.
        await git(["reset", "--quiet", "--hard"], dir).catch(() => undefined);
      }
    }
    if (!applied) throw new TestPatchError(`test_patch does not apply to base_commit ${commit}:\n${failures.map((f) => `  ${f}`).join("\n")}`);
    const files: TestFiles["files"] = [];
    const deleted: string[] = [];
    for (const path of touched) {
      const target = join(dir, path);
      const info = await lstat(target).catch(() => null);
      if (info === null) deleted.push(path);
      else if (info.isSymbolicLink()) files.push({ path, data: Buffer.alloc(0), mode: 0o777, link: await readlink(target) });
      else if (info.isFile()) files.push({ path, data: await readFile(target), mode: info.mode & 0o777, link: null });
    }
    return { files, deleted, touched };
  } finally {
    await rm(parent, { recursive: true, force: true });
  }
}

/** The test files a default pytest run targets: Python files the patch leaves in place. */
export function pytestTargets(files: TestFiles): string[] {
  return files.files.filter((f) => f.link === null && posix.extname(f.path) === ".py").map((f) => f.path);
}
