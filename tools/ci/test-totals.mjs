// Sum the per-project vitest "Tests  N passed | M failed | K skipped (T)" lines of a `pnpm test`
// log into one closing line, and repeat every failed test's name and the head of its error there:
// CI logs are often read from the tail only, and Nx interleaves projects, so a failure printed
// early is easy to lose.
import { readFileSync } from "node:fs";

const ERROR_LINES = 12;
const lines = readFileSync(process.argv[2], "utf8").replace(/\x1b\[[0-9;]*m/g, "").split("\n");
const totals = { passed: 0, failed: 0, skipped: 0 };
/** Unhandled errors per project: vitest fails the run for them even when every test passed. */
const unhandled = [];
/** Failed test name → the first lines of its error (vitest prints them under the FAIL line). */
const failures = new Map();
let projects = 0;
for (let i = 0; i < lines.length; i++) {
  const line = lines[i];
  // vitest's summary of a failed test: "@proctor/x:  FAIL  src/a.test.ts > suite > name"
  const failed = /^(?:(\S+):\s+)?\s*FAIL\s+(\S+\.test\.\w+\s+>.+?)\s*$/.exec(line);
  if (failed) {
    const name = `${failed[1] ? `${failed[1]} ` : ""}${failed[2]}`;
    if (!failures.has(name) || failures.get(name).length === 0) failures.set(name, errorAfter(i, failed[1]));
  }
  const errors = /^(?:(\S+):\s+)?\s*Errors\s+(\d+) errors?\s*$/.exec(line);
  if (errors) unhandled.push({ project: errors[1] ?? "", count: Number(errors[2]), first: lines.slice(0, i).reverse().find((l) => /^(?:\S+:\s+)?(?:\w*Error|Error): /.test(l) && (!errors[1] || l.startsWith(`${errors[1]}: `))) ?? "" });
  const m = /\bTests\s+(.+?)\s+\(\d+\)\s*$/.exec(line);
  if (!m) continue;
  projects += 1;
  for (const part of m[1].split("|")) {
    const n = /(\d+)\s+(passed|failed|skipped|todo)/.exec(part.trim());
    if (n && n[2] in totals) totals[n[2]] += Number(n[1]);
  }
}

/** The error block under a FAIL line: this project's lines up to where it failed, cut short. */
function errorAfter(index, project) {
  const prefix = project ? `${project}: ` : "";
  const block = [];
  for (let j = index + 1; j < lines.length && block.length < ERROR_LINES; j++) {
    if (prefix && !lines[j].startsWith(prefix)) continue; // another project's interleaved line
    const text = lines[j].slice(prefix.length);
    if (text.includes("⎯⎯") || /^\s*FAIL\s/.test(text)) break;
    if (text.trim() !== "") block.push(text);
    if (text.trim().startsWith("❯")) break; // where it failed; the code frame after it adds little
  }
  return block;
}

console.log(`\nvitest projects reporting: ${projects}`);
if (failures.size > 0) {
  console.log("failed tests (the full output is above, under the same name):");
  for (const [name, error] of failures) {
    console.log(`  ${name}`);
    for (const text of error) console.log(`      ${text}`);
  }
}
for (const u of unhandled) console.log(`unhandled errors: ${u.count} in ${u.project || "the suite"} (they fail the run although its tests passed): ${u.first.trim()}`);
console.log(`tests: ${totals.passed} passed, ${totals.failed} failed, ${totals.skipped} skipped`);
