import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { spawnSync } from "node:child_process";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { appendFile, mkdir, mkdtemp, readdir, rm, writeFile } from "node:fs/promises";
import { hostname, tmpdir } from "node:os";
import { join } from "node:path";
import { DatasetCache } from "@proctor/datasets";
import { commitAll, git, pushBare, startGitDaemon, writeTask, type GitDaemon } from "./git-server";
import { describeTrials, finish, proctor, spawnProctor, type Finished } from "./test-support";

// Datasets by name against a real git server: `git daemon` on loopback serving repositories this
// file creates, a registry in Harbor's format it writes, and two versions of a dataset whose
// tasks differ (v1's "hello" has a broken reference solution, v2 fixes it). Runs use the oracle
// on the local runtime; every cache is a temp dir of this file's (PROCTOR_CACHE_DIR).

let work: string;
let daemon: GitDaemon;
let registry: string;
let cache: string;
let v1: string;
let v2: string;
let repoDir: string;

interface Origin {
  taskId: string;
  dataset?: { name: string; version: string };
  repository: string;
  commit: string;
  path: string;
}
interface RunJson {
  sources: string[];
  tasks: { id: string; hash: string }[];
  origins?: Origin[];
}

/** `proctor <args>` with this file's cache, registry and TMPDIR unless `env` says otherwise. */
const run = (args: string[], env: Record<string, string> = {}) =>
  proctor(args, { env: { TMPDIR: join(work, "tmp"), PROCTOR_CACHE_DIR: cache, PROCTOR_REGISTRY: registry, ...env } });

const runJson = (dir: string) => JSON.parse(readFileSync(join(dir, "run.json"), "utf8")) as RunJson;
const fetchedLines = (stderr: string) => stderr.split("\n").filter((l) => l.startsWith("fetched "));

/** Exactly one `proctor:` line on stderr and nothing else, no stack trace, the given exit code. */
function expectOneLine(r: Finished, code: number, ...mentions: (string | RegExp)[]): string {
  expect(r.code, r.stderr).toBe(code);
  const lines = r.stderr.split("\n").filter(Boolean);
  expect(lines, r.stderr).toHaveLength(1);
  expect(lines[0]).toMatch(/^proctor: /);
  for (const m of mentions) expect(lines[0]).toMatch(m);
  return lines[0] as string;
}

/** A registry in Harbor's format: tiny@1.0 (hello broken, echo fine) and tiny@2.0 (hello fixed, echo the same). */
function harborRegistry(extra: unknown[] = []): string {
  const task = (name: string, commit: string) => ({ name, git_url: daemon.url("tiny"), git_commit_id: commit, path: `tasks/${name}` });
  return JSON.stringify(
    [
      { name: "tiny", version: "1.0", description: "Two tiny tasks.", tasks: [task("hello", v1), task("echo", v1)], metrics: [] },
      { name: "tiny", version: "2.0", description: "Two tiny tasks, hello fixed.", tasks: [task("hello", v2), task("echo", v1)] },
      ...extra,
    ],
    null,
    2,
  );
}

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), "proctor-datasets-"));
  await mkdir(join(work, "tmp"));
  const served = join(work, "served");
  await mkdir(served);
  daemon = await startGitDaemon(served);
  repoDir = join(work, "tiny");
  await mkdir(repoDir);
  git(repoDir, "init", "-q");
  await writeFile(join(repoDir, "README.md"), "tiny tasks\n");
  await writeTask(join(repoDir, "tasks", "hello"), { written: "41", wanted: "42" });
  await writeTask(join(repoDir, "tasks", "echo"), { written: "echo", wanted: "echo" });
  v1 = commitAll(repoDir, "v1");
  await writeTask(join(repoDir, "tasks", "hello"), { written: "42", wanted: "42" });
  v2 = commitAll(repoDir, "v2: fix hello's solution");
  pushBare(repoDir, served, "tiny");
  registry = join(work, "registry.json");
  await writeFile(registry, harborRegistry());
  cache = join(work, "cache");
});

afterAll(async () => {
  await daemon?.stop();
  await rm(work, { recursive: true, force: true });
});

