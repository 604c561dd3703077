#!/usr/bin/env node
// pnpm release [--dry-run]
//
//   1. changeset version   apply the pending .changeset/*.md: versions, internal ranges, CHANGELOG.md
//   2. nx run-many -t build (after the bump: the CLI and server bundle their version)
//   3. changeset publish   publish every package whose version is not on npm yet, tag it
//
// --dry-run does the same in a temporary copy of the workspace's manifests (package.json, README,
// LICENSE, CHANGELOG, dist) and ends with `pnpm -r publish --dry-run`: it prints the new versions and
// every file each package would publish, and changes nothing here. Its dist/ is the current build.
import { spawnSync } from "node:child_process";
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, symlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";

const root = resolve(import.meta.dirname, "../..");
const dryRun = process.argv.includes("--dry-run");
const bin = (name) => join(root, "node_modules", ".bin", name);

function sh(cmd, argv, cwd) {
  console.log(`\n$ ${[cmd, ...argv].join(" ")}${cwd === root ? "" : `   (in ${cwd})`}`);
  const r = spawnSync(cmd, argv, { cwd, stdio: "inherit", env: { ...process.env, NX_TUI: "false" } });
  if (r.error) throw r.error;
  if (r.status !== 0) process.exit(r.status ?? 1);
}

const packageDirs = (base) =>
  ["packages", "apps"].flatMap((d) => readdirSync(join(base, d)).map((n) => join(d, n))).filter((d) => existsSync(join(base, d, "package.json")));
const versions = (base) =>
  Object.fromEntries(packageDirs(base).map((d) => JSON.parse(readFileSync(join(base, d, "package.json"), "utf8"))).filter((m) => !m.private).map((m) => [m.name, m.version]));

if (!dryRun) {
  sh(bin("changeset"), ["version"], root);
  sh(bin("nx"), ["run-many", "-t", "build"], root);
  sh(bin("changeset"), ["publish"], root);
  console.log("\nrelease: published. Commit the version bumps and CHANGELOGs, then `git push --follow-tags`.");
  process.exit(0);
}

const missing = packageDirs(root).filter((d) => !existsSync(join(root, d, "dist")));
if (missing.length > 0) {
  console.error(`release --dry-run: not built: ${missing.join(", ")}; run \`pnpm build\` first`);
  process.exit(1);
}
const copy = mkdtempSync(join(tmpdir(), "proctor-release-"));
try {
  for (const f of ["package.json", "pnpm-workspace.yaml", ".changeset", "LICENSE", "README.md"]) cpSync(join(root, f), join(copy, f), { recursive: true });
  symlinkSync(join(root, "node_modules"), join(copy, "node_modules")); // changeset's changelog module
  for (const d of packageDirs(root)) {
    for (const f of ["package.json", "README.md", "LICENSE", "CHANGELOG.md", "dist", "assets"]) {
      if (existsSync(join(root, d, f))) cpSync(join(root, d, f), join(copy, d, f), { recursive: true });
    }
  }
  // pnpm publish resolves workspace:* through each package's node_modules: link the copies.
  const dirOf = Object.fromEntries(packageDirs(copy).map((d) => [JSON.parse(readFileSync(join(copy, d, "package.json"), "utf8")).name, d]));
  for (const d of packageDirs(copy)) {
    const m = JSON.parse(readFileSync(join(copy, d, "package.json"), "utf8"));
    for (const [dep, spec] of Object.entries({ ...m.dependencies, ...m.devDependencies, ...m.peerDependencies })) {
      if (!String(spec).startsWith("workspace:") || !dirOf[dep]) continue;
      mkdirSync(join(copy, d, "node_modules", "@proctor"), { recursive: true });
      symlinkSync(join(copy, dirOf[dep]), join(copy, d, "node_modules", dep));
    }
  }
  const before = versions(copy);
  sh(bin("changeset"), ["version"], copy);
  const after = versions(copy);
  console.log("\nrelease --dry-run: versions");
  for (const [name, v] of Object.entries(after)) console.log(`  ${name.padEnd(28)} ${before[name] ?? "(new)"} -> ${v}${before[name] === v ? "  (unchanged)" : ""}`);
  sh("pnpm", ["-r", "publish", "--dry-run", "--no-git-checks"], copy);
  console.log("\nrelease --dry-run: nothing was changed or published.");
} finally {
  rmSync(copy, { recursive: true, force: true });
}
