/**
 * Datasets by name: how long a run's resolve of a dataset takes when its tasks are already in the
 * cache (each entry's digest recomputed, nothing fetched) against a fresh fetch into an empty cache
 * (one shallow, sparse `git fetch` per repository and commit over git://, then the digests).
 * The dataset: --tasks native task directories (each with --kb KB of files) spread over --repos
 * repositories, served by `git daemon` on loopback, named in a registry in Harbor's format.
 * Rounds alternate fresh and cached so load drift hits both alike.
 *
 *   node --conditions=@proctor/source --import tsx bench/dataset-cache/index.ts [--tasks 40] [--repos 2] [--kb 16] [--rounds 5] [--dir /tmp] [--keep]
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { parseSourceSpec, resolveSources, type SourceSpec } from "../../packages/datasets/src/index";
import { commitAll, git, pushBare, startGitDaemon, writeTask } from "../../apps/cli/src/git-server";
import { reportFigure } from "../lib/figures";

const { values } = parseArgs({
  options: {
    tasks: { type: "string", default: "40" },
    repos: { type: "string", default: "2" },
    kb: { type: "string", default: "16" },
    rounds: { type: "string", default: "5" },
    dir: { type: "string", default: tmpdir() },
    keep: { type: "boolean", default: false },
  },
});
const tasks = Number(values.tasks);
const repos = Number(values.repos);
const kb = Number(values.kb);
const rounds = Number(values.rounds);
for (const [flag, n] of [["--tasks", tasks], ["--repos", repos], ["--kb", kb], ["--rounds", rounds]] as const) {
  if (!Number.isInteger(n) || n < 1) {
    console.error(`${flag} must be a whole number >= 1`);
    process.exit(2);
  }
}

const work = mkdtempSync(join(values.dir, "proctor-bench-dataset-cache-"));
process.on("exit", () => {
  if (!values.keep) rmSync(work, { recursive: true, force: true });
});
process.on("SIGINT", () => process.exit(130));

// ---------- the repositories, the daemon, the registry ----------
const served = join(work, "served");
mkdirSync(served);
const daemon = await startGitDaemon(served);
const registryTasks: { name: string; git_url: string; git_commit_id: string; path: string }[] = [];
for (let r = 0; r < repos; r++) {
  const repo = join(work, `repo-${r}`);
  mkdirSync(repo);
  git(repo, "init", "-q");
  // Other content beside the tasks, as a real dataset repository has: a sparse fetch leaves it out.
  writeFileSync(join(repo, "README.md"), "x".repeat(64 * 1024));
  const mine: string[] = [];
  for (let t = r; t < tasks; t += repos) {
    const name = `task-${String(t).padStart(3, "0")}`;
    await writeTask(join(repo, "tasks", name), { written: "ok", wanted: "ok" });
    writeFileSync(join(repo, "tasks", name, "tests", "data.txt"), `${name}\n`.repeat(Math.ceil((kb * 1024) / (name.length + 1))));
    mine.push(name);
  }
  const commit = commitAll(repo, "tasks");
  pushBare(repo, served, `repo-${r}`);
  for (const name of mine) registryTasks.push({ name, git_url: daemon.url(`repo-${r}`), git_commit_id: commit, path: `tasks/${name}` });
}
const registry = join(work, "registry.json");
writeFileSync(registry, JSON.stringify([{ name: "bench", version: "1.0", description: `${tasks} tasks`, tasks: registryTasks }]));
const spec = parseSourceSpec("bench@1.0") as SourceSpec;

// ---------- timing ----------
const resolveOnce = async (cacheDir: string) => {
  const started = performance.now();
  const dirs = await resolveSources([spec], { registry, cacheDir });
  const ms = performance.now() - started;
  if (dirs.length !== tasks) throw new Error(`resolved ${dirs.length} task dirs, want ${tasks}`);
  return ms;
};
const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? (s[(s.length - 1) / 2] as number) : ((s[s.length / 2 - 1] as number) + (s[s.length / 2] as number)) / 2;
};

const loadBefore = loadavg()[0] ?? 0;
const warm = join(work, "cache-warm");
await resolveOnce(warm); // untimed: fills the cache the cached rounds read
const fresh: number[] = [];
const cached: number[] = [];
for (let i = 0; i < rounds; i++) {
  const empty = join(work, `cache-${i}`);
  const order = i % 2 === 0 ? ["fresh", "cached"] : ["cached", "fresh"];
  for (const which of order) {
    if (which === "fresh") fresh.push(await resolveOnce(empty));
    else cached.push(await resolveOnce(warm));
  }
  rmSync(empty, { recursive: true, force: true });
}
await daemon.stop();

const f = median(fresh);
const c = median(cached);
console.error(`dataset-cache: ${tasks} tasks in ${repos} repositories, ${kb} KB each; ${rounds} rounds; load average ${loadBefore.toFixed(1)} -> ${(loadavg()[0] ?? 0).toFixed(1)}`);
console.error(`  fresh fetch  median ${f.toFixed(0)} ms  (${fresh.map((x) => x.toFixed(0)).join(", ")})`);
console.error(`  from cache   median ${c.toFixed(0)} ms  (${cached.map((x) => x.toFixed(0)).join(", ")})`);
console.error(`  cached / fresh = ${(c / f).toFixed(3)}x`);
reportFigure({
  bench: "dataset-cache",
  figure: `resolve a ${tasks}-task dataset: from the cache (digests checked) vs a fresh fetch over git://`,
  proctor: { value: Math.round(c), unit: "ms" },
  baseline: { value: Math.round(f), unit: "ms", label: "fresh fetch" },
  ratio: c / f,
  ratioMeaning: "cached resolve / fresh fetch",
  target: { on: "ratio", op: "<=", value: 0.2 },
});