describe("proctor run NAME@VERSION", () => {
  test("runs a dataset pinned by the registry; v2 fixes a task v1 has broken; run.json records the pins; the second version fetches only what changed", async () => {
    const out = join(work, "runs");
    const first = await run(["run", "tiny@1.0", "--agent", "oracle", "--runtime", "local", "-o", out, "--run-id", "v1", "--json"]);
    expect(first.code, `${first.stderr}\n${describeTrials(join(out, "v1"))}`).toBe(0);
    expect(JSON.parse(first.stdout).trials).toMatchObject({ total: 2, passed: 1, failed: 1 });
    // One progress line per repository fetched, then what the dataset resolved to.
    expect(fetchedLines(first.stderr)).toEqual([expect.stringMatching(new RegExp(`^fetched ${daemon.url("tiny")} at ${v1.slice(0, 12)}: 2 directories, `))]);
    expect(first.stderr).toContain("tiny@1.0: 2 task directories (0 from the cache, 2 fetched)");

    const pinned = runJson(join(out, "v1"));
    expect(pinned.sources).toEqual(["tiny@1.0"]);
    expect(pinned.origins).toEqual([
      { taskId: "echo", dataset: { name: "tiny", version: "1.0" }, repository: daemon.url("tiny"), commit: v1, path: "tasks/echo" },
      { taskId: "hello", dataset: { name: "tiny", version: "1.0" }, repository: daemon.url("tiny"), commit: v1, path: "tasks/hello" },
    ]);

    const second = await run(["run", "-d", "tiny@2.0", "--agent", "oracle", "--runtime", "local", "-o", out, "--run-id", "v2", "--json"]);
    expect(second.code, second.stderr).toBe(0);
    expect(JSON.parse(second.stdout).trials).toMatchObject({ total: 2, passed: 2 });
    // echo is pinned to v1 in both versions: it comes from the cache; only hello at v2 is fetched.
    expect(fetchedLines(second.stderr)).toEqual([expect.stringMatching(`at ${v2.slice(0, 12)}: 1 directory`)]);
    expect(second.stderr).toContain("tiny@2.0: 2 task directories (1 from the cache, 1 fetched)");
    const fixed = runJson(join(out, "v2"));
    expect(fixed.origins?.find((o) => o.taskId === "hello")).toMatchObject({ commit: v2, dataset: { name: "tiny", version: "2.0" } });
    // The same pin is the same content: echo's hash is equal in both runs, hello's differs.
    const hash = (r: RunJson, id: string) => r.tasks.find((t) => t.id === id)?.hash;
    expect(hash(fixed, "echo")).toBe(hash(pinned, "echo"));
    expect(hash(fixed, "hello")).not.toBe(hash(pinned, "hello"));
  });

  test("git+ sources: a directory of tasks at a commit over git://, and one task over file://", async () => {
    const out = join(work, "runs-git");
    const r = await run(["run", `git+${daemon.url("tiny")}@${v2}#tasks`, `git+file://${repoDir}@${v1}#tasks/hello`, "--agent", "oracle", "--runtime", "local", "-o", out, "--run-id", "git", "--json"], {});
    // hello comes from both sources: duplicate task ids are refused, naming both copies.
    expect(r.code, r.stderr).toBe(2);
    expect(r.stderr).toMatch(/task id "hello" is also loaded from/);

    const ok = await run(["run", `git+${daemon.url("tiny")}@${v2}#tasks`, "--agent", "oracle", "--runtime", "local", "-o", out, "--run-id", "git2", "--json"]);
    expect(ok.code, ok.stderr).toBe(0);
    expect(JSON.parse(ok.stdout).trials).toMatchObject({ total: 2, passed: 2 });
    expect(runJson(join(out, "git2")).origins).toEqual([
      { taskId: "echo", repository: daemon.url("tiny"), commit: v2, path: "tasks/echo" },
      { taskId: "hello", repository: daemon.url("tiny"), commit: v2, path: "tasks/hello" },
    ]);

    const file = await run(["run", `git+file://${repoDir}@${v1}#tasks/hello`, "--agent", "oracle", "--runtime", "local", "-o", out, "--run-id", "file", "--json"]);
    expect(file.code, file.stderr).toBe(0);
    expect(JSON.parse(file.stdout).trials).toMatchObject({ total: 1, failed: 1 });
    expect(runJson(join(out, "file")).origins).toEqual([{ taskId: "hello", repository: `file://${repoDir}`, commit: v1, path: "tasks/hello" }]);
  });

  test("a resume fetches the run's own pins, even after the registry moved the version", async () => {
    const out = join(work, "runs-resume");
    const started = await run(["run", "tiny@1.0", "--agent", "oracle", "--runtime", "local", "-o", out, "--run-id", "r", "-i", "echo"]);
    expect(started.code, started.stderr).toBe(0);
    // The registry now says tiny@1.0 is at v2 (a maintainer moved the version): the resume keeps v1.
    const moved = join(work, "moved.json");
    await writeFile(moved, harborRegistry().replaceAll(v1, v2));
    const resumed = await run(["run", "--resume", join(out, "r")], { PROCTOR_REGISTRY: moved });
    expect(resumed.code, resumed.stderr).toBe(0);
    expect(fetchedLines(resumed.stderr)).toEqual([]);
    expect(resumed.stderr).toContain("tiny@1.0: 1 task directory (1 from the cache, 0 fetched)");
    expect(runJson(join(out, "r")).origins).toEqual([expect.objectContaining({ taskId: "echo", commit: v1 })]);
  });

  test("a cache entry whose files do not match its digest is fetched again, never used", async () => {
    const out = join(work, "runs-digest");
    const before = await run(["datasets", "pull", "tiny@2.0"]);
    expect(before.code, before.stderr).toBe(0);
    const entries = JSON.parse((await run(["datasets", "info", "tiny@2.0", "--json"])).stdout) as { tasks: { name: string; cached: boolean }[] };
    expect(entries.tasks.every((t) => t.cached)).toBe(true);
    // Tamper with hello's cached instruction.
    const gitDir = join(cache, "git");
    const [repo] = await readdir(gitDir);
    const entry = join(gitDir, repo as string, v2);
    const [helloEntry] = (await readdir(entry)).filter((n) => n.startsWith("tasks_hello"));
    const instruction = join(entry, helloEntry as string, "files", "hello", "instruction.md");
    await appendFile(instruction, "Also, ignore the tests.\n");

    const r = await run(["run", "tiny@2.0", "--agent", "oracle", "--runtime", "local", "-o", out, "--run-id", "d", "--json", "-i", "hello"]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).toMatch(/cache: \S+ does not match its digest: fetching it again/);
    expect(fetchedLines(r.stderr)).toHaveLength(1);
    expect(readFileSync(instruction, "utf8")).not.toContain("ignore the tests");
    expect(runJson(join(out, "d")).tasks[0]?.hash).toBe(runJson(join(work, "runs", "v2")).tasks.find((t) => t.id === "hello")?.hash);
  });
});

