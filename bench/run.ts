/**
 * `pnpm bench`: runs every bench under bench/ one after the other (they measure, so never two at
 * once), collects the `BENCH_RESULT` lines each prints (bench/lib/figures.ts) and prints one
 * table: figure, Proctor, baseline, ratio, target, met. Every number in it was measured in this
 * run.
 *
 *   pnpm bench [--quick] [--skip-docker] [--only a,b] [--strict] [--json FILE]
 *
 * --quick        smaller sizes (a few minutes on 2 cores); full sizes are each bench's defaults
 * --skip-docker  do not run the benches that need a Docker engine (their rows say so)
 * --only         run only these benches (folder names)
 * --strict       also exit 1 when a figure misses its target
 * --json FILE    also write the rows as JSON
 *
 * Exit codes: 0 every bench ran; 1 a bench failed (or, with --strict, missed a target);
 * 3 a Docker bench could not run because no engine answers (pass --skip-docker to leave them out).
 */
import { spawn } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { parseArgs } from "node:util";
import { dockerAvailable } from "../packages/sandbox-docker/src/index";
import { RESULT_PREFIX, targetMet, type BenchFigure } from "./lib/figures";

interface Bench {
  name: string;
  docker: boolean;
  quick: string[];
  full: string[];
}

const BENCHES: Bench[] = [
  { name: "auth-verify", docker: false, quick: ["--seconds", "0.5", "--rounds", "3"], full: [] },
  { name: "extract", docker: false, quick: ["--size-mb", "100", "--rounds", "3"], full: [] },
  { name: "server", docker: false, quick: ["--tasks", "200", "--subscribers", "250", "--duration", "2"], full: [] },
  { name: "llm-loop", docker: false, quick: ["--trials", "10", "--turns", "20"], full: [] },
  { name: "viewer", docker: false, quick: ["--trials", "2000", "--rounds", "3"], full: [] },
  { name: "leaderboard", docker: false, quick: ["--runs", "40", "--trials", "200", "--rounds", "3"], full: [] },
  { name: "sandbox-exec", docker: true, quick: ["--execs", "20", "--lifecycles", "5"], full: [] },
  { name: "trial-overhead", docker: true, quick: ["--trials", "48", "--parallel", "8", "--rounds", "1"], full: [] },
  { name: "cold-builds", docker: true, quick: ["--tasks", "12", "--parallel", "8"], full: [] },
  { name: "slots", docker: true, quick: ["--rollouts", "200", "--naive-rollouts", "24"], full: [] },
  { name: "queue", docker: false, quick: ["--trials", "400", "--tasks", "20"], full: [] },
  { name: "images", docker: true, quick: ["--tasks", "8"], full: [] },
  { name: "installed-agent", docker: true, quick: ["--trials", "3", "--rounds", "2", "--requests", "300"], full: [] },
  { name: "file-audit", docker: true, quick: ["--rounds", "3", "--imports", "5", "--execs", "200"], full: [] },
  { name: "swe-checkout", docker: false, quick: ["--instances", "5", "--commits", "1000"], full: [] },
  { name: "dataset-cache", docker: false, quick: ["--tasks", "40", "--rounds", "3"], full: [] },
];

const { values } = parseArgs({
  options: {
    quick: { type: "boolean", default: false },
    "skip-docker": { type: "boolean", default: false },
    only: { type: "string" },
    strict: { type: "boolean", default: false },
    json: { type: "string" },
  },
});
const root = join(import.meta.dirname, "..");
const only = values.only?.split(",").filter(Boolean);
for (const name of only ?? []) {
  if (!BENCHES.some((b) => b.name === name)) {
    console.error(`bench: unknown bench "${name}"; known: ${BENCHES.map((b) => b.name).join(", ")}`);
    process.exit(2);
  }
}
const selected = BENCHES.filter((b) => only === undefined || only.includes(b.name));

/** A row of the table: a figure, or a bench that produced none (skipped or failed). */
type Row = BenchFigure & { failed?: string };

function runBench(bench: Bench): Promise<{ figures: BenchFigure[]; code: number | null; tail: string[] }> {
  const args = ["--conditions=@proctor/source", "--import", "tsx", join(root, "bench", bench.name, "index.ts"), ...(values.quick ? bench.quick : bench.full)];
  console.log(`\n=== bench ${bench.name} (${values.quick ? "quick" : "full"}): node ${args.slice(3).map((a) => a.replace(`${root}/`, "")).join(" ")}`);
  const child = spawn(process.execPath, args, { cwd: root, stdio: ["ignore", "pipe", "pipe"] });
  const figures: BenchFigure[] = [];
  const tail: string[] = [];
  const remember = (line: string) => {
    tail.push(line);
    if (tail.length > 5) tail.shift();
  };
  createInterface({ input: child.stdout }).on("line", (line) => {
    if (line.startsWith(RESULT_PREFIX)) {
      figures.push(JSON.parse(line.slice(RESULT_PREFIX.length)) as BenchFigure);
      return;
    }
    console.log(`[${bench.name}] ${line}`);
    remember(line);
  });
  createInterface({ input: child.stderr }).on("line", (line) => {
    console.log(`[${bench.name}] ${line}`);
    remember(line);
  });
  return new Promise((resolve) => child.on("close", (code) => resolve({ figures, code, tail })));
}

