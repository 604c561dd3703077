/**
 * Extraction speed and memory of @proctor/archive against GNU tar (tar.gz) and Info-ZIP unzip
 * (zip), on the same archives in the same run. Builds a tree of mixed file sizes with
 * pseudo-random but compressible content, packs it with `tar | gzip -1` and `zip -1`, then
 * extracts each archive alternately with the reference tool and with the package (in a child
 * process, whose peak RSS is read from /proc/self/status VmHWM), each side first every other
 * round. Prints speed ratios (reference time / package time, the median of the rounds' ratios:
 * >= 0.8 is the target), CPU ratios, and peak RSS (target < 150 MB).
 *
 *   node --conditions=@proctor/source --import tsx bench/extract/index.ts [--size-mb 900] [--rounds 1] [--dir /dev/shm] [--no-zip] [--keep]
 *   BENCH_EXTRACT_SIZE_MB=100 node --conditions=@proctor/source --import tsx bench/extract/index.ts
 */
import { execFileSync, spawnSync } from "node:child_process";
import { randomFillSync } from "node:crypto";
import { mkdirSync, mkdtempSync, openSync, closeSync, readFileSync, writeSync, rmSync, statSync, symlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { bundleForNode } from "../lib/esbuild";
import { reportFigure } from "../lib/figures";

const { values } = parseArgs({
  options: {
    "size-mb": { type: "string", default: process.env.BENCH_EXTRACT_SIZE_MB ?? "900" },
    rounds: { type: "string", default: "1" },
    "no-zip": { type: "boolean", default: false },
    keep: { type: "boolean", default: false },
    dir: { type: "string", default: process.env.BENCH_EXTRACT_DIR ?? tmpdir() },
  },
});
const sizeBytes = Number(values["size-mb"]) * 1024 * 1024;
const rounds = Number(values.rounds);
const here = dirname(fileURLToPath(import.meta.url));
const MiB = 1024 * 1024;

const installed = (tool: string) => spawnSync(tool, ["--help"], { stdio: "ignore" }).error === undefined;
for (const tool of ["tar", "gzip"]) {
  if (!installed(tool)) {
    console.error(`${tool} is not installed: apt-get install -y ${tool}`);
    process.exit(2);
  }
}
// Info-ZIP is not part of README's install: without it, the zip comparison is reported as skipped.
const missingZip = ["zip", "unzip"].filter((tool) => !installed(tool));
const noZip = values["no-zip"] || missingZip.length > 0;
if (!values["no-zip"] && missingZip.length > 0) {
  console.log(`(${missingZip.join(" and ")} not installed: the zip comparison is skipped; apt-get install -y zip unzip)`);
  reportFigure({
    bench: "extract",
    figure: "extract zip vs unzip, speed",
    proctor: { value: Number.NaN, unit: "s" },
    baseline: null,
    ratio: null,
    ratioMeaning: "unzip time / package time",
    target: { on: "ratio", op: ">=", value: 0.8 },
    skipped: `${missingZip.join(" and ")} not installed (apt-get install -y zip unzip)`,
  });
}

const work = mkdtempSync(join(values.dir, "proctor-bench-extract-"));
process.on("exit", () => {
  if (!values.keep) rmSync(work, { recursive: true, force: true });
});
process.on("SIGINT", () => process.exit(130));

// ---------- the tree ----------

/** Deterministic xorshift so every run builds the same tree. */
let seed = 0x2545f491;
function random(): number {
  seed ^= seed << 13;
  seed ^= seed >>> 17;
  seed ^= seed << 5;
  return (seed >>> 0) / 0x100000000;
}
function between(low: number, high: number): number {
  return Math.floor(low * (high / low) ** random()); // log-uniform
}

// Content: 64 KiB blocks, each half random bytes from a pool and half a repeated text line, so
// gzip -1 gets roughly 2:1, like source trees with some binaries.
const pool = randomFillSync(Buffer.alloc(16 * MiB));
const text = Buffer.alloc(32 * 1024, "proctor benchmark line: the quick brown fox jumps over the lazy dog 0123456789\n");
function block(): Buffer {
  const at = Math.floor(random() * (pool.length - 32 * 1024));
  return Buffer.concat([pool.subarray(at, at + 32 * 1024), text]);
}

const src = join(work, "src");
let fileCount = 0;
let written = 0;
function writeFileOf(path: string, size: number): void {
  const fd = openSync(path, "w", random() < 0.1 ? 0o755 : 0o644);
  let left = size;
  while (left > 0) {
    const chunk = block();
    const n = Math.min(left, chunk.length);
    writeSync(fd, chunk, 0, n);
    left -= n;
  }
  closeSync(fd);
  fileCount += 1;
  written += size;
}

const started = Date.now();
// Budget by bytes: 10% small files (1-16 KiB), 40% medium (64 KiB-2 MiB), 50% large (4-48 MiB).
const budgets: [number, number, number][] = [
  [0.1, 1024, 16 * 1024],
  [0.4, 64 * 1024, 2 * MiB],
  [0.5, 4 * MiB, 48 * MiB],
];
for (const [share, low, high] of budgets) {
  let left = share * sizeBytes;
  while (left > 0) {
    const dir = join(src, `d${Math.floor(random() * 40)}`, `s${Math.floor(random() * 8)}`);
    mkdirSync(dir, { recursive: true });
    const size = Math.min(between(low, high), Math.max(1, Math.floor(left)));
    writeFileOf(join(dir, `f${fileCount}.bin`), size);
    left -= size;
  }
}
for (let i = 0; i < 50; i += 1) mkdirSync(join(src, "empty", `e${i}`), { recursive: true });
for (let i = 0; i < 50; i += 1) symlinkSync(`../d${i % 40}`, join(src, "empty", `link${i}`));

const tgz = join(work, "bench.tar.gz");
execFileSync("bash", ["-c", `tar -cf - -C "${src}" . | gzip -1 > "${tgz}"`]);
const zipFile = join(work, "bench.zip");
if (!noZip) execFileSync("zip", ["-qry", "-1", zipFile, "."], { cwd: src });
console.log(
  `tree: ${fileCount} files, ${(written / MiB).toFixed(0)} MiB; tar.gz ${(statSync(tgz).size / MiB).toFixed(0)} MiB` +
    (noZip ? "" : `, zip ${(statSync(zipFile).size / MiB).toFixed(0)} MiB`) +
    ` (built in ${((Date.now() - started) / 1000).toFixed(1)} s)`,
);
rmSync(src, { recursive: true, force: true });

// ---------- measuring ----------

/** Wall and CPU (user + system, the tool's children included) milliseconds, from bash's `time`. */
function timed(command: string, args: string[]): { ms: number; cpuMs: number } {
  const quoted = [command, ...args].map((arg) => `'${arg.replace(/'/g, "'\\''")}'`).join(" ");
  const out = execFileSync("bash", ["-c", `TIMEFORMAT='%R %U %S'; { time ${quoted} >/dev/null; } 2>&1`], { encoding: "utf8" });
  const [real, user, sys] = out.trim().split("\n").pop()!.split(" ").map(Number) as [number, number, number];
  return { ms: real * 1000, cpuMs: (user + sys) * 1000 };
}

interface ChildResult {
  ms: number;
  cpuMs: number;
  files: number;
  bytes: number;
  peakRssKb: number;
  rssBeforeKb: number;
}

// The child runs as one plain-JS bundle (the package and its dependencies, built by esbuild from
// source), so its RSS is the package's and not a TypeScript loader's.
const childBundle = join(work, "child.mjs");
await bundleForNode(join(here, "child.ts"), childBundle);

function ours(archive: string, dest: string, mode: "path" | "stream"): ChildResult & { wallMs: number } {
  const start = process.hrtime.bigint();
  const out = execFileSync(process.execPath, [childBundle, archive, dest, mode], { encoding: "utf8", stdio: ["ignore", "pipe", "inherit"] });
  const wallMs = Number(process.hrtime.bigint() - start) / 1e6;
  return { ...(JSON.parse(out.trim().split("\n").pop() as string) as ChildResult), wallMs };
}

function fresh(name: string): string {
  const dest = join(work, name);
  rmSync(dest, { recursive: true, force: true });
  execFileSync("sync");
  return dest;
}

function median(xs: number[]): number {
  const sorted = [...xs].sort((a, b) => a - b);
  return sorted[Math.floor((sorted.length - 1) / 2)] as number;
}

const peakRss = { peakKb: 0, beforeKb: 0 };

function compare(label: string, archive: string, reference: (dest: string) => { ms: number; cpuMs: number }, mode: "path" | "stream", referenceName: string): void {
  const refMs: number[] = [];
  const refCpu: number[] = [];
  const ourMs: number[] = [];
  const ourCpu: number[] = [];
  const ourWallMs: number[] = [];
  let peak = 0;
  let before = 0;
  const referenceSide = (): void => {
    const refDest = fresh("ref");
    mkdirSync(refDest);
    const measured = reference(refDest);
    refMs.push(measured.ms);
    refCpu.push(measured.cpuMs);
    rmSync(refDest, { recursive: true, force: true });
  };
  const packageSide = (): void => {
    const ourDest = fresh("ours");
    const result = ours(archive, ourDest, mode);
    ourMs.push(result.ms);
    ourCpu.push(result.cpuMs);
    ourWallMs.push(result.wallMs);
    peak = Math.max(peak, result.peakRssKb);
    before = result.rssBeforeKb;
    if (result.bytes < written * 0.999) throw new Error(`${label}: extracted only ${result.bytes} of ${written} bytes`);
    rmSync(ourDest, { recursive: true, force: true });
  };
  // Each side goes first every other round: whatever the previous extraction left to the disk
  // (dirty pages, the removal's journal) then weighs on both alike.
  for (let round = 0; round < rounds; round += 1) {
    if (round % 2 === 0) {
      referenceSide();
      packageSide();
    } else {
      packageSide();
      referenceSide();
    }
  }
  const ref = median(refMs);
  const our = median(ourMs);
  // The median of each round's ratio: the two runs of a round ran back to back, under the same load.
  const ratios = refMs.map((r, i) => r / (ourMs[i] ?? Number.NaN));
  const ratio = median(ratios);
  const mibPerS = (ms: number) => ((written / MiB) / (ms / 1000)).toFixed(0);
  const seconds = (ms: number) => `${(ms / 1000).toFixed(2)} s`;
  console.log(`${label}:`);
  console.log(`  reference  ${seconds(ref)} (${mibPerS(ref)} MiB/s), CPU ${seconds(median(refCpu))}`);
  console.log(`  package    ${seconds(our)} (${mibPerS(our)} MiB/s), CPU ${seconds(median(ourCpu))}; ${seconds(median(ourWallMs))} with node startup`);
  console.log(`  speed ratio ${ratio.toFixed(2)}x (reference time / package time, median of the rounds' ${ratios.map((r) => r.toFixed(2)).join(", ")}; target >= 0.8), CPU ratio ${(median(refCpu) / median(ourCpu)).toFixed(2)}x; load ${loadAverage()}`);
  console.log(`  peak RSS   ${(peak / 1024).toFixed(0)} MB (target < 150; ${(before / 1024).toFixed(0)} MB before extracting)`);
  reportFigure({
    bench: "extract",
    figure: `extract ${label}, ${(written / MiB).toFixed(0)} MiB, speed`,
    proctor: { value: our / 1000, unit: "s" },
    baseline: { value: ref / 1000, unit: "s", label: referenceName },
    ratio,
    ratioMeaning: `${referenceName} time / package time (median of the rounds' ratios)`,
    target: { on: "ratio", op: ">=", value: 0.8 },
  });
  reportFigure({
    bench: "extract",
    figure: `extract ${label}, ${(written / MiB).toFixed(0)} MiB, CPU time`,
    proctor: { value: median(ourCpu) / 1000, unit: "s" },
    baseline: { value: median(refCpu) / 1000, unit: "s", label: `${referenceName} (its children included)` },
    ratio: median(refCpu) / median(ourCpu),
    ratioMeaning: `${referenceName} CPU / package CPU (less moved by other processes' load than wall time)`,
    target: null,
  });
  if (peak > peakRss.peakKb) Object.assign(peakRss, { peakKb: peak, beforeKb: before });
}

execFileSync("cat", [tgz], { stdio: "ignore" }); // warm the page cache for both sides
compare("tar.gz vs tar -xzf", tgz, (dest) => timed("tar", ["-xzf", tgz, "-C", dest]), "path", "tar -xzf");
compare("tar.gz stream vs tar -xzf", tgz, (dest) => timed("tar", ["-xzf", tgz, "-C", dest]), "stream", "tar -xzf");
if (!noZip) {
  execFileSync("cat", [zipFile], { stdio: "ignore" });
  compare("zip vs unzip", zipFile, (dest) => timed("unzip", ["-q", zipFile, "-d", dest]), "path", "unzip");
}
reportFigure({
  bench: "extract",
  figure: "extract peak RSS (child process, any comparison)",
  proctor: { value: peakRss.peakKb / 1024, unit: "MB" },
  baseline: { value: peakRss.beforeKb / 1024, unit: "MB", label: "RSS before extracting" },
  ratio: peakRss.peakKb / peakRss.beforeKb,
  ratioMeaning: "peak RSS / RSS before extracting",
  target: { on: "proctor", op: "<", value: 150, unit: "MB" },
});

function loadAverage(): string {
  return readFileSync("/proc/loadavg", "utf8").split(" ").slice(0, 3).join(" ");
}
