// Sum the per-project vitest "Tests  N passed | M failed | K skipped (T)" lines of a `pnpm test`
// log into one closing line, so a reader (or CI) sees the whole suite's count at the end.
import { readFileSync } from "node:fs";

const text = readFileSync(process.argv[2], "utf8").replace(/\x1b\[[0-9;]*m/g, "");
const totals = { passed: 0, failed: 0, skipped: 0 };
let projects = 0;
for (const line of text.split("\n")) {
  const m = /\bTests\s+(.+?)\s+\(\d+\)\s*$/.exec(line);
  if (!m) continue;
  projects += 1;
  for (const part of m[1].split("|")) {
    const n = /(\d+)\s+(passed|failed|skipped|todo)/.exec(part.trim());
    if (n && n[2] in totals) totals[n[2]] += Number(n[1]);
  }
}
console.log(`\nvitest projects reporting: ${projects}`);
console.log(`tests: ${totals.passed} passed, ${totals.failed} failed, ${totals.skipped} skipped`);
