/**
 * One extraction through @proctor/archive in a fresh process, so its peak RSS is the package's
 * alone. Prints one JSON line: { ms, cpuMs, entries, files, bytes, format, rssBeforeKb, peakRssKb }.
 *
 *   node --conditions=@proctor/source --import tsx bench/extract/child.ts <archive> <dest> [path|stream]
 * The bench runs it as an esbuild bundle, so no TypeScript loader sits in its memory.
 */
import { createReadStream, readFileSync } from "node:fs";
// The bench is not a workspace package, so it loads @proctor/archive from source by path.
import { extractArchive } from "../../packages/archive/src/index";

function statusKb(field: "VmRSS" | "VmHWM"): number {
  const match = new RegExp(`^${field}:\\s+(\\d+) kB`, "m").exec(readFileSync("/proc/self/status", "utf8"));
  return match === null ? Number.NaN : Number(match[1]);
}

const [archive, dest, mode = "path"] = process.argv.slice(2);
if (archive === undefined || dest === undefined) throw new Error("usage: child.ts <archive> <dest> [path|stream]");
const rssBeforeKb = statusKb("VmRSS");
const cpuBefore = process.cpuUsage();
const start = process.hrtime.bigint();
const result = await extractArchive(mode === "stream" ? createReadStream(archive) : archive, dest, {
  // The bench archive is built to be near the default upload limits; lift them so size never decides.
  maxCompressedBytes: 4 * 1024 ** 3,
  maxTotalBytes: 8 * 1024 ** 3,
});
const ms = Number(process.hrtime.bigint() - start) / 1e6;
const cpu = process.cpuUsage(cpuBefore);
const cpuMs = (cpu.user + cpu.system) / 1000;
process.stdout.write(`${JSON.stringify({ ms, cpuMs, ...result, rssBeforeKb, peakRssKb: Math.max(statusKb("VmHWM"), process.resourceUsage().maxRSS) })}\n`);
