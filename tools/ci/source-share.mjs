// How thin the apps are: code lines in apps/*/src against packages/*/src (the target is apps
// under 15%). A code line is non-blank and not comment-only (`//`, `/*`, ` *`); tests
// (`*.test.ts`) and `test-support.ts` files, node_modules and dist are not counted.
// Usage: node tools/ci/source-share.mjs   (prints a report; never fails a build)
import { readdirSync, readFileSync } from "node:fs";
import { join, relative } from "node:path";
import { fileURLToPath } from "node:url";

const root = fileURLToPath(new URL("../..", import.meta.url));

function* sourceFiles(dir) {
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    if (entry.name === "node_modules" || entry.name === "dist") continue;
    const path = join(dir, entry.name);
    if (entry.isDirectory()) yield* sourceFiles(path);
    else if (
      entry.isFile() &&
      entry.name.endsWith(".ts") &&
      !entry.name.endsWith(".test.ts") &&
      entry.name !== "test-support.ts"
    )
      yield path;
  }
}

function codeLines(path) {
  let n = 0;
  for (const line of readFileSync(path, "utf8").split("\n")) {
    const t = line.trim();
    if (t === "" || t.startsWith("//") || t.startsWith("/*") || t.startsWith("*")) continue;
    n += 1;
  }
  return n;
}

function count(group) {
  const files = [];
  const base = join(root, group);
  for (const project of readdirSync(base, { withFileTypes: true })) {
    if (!project.isDirectory()) continue;
    const src = join(base, project.name, "src");
    let found;
    try {
      found = [...sourceFiles(src)];
    } catch (error) {
      if (error.code === "ENOENT") continue; // a project without src/ (none today)
      throw error;
    }
    for (const path of found) files.push({ path: relative(root, path), lines: codeLines(path) });
  }
  return { files, lines: files.reduce((sum, f) => sum + f.lines, 0) };
}

const apps = count("apps");
const packages = count("packages");
const total = apps.lines + packages.lines;
const share = total === 0 ? 0 : (100 * apps.lines) / total;
console.log(`apps:     ${apps.lines} code lines in ${apps.files.length} files`);
console.log(`packages: ${packages.lines} code lines in ${packages.files.length} files`);
console.log(`apps share: ${share.toFixed(1)}% of ${total} (target: < 15%)`);
console.log("largest app files:");
for (const f of [...apps.files].sort((a, b) => b.lines - a.lines).slice(0, 10))
  console.log(`  ${String(f.lines).padStart(5)}  ${f.path}`);
