// Soak: run every Nx project's vitest suite N times in a row while a CPU + IO load runs beside
// it, and print every test that failed even once. Entry point: tools/ci/soak (see --help).
import { spawn, spawnSync } from "node:child_process";
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { cpus, tmpdir } from "node:os";
import { dirname, join, relative } from "node:path";
import { fileURLToPath } from "node:url";

const ROOT = join(dirname(fileURLToPath(import.meta.url)), "../..");
const USAGE = `usage: tools/ci/soak [N=10] [options]

With CI=true (the default) it first readies the machine as .ci/run does (Debian tools, Docker
engine, test images). Then it runs lint + typecheck once, and the vitest suite of every Nx project
N times in a row under a CPU + IO load (stress-ng, installed with apt-get when missing and
possible; else busy loops on every core plus a dd writer). Prints every test that failed even once with its count, then
"soak: G/N runs green under load". Exits 1 if any run (or lint/typecheck) failed.

options:
  --projects a,b      only these projects (package name or folder: auth, @proctor/engine, apps/cli)
  --parallel P        projects run at once (default: nx.json "parallel", else 2)
  --load KIND         stress-ng | builtin | none (default: stress-ng, falling back to builtin)
  --cpu-workers W     CPU hogs (default: one per core)
  --no-static         skip lint + typecheck
  --no-ci             do not set CI=true (Docker tests may then skip instead of failing)
  --timeout-min M     kill a project's run after M minutes (default 30)
  --out DIR           where reports and logs go (default: a new temp dir, kept)`;

function parseArgs(argv) {
  const options = { runs: 10, projects: null, parallel: null, load: "stress-ng", cpuWorkers: cpus().length, staticChecks: true, ci: true, timeoutMin: 30, out: null };
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    const value = () => {
      const next = argv[++i];
      if (next === undefined) fail(`${arg} needs a value`);
      return next;
    };
    if (arg === "-h" || arg === "--help") {
      console.log(USAGE);
      process.exit(0);
    } else if (/^\d+$/.test(arg)) options.runs = Number(arg);
    else if (arg === "--projects") options.projects = value().split(",").filter(Boolean);
    else if (arg === "--parallel") options.parallel = positive(arg, value());
    else if (arg === "--load") options.load = value();
    else if (arg === "--cpu-workers") options.cpuWorkers = positive(arg, value());
    else if (arg === "--no-static") options.staticChecks = false;
    else if (arg === "--no-ci") options.ci = false;
    else if (arg === "--timeout-min") options.timeoutMin = positive(arg, value());
    else if (arg === "--out") options.out = value();
    else fail(`unknown argument ${JSON.stringify(arg)}\n\n${USAGE}`);
  }
  if (options.runs < 1) fail("N must be at least 1");
  if (!["stress-ng", "builtin", "none"].includes(options.load)) fail(`--load must be stress-ng, builtin or none, got ${JSON.stringify(options.load)}`);
  return options;
}

function positive(name, text) {
  const n = Number(text);
  if (!Number.isInteger(n) || n < 1) fail(`${name} must be a positive integer, got ${JSON.stringify(text)}`);
  return n;
}

function fail(message) {
  console.error(`soak: ${message}`);
  process.exit(2);
}

/** Every Nx project with a test target, with its folder (from the pnpm workspace's package.json names). */
function testProjects(selected) {
  const env = { ...process.env, NX_DAEMON: "false", NX_NO_CLOUD: "true", NX_TUI: "false" };
  const shown = spawnSync("pnpm", ["exec", "nx", "show", "projects", "--with-target", "test", "--json"], { cwd: ROOT, env, encoding: "utf8" });
  if (shown.status !== 0) fail(`nx show projects failed:\n${shown.stderr}`);
  const names = JSON.parse(shown.stdout.slice(shown.stdout.indexOf("[")));
  const roots = new Map();
  for (const group of ["packages", "apps"]) {
    for (const dir of readdirSync(join(ROOT, group))) {
      const manifest = join(ROOT, group, dir, "package.json");
      if (existsSync(manifest)) roots.set(JSON.parse(readFileSync(manifest, "utf8")).name, `${group}/${dir}`);
    }
  }
  // Projects named in a project.json: tools (tools/pack) and top-level ones (deploy).
  for (const dir of [...readdirSync(join(ROOT, "tools")).map((d) => `tools/${d}`), ...readdirSync(ROOT)]) {
    const config = join(ROOT, dir, "project.json");
    if (existsSync(config)) roots.set(JSON.parse(readFileSync(config, "utf8")).name, dir);
  }
  let projects = names.map((name) => ({ name, root: roots.get(name) ?? fail(`no folder found for project ${name}`) }));
  if (selected) {
    const wanted = (p, s) => p.name === s || p.root === s || p.name === `@proctor/${s}` || p.root.endsWith(`/${s}`);
    for (const s of selected) if (!projects.some((p) => wanted(p, s))) fail(`unknown project ${JSON.stringify(s)}; known: ${projects.map((p) => p.root).join(", ")}`);
    projects = projects.filter((p) => selected.some((s) => wanted(p, s)));
  }
  return projects.sort((a, b) => a.root.localeCompare(b.root));
}

