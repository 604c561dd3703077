// Sum the per-project vitest "Tests  N passed | M failed | K skipped (T)" lines of a `pnpm test`
// log into one closing line, and repeat every failed test's name there: CI logs are often read
// from the tail, and Nx interleaves projects, so a failure printed early is easy to lose.
import { readFileSync } from "node:fs";

const text = readFileSync(process.argv[2], "utf8").replace(/\x1b\[[0-9;]*m/g, "");
const totals = { passed: 0, failed: 0, skipped: 0 };
const failures = new Set();
let projects = 0;
for (const line of text.split("\n")) {
  // vitest's summary of a failed test: "@proctor/x:  FAIL  src/a.test.ts > suite > name"
  const failed = /^(?:(\S+):\s+)?\s*FAIL\s+(\S+\.test\.\w+\s+>.+?)\s*$/.exec(line);
  if (failed) failures.add(`${failed[1] ? `${failed[1]} ` : ""}${failed[2]}`);
  const m = /\bTests\s+(.+?)\s+\(\d+\)\s*$/.exec(line);
  if (!m) continue;
  projects += 1;
  for (const part of m[1].split("|")) {
    const n = /(\d+)\s+(passed|failed|skipped|todo)/.exec(part.trim());
    if (n && n[2] in totals) totals[n[2]] += Number(n[1]);
  }
}
console.log(`\nvitest projects reporting: ${projects}`);
if (failures.size > 0) {
  console.log("failed tests (details above, under the same name):");
  for (const name of failures) console.log(`  ${name}`);
}
console.log(`tests: ${totals.passed} passed, ${totals.failed} failed, ${totals.skipped} skipped`);