function notRun(bench: Bench, why: { skipped?: string; failed?: string }): Row {
  return { bench: bench.name, figure: `${bench.name} (not measured)`, proctor: { value: Number.NaN, unit: "" }, baseline: null, ratio: null, ratioMeaning: "", target: null, ...why };
}

const started = Date.now();
const dockerUp = selected.some((b) => b.docker) && !values["skip-docker"] ? await dockerAvailable(undefined, 15_000) : false;
const rows: Row[] = [];
let failed = false;
let dockerMissing = false;
for (const bench of selected) {
  if (bench.docker && values["skip-docker"]) {
    rows.push(notRun(bench, { skipped: "skipped (--skip-docker)" }));
    continue;
  }
  if (bench.docker && !dockerUp) {
    dockerMissing = true;
    rows.push(notRun(bench, { failed: "no Docker engine answers (start one: bash tools/docker/ensure-engine.sh; or pass --skip-docker)" }));
    continue;
  }
  const { figures, code, tail } = await runBench(bench);
  rows.push(...figures);
  if (code !== 0 || figures.length === 0) {
    failed = true;
    const why = code !== 0 ? `exited ${code}` : "reported no figures";
    rows.push(notRun(bench, { failed: `${why}: ${tail.at(-1) ?? ""}`.slice(0, 160) }));
  }
}

// ---------- the table ----------

function number(value: number): string {
  if (!Number.isFinite(value)) return "n/a";
  const abs = Math.abs(value);
  const digits = abs >= 100 ? 0 : abs >= 10 ? 1 : 2;
  return value.toLocaleString("en-US", { minimumFractionDigits: digits, maximumFractionDigits: digits });
}
const withUnit = (value: number, unit: string) => (unit === "/s" || unit === "" ? `${number(value)}${unit}` : `${number(value)} ${unit}`);

const header = ["figure", "Proctor", "baseline", "ratio", "target", "met"];
const table = rows.map((row) => {
  if (row.failed !== undefined || row.skipped !== undefined) {
    return [row.figure, row.failed !== undefined ? `FAILED: ${row.failed}` : row.skipped ?? "", "", "", "", row.failed !== undefined ? "FAILED" : "skipped"];
  }
  const met = targetMet(row);
  const target = row.target === null ? "" : `${row.target.on === "ratio" ? "ratio " : ""}${row.target.op} ${row.target.on === "ratio" ? `${row.target.value}x` : withUnit(row.target.value, row.target.unit ?? "")}`;
  return [
    row.figure,
    withUnit(row.proctor.value, row.proctor.unit),
    row.baseline === null ? "" : `${withUnit(row.baseline.value, row.baseline.unit)} (${row.baseline.label})`,
    row.ratio === null ? "n/a" : `${number(row.ratio)}x`,
    target,
    met === null ? "-" : met ? "yes" : "no",
  ];
});
const widths = header.map((h, i) => Math.max(h.length, ...table.map((r) => (r[i] ?? "").length)));
const line = (cells: string[]) => `| ${cells.map((c, i) => c.padEnd(widths[i] ?? 0)).join(" | ")} |`;

const minutes = ((Date.now() - started) / 60_000).toFixed(1);
console.log(`\n== pnpm bench${values.quick ? " --quick (smaller sizes: indicative; targets are set for full sizes)" : ""}: ${minutes} min, load average ${loadAverage()} ==`);
console.log("ratio: each figure's own direction (bench READMEs); every number was measured in this run");
console.log(line(header));
console.log(line(widths.map((w) => "-".repeat(w))));
for (const r of table) console.log(line(r));
const meanings = new Map<string, string>();
for (const row of rows) if (row.ratio !== null && row.failed === undefined) meanings.set(`${row.bench}: ratio = ${row.ratioMeaning}`, "");
for (const meaning of meanings.keys()) console.log(`  ${meaning}`);

if (values.json !== undefined) writeFileSync(values.json, `${JSON.stringify(rows.map((row) => ({ ...row, met: targetMet(row) })), null, 2)}\n`);
const missed = rows.filter((row) => targetMet(row) === false).length;
if (missed > 0) console.log(`${missed} figure(s) miss their target${values.strict ? " (--strict: failing)" : ""}`);
if (dockerMissing) {
  console.log("bench: no Docker engine answers, so the Docker benches did not run (pass --skip-docker to leave them out)");
  process.exit(3);
}
process.exit(failed || (values.strict && missed > 0) ? 1 : 0);

function loadAverage(): string {
  try {
    return readFileSync("/proc/loadavg", "utf8").split(" ").slice(0, 3).join(" ");
  } catch {
    return "n/a";
  }
}