/** Starts the load in its own process group; returns a stop function. */
function startLoad(options, workDir) {
  if (options.load === "none") return { describe: "no load", stop: () => {} };
  let kind = options.load;
  if (kind === "stress-ng" && !ensureStressNg()) {
    console.log("soak: stress-ng is not available (and could not be installed); using the built-in load");
    kind = "builtin";
  }
  const scratch = join(workDir, "load");
  mkdirSync(scratch, { recursive: true });
  let child;
  let describe;
  if (kind === "stress-ng") {
    // CPU hogs on every core plus one disk writer (write/read/unlink of 256 MB files).
    const args = ["--cpu", String(options.cpuWorkers), "--hdd", "1", "--hdd-bytes", "256M", "--temp-path", scratch, "--timeout", "0", "--quiet"];
    child = spawn("stress-ng", args, { detached: true, stdio: "ignore" });
    describe = `stress-ng ${args.join(" ")}`;
  } else {
    const script = [
      `for i in $(seq ${options.cpuWorkers}); do (while :; do :; done) & done`,
      `(while :; do dd if=/dev/zero of="${scratch}/dd.bin" bs=1M count=256 conv=fsync status=none; rm -f "${scratch}/dd.bin"; done) &`,
      "wait",
    ].join("\n");
    child = spawn("bash", ["-c", script], { detached: true, stdio: "ignore" });
    describe = `built-in: ${options.cpuWorkers} busy loop(s) + a dd writer (256 MB, fsync)`;
  }
  const stop = () => {
    try {
      process.kill(-child.pid, "SIGKILL");
    } catch {
      // already gone
    }
    rmSync(scratch, { recursive: true, force: true });
  };
  return { describe, stop };
}

function ensureStressNg() {
  if (spawnSync("stress-ng", ["--version"]).status === 0) return true;
  if (process.getuid?.() !== 0) return false;
  console.log("soak: installing stress-ng (apt-get)");
  const env = { ...process.env, DEBIAN_FRONTEND: "noninteractive" };
  spawnSync("apt-get", ["update", "-qq"], { stdio: "ignore", env });
  spawnSync("apt-get", ["install", "-y", "-qq", "stress-ng"], { stdio: "ignore", env });
  return spawnSync("stress-ng", ["--version"]).status === 0;
}

/**
 * Runs a command in its own process group, killed after timeoutMin; resolves with its exit code,
 * whether it timed out, its output (also written to `log`) and how long it took.
 */
function runLogged(command, args, { cwd, env, log, timeoutMin }) {
  return new Promise((resolve) => {
    const started = Date.now();
    const child = spawn(command, args, { cwd, env, detached: true, stdio: ["ignore", "pipe", "pipe"] });
    const chunks = [];
    child.stdout.on("data", (c) => chunks.push(c));
    child.stderr.on("data", (c) => chunks.push(c));
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      try {
        process.kill(-child.pid, "SIGKILL");
      } catch {
        // gone
      }
    }, timeoutMin * 60_000);
    child.on("close", (code) => {
      clearTimeout(timer);
      const text = Buffer.concat(chunks).toString();
      writeFileSync(log, text);
      resolve({ code, timedOut, text, seconds: (Date.now() - started) / 1000 });
    });
  });
}