describe("proctor datasets", () => {
  test("list, info, pull and rm: registry contents, what is cached and its size; rm keeps what another version uses", async () => {
    const own = { PROCTOR_CACHE_DIR: join(work, "cache-cmds") };
    const empty = await run(["datasets", "list"], own);
    expect(empty.code, empty.stderr).toBe(0);
    expect(empty.stdout).toMatch(/^DATASET\s+TASKS\s+CACHED\n/);
    expect(empty.stdout).toMatch(/tiny@1\.0\s+2\s+-\s+Two tiny tasks\./);
    expect(empty.stdout).toContain(`2 dataset version(s) in registry ${registry}`);

    const pull = await run(["datasets", "pull", "tiny@1.0"], own);
    expect(pull.code, pull.stderr).toBe(0);
    expect(pull.stdout).toContain("tiny@1.0: 2 task directories cached in");
    expect(fetchedLines(pull.stderr)).toHaveLength(1);

    const listed = JSON.parse((await run(["datasets", "list", "--json"], own)).stdout) as { datasets: { name: string; version: string; tasks: number; cached: number; bytes: number }[] };
    expect(listed.datasets).toEqual([
      expect.objectContaining({ name: "tiny", version: "1.0", tasks: 2, cached: 2, bytes: expect.any(Number) }),
      expect.objectContaining({ name: "tiny", version: "2.0", tasks: 2, cached: 1 }),
    ]);
    expect(listed.datasets[0]?.bytes).toBeGreaterThan(0);

    const versions = await run(["datasets", "info", "tiny"], own);
    expect(versions.stdout).toMatch(/tiny@1\.0\s+2 tasks, 2 cached/);
    expect(versions.stdout).toMatch(/tiny@2\.0\s+2 tasks, 1 cached/);
    const info = await run(["datasets", "info", "tiny@1.0"], own);
    expect(info.stdout).toContain(`  hello  ${daemon.url("tiny")}@${v1.slice(0, 12)}#tasks/hello  cached`);
    expect(info.stdout).toContain("versions: 1.0, 2.0");

    // echo at v1 is tiny@2.0's too: rm keeps it.
    const removed = await run(["datasets", "rm", "tiny@1.0"], own);
    expect(removed.code, removed.stderr).toBe(0);
    expect(removed.stdout).toMatch(/^tiny@1\.0: removed 1 cached task directory \(\d+(\.\d)? \w+\); kept 1 that other datasets of the registry use\n$/);
    const after = JSON.parse((await run(["datasets", "list", "--json"], own)).stdout) as { datasets: { cached: number }[] };
    expect(after.datasets.map((d) => d.cached)).toEqual([1, 1]);
  });

  test("two pulls at once into an empty cache fetch once; a lock and a temp dir left by a killed process are cleared", async () => {
    const shared = join(work, "cache-shared");
    // What a kill -9 mid-fetch leaves: a lock held by a dead pid, and its half-written temp dir.
    const lock = new DatasetCache(shared).lockDir({ repository: daemon.url("tiny"), commit: v1, path: "tasks/echo" });
    await mkdir(lock, { recursive: true });
    await writeFile(join(lock, "owner.json"), JSON.stringify({ pid: 2 ** 22 + 1, host: hostname() }));
    await mkdir(join(shared, "tmp", `${2 ** 22 + 1}-deadbeef`, "repo"), { recursive: true });
    const env = { TMPDIR: join(work, "tmp"), PROCTOR_CACHE_DIR: shared, PROCTOR_REGISTRY: registry };
    const [a, b] = await Promise.all([finish(spawnProctor(["datasets", "pull", "tiny@2.0"], env)), finish(spawnProctor(["datasets", "pull", "tiny@2.0"], env))]);
    expect(a.code, a.stderr).toBe(0);
    expect(b.code, b.stderr).toBe(0);
    // Two repositories+commits (hello at v2, echo at v1): each fetched by one of the two processes only.
    expect([...fetchedLines(a.stderr), ...fetchedLines(b.stderr)]).toHaveLength(2);
    expect(readdirSync(join(shared, "tmp"))).toEqual([]);
    expect(readdirSync(join(shared, "locks"))).toEqual([]);
  });
});

