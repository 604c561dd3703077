import { afterAll, beforeAll, expect, test } from "vitest";
import { execFileSync } from "node:child_process";
import { appendFile, mkdir, mkdtemp, readdir, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { resolveSources } from "./resolve";
import { parseSourceSpec, type SourceSpec } from "./spec";
import { FetchError, SourceSpecError } from "./errors";

// resolveSources against a real repository over file:// (the CLI's tests use a git daemon).

let work: string;
let repo: string;
let first: string;
let second: string;
const git = (...args: string[]) => execFileSync("git", ["-c", "user.name=t", "-c", "user.email=t@t", ...args], { cwd: repo }).toString().trim();
const spec = (text: string) => parseSourceSpec(text) as SourceSpec;

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), "proctor-resolve-"));
  repo = join(work, "repo");
  await mkdir(join(repo, "tasks", "a"), { recursive: true });
  await mkdir(join(repo, "tasks", "b"), { recursive: true });
  git("init", "-q", "-b", "main");
  await writeFile(join(repo, "tasks", "a", "instruction.md"), "a v1\n");
  await writeFile(join(repo, "tasks", "b", "instruction.md"), "b\n");
  git("add", ".");
  git("commit", "-qm", "one");
  first = git("rev-parse", "HEAD");
  await appendFile(join(repo, "tasks", "a", "instruction.md"), "a v2\n");
  git("commit", "-qam", "two");
  second = git("rev-parse", "HEAD");
});
afterAll(() => rm(work, { recursive: true, force: true }));

test("a branch is pinned to its commit; the second resolve comes from the cache; a resumed run's pins win over the branch", async () => {
  const cacheDir = join(work, "cache");
  const lines: string[] = [];
  const options = { registry: join(work, "none.json"), cacheDir, onProgress: (l: string) => lines.push(l) };
  const [a] = await resolveSources([spec(`git+file://${repo}@main#tasks/a`)], options);
  expect(a?.origin).toEqual({ repository: `file://${repo}`, commit: second, path: "tasks/a" });
  expect(lines.filter((l) => l.startsWith("fetched "))).toHaveLength(1);
  expect(await readdir(join(a?.dir as string))).toEqual(["instruction.md"]);

  lines.length = 0;
  await resolveSources([spec(`git+file://${repo}@main#tasks/a`)], options);
  expect(lines).toEqual([`git+file://${repo}@main#tasks/a: 1 task directory (1 from the cache, 0 fetched) in ${cacheDir}`]);

  const pins = [{ taskId: "a", repository: `file://${repo}`, commit: first, path: "tasks/a" }];
  const [resumed] = await resolveSources([spec(`git+file://${repo}@main#tasks/a`)], { ...options, pins });
  expect(resumed?.origin.commit).toBe(first);
  expect(await readdir(join(cacheDir, "tmp"))).toEqual([]);
});

test("org/name@ref the registry lacks is github.com/org/name at ref: a failure names that repository", async () => {
  await writeFile(join(work, "empty.json"), "[]");
  const error = await resolveSources([spec("proctor-no-such-org/none@main")], { registry: join(work, "empty.json"), cacheDir: join(work, "cache-gh"), timeoutMs: 60_000 }).catch((e: unknown) => e);
  expect(error).toBeInstanceOf(FetchError);
  expect((error as FetchError).repository).toBe("https://github.com/proctor-no-such-org/none.git");
  expect((error as FetchError).message).toMatch(/^could not fetch https:\/\/github\.com\/proctor-no-such-org\/none\.git \(main\): /);
});

test("a registry task whose git_url is no repository URL (ext::, an option) is refused before git runs", async () => {
  for (const url of ["ext::sh -c touch${IFS}/tmp/x", "--upload-pack=touch /tmp/x"]) {
    await writeFile(join(work, "evil.json"), JSON.stringify([{ name: "evil", version: "1", description: "", tasks: [{ name: "t", git_url: url, git_commit_id: first, path: "t" }] }]));
    const error = await resolveSources([spec("evil@1")], { registry: join(work, "evil.json"), cacheDir: join(work, "cache-evil") }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(SourceSpecError);
    expect((error as Error).message).toMatch(/^evil@1 task #1 \("t"\): /);
  }
});