/** Runs one project's vitest with the JSON reporter; resolves with what the report says. */
async function runProject(project, runDir, options) {
  if (project.root.startsWith("tools/")) return runNxTarget(project, runDir, options);
  const cwd = join(ROOT, project.root);
  const vitest = join(dirname(createRequire(join(cwd, "package.json")).resolve("vitest/package.json")), "vitest.mjs");
  const slug = project.root.replace(/\//g, "-");
  const report = join(runDir, `${slug}.json`);
  const log = join(runDir, `${slug}.log`);
  const env = { ...process.env, FORCE_COLOR: "0", NO_COLOR: "1" };
  if (options.ci) env.CI = "true";
  const args = [vitest, "run", "--reporter=default", "--reporter=json", `--outputFile.json=${report}`];
  const ran = await runLogged(process.execPath, args, { cwd, env, log, timeoutMin: options.timeoutMin });
  return readReport(project, { report, log, ...ran, timeoutMin: options.timeoutMin });
}

/** A project without a vitest suite (the pack test): its Nx test target counts as one test. */
async function runNxTarget(project, runDir, options) {
  const log = join(runDir, `${project.root.replace(/\//g, "-")}.log`);
  const env = { ...process.env, FORCE_COLOR: "0", NO_COLOR: "1", NX_DAEMON: "false", NX_NO_CLOUD: "true", NX_TUI: "false" };
  if (options.ci) env.CI = "true";
  const { code, timedOut, text, seconds } = await runLogged("pnpm", ["exec", "nx", "run", `${project.name}:test`, "--outputStyle=static"], { cwd: ROOT, env, log, timeoutMin: options.timeoutMin });
  const outcome = { project: project.root, passed: 0, failed: 0, skipped: 0, failures: [], seconds, code };
  if (code === 0 && !timedOut) outcome.passed = 1;
  else {
    outcome.failed = 1;
    const why = timedOut ? `timed out after ${options.timeoutMin} min` : `exit ${code}`;
    outcome.failures.push({ key: `${project.root} › nx run ${project.name}:test`, message: `${why}; ${lastLines(text)}; see ${log}` });
  }
  return outcome;
}

/** Turns one vitest JSON report (or its absence) into counts and a list of failure keys. */
function readReport(project, { report, log, code, timedOut, text, seconds, timeoutMin }) {
  const result = { project: project.root, passed: 0, failed: 0, skipped: 0, failures: [], seconds, code };
  const add = (name, message) => result.failures.push({ key: `${project.root} › ${name}`, message: firstLine(message) });
  let json = null;
  if (existsSync(report)) {
    try {
      json = JSON.parse(readFileSync(report, "utf8"));
    } catch {
      json = null;
    }
  }
  if (timedOut) add(`(timed out after ${timeoutMin} min)`, `see ${log}`);
  if (json === null) {
    if (!timedOut) add("(no JSON report: vitest crashed)", `exit ${code}; ${lastLines(text)}; see ${log}`);
    return result;
  }
  for (const file of json.testResults) {
    const rel = relative(join(ROOT, project.root), file.name);
    let failedHere = 0;
    for (const test of file.assertionResults) {
      if (test.status === "passed") result.passed += 1;
      else if (test.status === "failed") {
        result.failed += 1;
        failedHere += 1;
        add(`${rel} › ${test.fullName}`, test.failureMessages?.[0] ?? "");
      } else result.skipped += 1;
    }
    // A file that failed as a whole (import error, a hook, a Docker gate under CI=true).
    if (file.status === "failed" && failedHere === 0) add(`${rel} › (whole file failed)`, file.message ?? "");
  }
  if (code !== 0 && result.failures.length === 0) add("(vitest exited non-zero: unhandled error?)", `exit ${code}; ${lastLines(text)}; see ${log}`);
  return result;
}

function firstLine(text) {
  const line = String(text).replace(/\x1b\[[0-9;]*m/g, "").split("\n").find((l) => l.trim() !== "") ?? "";
  return line.trim().slice(0, 200);
}

function lastLines(text) {
  return text.replace(/\x1b\[[0-9;]*m/g, "").trim().split("\n").slice(-3).join(" / ").slice(0, 300);
}

async function pool(items, width, work) {
  const results = new Array(items.length);
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(width, items.length) }, async () => {
      while (next < items.length) {
        const index = next++;
        results[index] = await work(items[index]);
      }
    }),
  );
  return results;
}

/**
 * Under CI=true the suite fails (never skips) without Docker, its test images and the Debian tools
 * it drives: ready the machine with the script .ci/run uses, or stop with what it said.
 */
function prepareMachine() {
  const result = spawnSync("bash", ["tools/ci/prepare-machine.sh"], { cwd: ROOT, encoding: "utf8" });
  if (result.status !== 0) fail(`bash tools/ci/prepare-machine.sh failed (exit ${result.status}); the suite cannot run under CI=true:\n${lastLines(result.stdout + result.stderr)}`);
  console.log("soak: Debian tools, Docker engine and test images ready (tools/ci/prepare-machine.sh)");
}