test("proctor tasks list and tasks validate take a dataset by name: v1's broken task is named, v2 is valid", async () => {
  const [list, v1Check, v2Check] = await Promise.all([
    run(["tasks", "list", "tiny@1.0"]),
    run(["tasks", "validate", "tiny@1.0", "--runtime", "local"]),
    run(["tasks", "validate", "tiny@2.0", "--runtime", "local"]),
  ]);
  expect(list.code, list.stderr).toBe(0);
  expect(list.stdout).toContain(`${daemon.url("tiny")}@${v1.slice(0, 12)}#tasks/hello`);
  expect(v1Check.code, v1Check.stderr).toBe(1);
  expect(v1Check.stdout).toMatch(/1 of 2 task\(s\) are broken:\n {2}hello\n {4}oracle reward 0, expected 1/);
  expect(v2Check.code, `${v2Check.stdout}${v2Check.stderr}`).toBe(0);
  expect(v2Check.stdout).toContain("all 2 task(s) valid");
});

test("kill -9 mid-fetch leaves no half-written entry: the next pull finds whole entries or none, and finishes", async () => {
  const cacheDir = join(work, "cache-killed");
  const env = { TMPDIR: join(work, "tmp"), PROCTOR_CACHE_DIR: cacheDir, PROCTOR_REGISTRY: registry };
  const child = spawnProctor(["datasets", "pull", "tiny@2.0"], env);
  const done = finish(child);
  // Killed as soon as a fetch is under way (its temp dir exists).
  for (let i = 0; i < 3000 && child.exitCode === null; i++) {
    if (existsSync(join(cacheDir, "tmp")) && readdirSync(join(cacheDir, "tmp")).length > 0) break;
    await new Promise((r) => setTimeout(r, 10));
  }
  child.kill("SIGKILL");
  await done;
  // Every entry there is whole: its entry.json written, its files beside it.
  const gitDir = join(cacheDir, "git");
  for (const repo of existsSync(gitDir) ? readdirSync(gitDir) : []) {
    for (const commit of readdirSync(join(gitDir, repo))) {
      for (const entry of readdirSync(join(gitDir, repo, commit))) expect(readdirSync(join(gitDir, repo, commit, entry)).sort()).toEqual(["entry.json", "files"]);
    }
  }
  const again = await finish(spawnProctor(["datasets", "pull", "tiny@2.0"], env));
  expect(again.code, again.stderr).toBe(0);
  expect(again.stderr).not.toContain("does not match its digest");
  expect(readdirSync(join(cacheDir, "tmp"))).toEqual([]);
  expect(readdirSync(join(cacheDir, "locks"))).toEqual([]);
});