function staticChecks() {
  console.log("soak: lint + typecheck (once, before the load starts)");
  const env = { ...process.env, NX_DAEMON: "false", NX_NO_CLOUD: "true", NX_TUI: "false" };
  const result = spawnSync("pnpm", ["exec", "nx", "run-many", "-t", "lint", "typecheck", "--outputStyle=static"], { cwd: ROOT, env, encoding: "utf8" });
  const ok = result.status === 0;
  console.log(ok ? "soak: lint + typecheck passed" : `soak: lint + typecheck FAILED\n${lastLines(result.stdout + result.stderr)}`);
  return ok;
}

const options = parseArgs(process.argv.slice(2));
const nxJson = JSON.parse(readFileSync(join(ROOT, "nx.json"), "utf8"));
const parallel = options.parallel ?? nxJson.parallel ?? 2;
const projects = testProjects(options.projects);
const workDir = options.out ?? join(tmpdir(), `proctor-soak-${new Date().toISOString().replace(/[:.]/g, "-")}`);
mkdirSync(workDir, { recursive: true });
console.log(`soak: ${options.runs} run(s) of ${projects.length} project(s) [${projects.map((p) => p.root).join(", ")}], ${parallel} at a time${options.ci ? ", CI=true" : ""}; reports in ${workDir}`);

if (options.ci) prepareMachine();
const staticOk = options.staticChecks ? staticChecks() : true;
const load = startLoad(options, workDir);
for (const signal of ["SIGINT", "SIGTERM"]) {
  process.on(signal, () => {
    load.stop();
    process.exit(130);
  });
}
console.log(`soak: load: ${load.describe}`);

const failures = new Map(); // key -> { count, runs: [], message }
let green = 0;
const soakStarted = Date.now();
try {
  for (let run = 1; run <= options.runs; run++) {
    const runDir = join(workDir, `run-${run}`);
    mkdirSync(runDir, { recursive: true });
    const started = Date.now();
    const results = await pool(projects, parallel, async (project) => {
      const result = await runProject(project, runDir, options);
      const mark = result.failures.length === 0 ? "ok" : `${result.failures.length} FAILED`;
      console.log(`soak:   run ${run} ${project.root}: ${mark} (${result.passed} passed, ${result.failed} failed, ${result.skipped} skipped, ${result.seconds.toFixed(0)} s)`);
      return result;
    });
    const totals = results.reduce((t, r) => ({ passed: t.passed + r.passed, failed: t.failed + r.failed, skipped: t.skipped + r.skipped }), { passed: 0, failed: 0, skipped: 0 });
    const runFailures = results.flatMap((r) => r.failures);
    for (const failure of runFailures) {
      const seen = failures.get(failure.key) ?? { count: 0, runs: [], message: failure.message };
      seen.count += 1;
      seen.runs.push(run);
      failures.set(failure.key, seen);
    }
    if (runFailures.length === 0) green += 1;
    const minutes = ((Date.now() - started) / 60_000).toFixed(1);
    console.log(`soak: run ${run}/${options.runs} ${runFailures.length === 0 ? "green" : `RED (${runFailures.length} failure(s))`} in ${minutes} min — tests: ${totals.passed} passed, ${totals.failed} failed, ${totals.skipped} skipped`);
    for (const failure of runFailures) console.log(`  ✗ ${failure.key}\n      ${failure.message}`);
  }
} finally {
  load.stop();
}

console.log(`\nsoak: ${((Date.now() - soakStarted) / 60_000).toFixed(1)} min${options.load === "none" ? "" : " under load"}; reports and logs in ${workDir}`);
if (failures.size === 0) console.log("soak: no test failed in any run");
else {
  console.log("soak: tests that failed at least once (count/runs, which runs, first message):");
  const sorted = [...failures.entries()].sort((a, b) => b[1].count - a[1].count || a[0].localeCompare(b[0]));
  for (const [key, { count, runs, message }] of sorted) console.log(`  ${count}/${options.runs}  ${key}  [runs ${runs.join(",")}]\n        ${message}`);
}
if (!staticOk) console.log("soak: lint + typecheck FAILED (see above)");
console.log(`soak: ${green}/${options.runs} runs green ${options.load === "none" ? "without load" : "under load"}`);
process.exit(green === options.runs && staticOk ? 0 : 1);