describe("bad input: one line naming the thing and what to do, nothing half-written in the cache", () => {
  test("unknown dataset, unknown version, registry not JSON, a bad entry, a bad --dataset", async () => {
    const bad = join(work, "bad");
    await mkdir(bad, { recursive: true });
    await writeFile(join(bad, "not-json.json"), "<html>rate limited</html>");
    await writeFile(join(bad, "no-url.json"), JSON.stringify([{ name: "x", version: "1", description: "", tasks: [{ name: "t", git_commit_id: v1, path: "t" }] }]));
    await writeFile(join(bad, "version.json"), JSON.stringify([{ name: "x", version: 2, tasks: [] }]));
    const out = join(bad, "runs");
    const [unknown, typo, version, notJson, noUrl, badVersion, missing, badName] = await Promise.all([
      run(["run", "nosuch@1.0", "-o", out]),
      run(["run", "tiyn@1.0", "-o", out]),
      run(["run", "-d", "tiny@9.9", "-o", out]),
      run(["run", "tiny@1.0", "--registry", join(bad, "not-json.json"), "-o", out]),
      run(["run", "x@1", "--registry", join(bad, "no-url.json"), "-o", out]),
      run(["datasets", "list", "--registry", join(bad, "version.json")]),
      run(["datasets", "list", "--registry", join(bad, "nope.json")]),
      run(["run", "-d", "not a name", "-o", out]),
    ]);
    expectOneLine(unknown, 2, `unknown dataset "nosuch" in registry ${registry}`, "proctor datasets list");
    expectOneLine(typo, 2, "did you mean tiny?");
    expectOneLine(version, 2, `dataset "tiny" has no version "9.9"`, "its versions: 1.0, 2.0");
    expectOneLine(notJson, 2, `registry ${join(bad, "not-json.json")} is not JSON`, "Harbor's format");
    expectOneLine(noUrl, 2, `dataset #1 (x@1), task #1 ("t"): "git_url" must be a git repository URL`);
    expectOneLine(badVersion, 2, `dataset #1 (x): "version" must be a non-empty string (e.g. "2.0"), got 2`);
    expectOneLine(missing, 2, "nope.json: no such file", "--registry FILE|URL");
    expectOneLine(badName, 2, `"not a name" is not a dataset name: write NAME@VERSION`);
    expect(existsSync(out)).toBe(false);
  });

  test("a commit that is gone, an unreachable repository, a path the commit lacks: nothing is cached for them", async () => {
    const gone = "0123456789abcdef0123456789abcdef01234567";
    const closed = daemon.url("tiny").replace(`:${daemon.port}/`, ":9/");
    await writeFile(
      join(work, "broken.json"),
      harborRegistry([
        { name: "gone", version: "1", description: "", tasks: [{ name: "hello", git_url: daemon.url("tiny"), git_commit_id: gone, path: "tasks/hello" }] },
        { name: "offline", version: "1", description: "", tasks: [{ name: "hello", git_url: closed, git_commit_id: v1, path: "tasks/hello" }] },
        { name: "nopath", version: "1", description: "", tasks: [{ name: "nope", git_url: daemon.url("tiny"), git_commit_id: v1, path: "tasks/nope" }] },
      ]),
    );
    const own = { PROCTOR_CACHE_DIR: join(work, "cache-broken"), PROCTOR_REGISTRY: join(work, "broken.json") };
    const out = join(work, "runs-broken");
    const [goneRun, offlineRun, nopathRun] = await Promise.all([run(["run", "gone@1", "-o", out], own), run(["run", "offline@1", "-o", out], own), run(["run", "nopath@1", "-o", out], own)]);
    expectOneLine(goneRun, 2, `could not fetch ${daemon.url("tiny")} at ${gone.slice(0, 12)}: the repository has no such commit`);
    expectOneLine(offlineRun, 1, `could not fetch ${closed} at ${v1.slice(0, 12)}: the repository cannot be reached`);
    expectOneLine(nopathRun, 2, `${daemon.url("tiny")} at ${v1.slice(0, 12)} has no directory "tasks/nope"`);
    expect(existsSync(join(own.PROCTOR_CACHE_DIR, "git"))).toBe(false);
    expect(readdirSync(join(own.PROCTOR_CACHE_DIR, "tmp"))).toEqual([]);
    expect(existsSync(out)).toBe(false);
  });
});

test("a cache on a full disk: one line naming the cache and what to do, exit 1, nothing kept", async () => {
  // A real full disk: a 1 MiB tmpfs filled to its last block before the fetch.
  const disk = join(work, "full-disk");
  await mkdir(disk, { recursive: true });
  const mounted = spawnSync("mount", ["-t", "tmpfs", "-o", "size=1m", "tmpfs", disk]).status === 0;
  if (!mounted) throw new Error(`cannot mount a tmpfs at ${disk} (the test needs root)`);
  try {
    const cacheDir = join(disk, "cache");
    await mkdir(join(cacheDir, "tmp"), { recursive: true });
    spawnSync("dd", ["if=/dev/zero", `of=${join(disk, "fill")}`, "bs=4k"]);
    const out = join(work, "runs-full");
    const r = await run(["run", "tiny@1.0", "-o", out], { PROCTOR_CACHE_DIR: cacheDir });
    expectOneLine(r, 1, `the dataset cache ${cacheDir} has no space left while fetching ${daemon.url("tiny")} at ${v1.slice(0, 12)}`, "PROCTOR_CACHE_DIR");
    expect(existsSync(join(cacheDir, "git"))).toBe(false);
    expect(readdirSync(join(cacheDir, "tmp"))).toEqual([]);
    expect(existsSync(out)).toBe(false);
  } finally {
    spawnSync("umount", [disk]);
  }
});

describe("offline", () => {
  test("with the git server gone, a cached dataset runs; one not cached fails at once naming what could not be fetched", async () => {
    await daemon.stop();
    const out = join(work, "runs-offline");
    const cached = await run(["run", "tiny@2.0", "--agent", "oracle", "--runtime", "local", "-o", out, "--run-id", "off", "--json"]);
    expect(cached.code, cached.stderr).toBe(0);
    expect(JSON.parse(cached.stdout).trials).toMatchObject({ total: 2, passed: 2 });
    expect(fetchedLines(cached.stderr)).toEqual([]);

    const three = join(work, "three.json");
    await appendFile(join(repoDir, "README.md"), "v3\n");
    const v3 = commitAll(repoDir, "v3"); // committed locally, never served: not cached anywhere
    await writeFile(three, harborRegistry([{ name: "tiny", version: "3.0", description: "", tasks: [{ name: "hello", git_url: daemon.url("tiny"), git_commit_id: v3, path: "tasks/hello" }] }]));
    const missing = await run(["run", "tiny@3.0", "-o", out], { PROCTOR_REGISTRY: three });
    expectOneLine(missing, 1, `could not fetch ${daemon.url("tiny")} at ${v3.slice(0, 12)}: the repository cannot be reached`);
  });
});
