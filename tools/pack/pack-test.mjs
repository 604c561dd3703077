#!/usr/bin/env node
// Pack-and-install test: every @proctor/* package, packed as it would be published, installs with npm
// into a project outside this workspace, type-checks there (tsc, NodeNext, strict, no skipLibCheck),
// and runs the first example of its README. publint and attw (esm-only profile) must be clean.
//
//   node tools/pack/pack-test.mjs [--keep] [--only schema,auth]
//
// Needs the packages built (`nx run-many -t build`; the Nx target `pack:test` builds first).
// Network: the npm registry only (third-party dependencies; @proctor/* come from the tarballs).
import { spawnSync } from "node:child_process";
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { basename, join, relative, resolve } from "node:path";
import { builtinModules } from "node:module";
import { publint } from "publint";
import { formatMessage } from "publint/utils";

const root = resolve(import.meta.dirname, "../..");
const args = process.argv.slice(2);
const keep = args.includes("--keep");
const onlyArg = args.indexOf("--only");
const only = onlyArg >= 0 ? new Set(args[onlyArg + 1].split(",").map((s) => (s.startsWith("@proctor/") ? s : `@proctor/${s}`))) : null;
const started = Date.now();
const timings = [];
const failures = [];
const fail = (pkg, message) => failures.push(`${pkg}: ${message}`);
const readJson = (file) => JSON.parse(readFileSync(file, "utf8"));

function step(name, fn) {
  const t0 = Date.now();
  const out = fn();
  timings.push([name, Date.now() - t0]);
  console.log(`pack-test: ${name} (${((Date.now() - t0) / 1000).toFixed(1)} s)`);
  return out;
}

function run(cmd, argv, options = {}) {
  const r = spawnSync(cmd, argv, { encoding: "utf8", maxBuffer: 64 * 1024 * 1024, ...options });
  if (r.error && !options.timeout) throw r.error; // a timeout is the caller's to report
  return r;
}

// ---- the packages --------------------------------------------------------------------------
const rootLicense = readFileSync(join(root, "LICENSE"), "utf8");
const rootRepo = readJson(join(root, "package.json")).repository;
const packages = ["packages", "apps"]
  .flatMap((d) => readdirSync(join(root, d)).map((n) => join(root, d, n)))
  .filter((dir) => existsSync(join(dir, "package.json")))
  .map((dir) => ({ dir, rel: relative(root, dir), manifest: readJson(join(dir, "package.json")) }))
  .filter((p) => !p.manifest.private && (!only || only.has(p.manifest.name)));
if (packages.length === 0) throw new Error("pack-test: no packages selected");

// ---- metadata, in the workspace --------------------------------------------------------------
step("metadata", () => {
  for (const { dir, rel, manifest: m } of packages) {
    const name = m.name;
    if (m.license !== "Apache-2.0") fail(name, `license must be "Apache-2.0", got ${JSON.stringify(m.license)}`);
    if (!existsSync(join(dir, "LICENSE")) || readFileSync(join(dir, "LICENSE"), "utf8") !== rootLicense) fail(name, "LICENSE must be a copy of the root LICENSE (cp LICENSE " + rel + "/)");
    if (!m.files?.includes("LICENSE") || !m.files?.includes("dist")) fail(name, `files must list "dist" and "LICENSE"`);
    if (m.repository?.url !== rootRepo?.url || m.repository?.directory !== rel) fail(name, `repository must be { url: ${JSON.stringify(rootRepo?.url)}, directory: "${rel}" }`);
    if (!m.homepage) fail(name, "homepage is missing");
    if (m.publishConfig?.access !== "public") fail(name, `publishConfig.access must be "public"`);
    if (!m.main || !m.types) fail(name, "main and types (fallbacks for tools that ignore exports) are missing");
    if (m.exports?.["./package.json"] !== "./package.json") fail(name, `exports must have "./package.json": "./package.json"`);
    for (const [key, target] of Object.entries(m.exports ?? {})) {
      if (typeof target !== "object") continue;
      if (Object.keys(target)[0] !== "@proctor/source") fail(name, `exports["${key}"]: the "@proctor/source" condition must come first`);
      const published = m.publishConfig?.exports?.[key];
      const { ["@proctor/source"]: _source, ...rest } = target;
      if (JSON.stringify(published) !== JSON.stringify(rest)) fail(name, `publishConfig.exports["${key}"] must equal exports["${key}"] without "@proctor/source"`);
    }
    if (!existsSync(join(dir, "dist", "index.js")) || !existsSync(join(dir, "dist", "index.d.ts"))) fail(name, "dist/ is not built: run `npx nx run-many -t build` first");
    if (!existsSync(join(dir, "README.md"))) fail(name, "README.md is missing");
  }
  stopOnFailures();
});

function stopOnFailures() {
  if (failures.length === 0) return;
  console.error(`\npack-test: FAILED\n  ${failures.join("\n  ")}`);
  process.exit(1);
}

// ---- pack ----------------------------------------------------------------------------------
const work = mkdtempSync(join(tmpdir(), "proctor-pack-"));
const tarballDir = join(work, "tarballs");
mkdirSync(tarballDir);
step("pnpm pack", () => {
  // pnpm (not npm) packs: it applies publishConfig and turns workspace:* into the packages' versions.
  const filters = packages.flatMap((p) => ["--filter", p.manifest.name]);
  const r = run("pnpm", ["-r", ...filters, "pack", "--pack-destination", tarballDir], { cwd: root });
  if (r.status !== 0) throw new Error(`pnpm -r pack failed:\n${r.stdout}${r.stderr}`);
  for (const p of packages) {
    p.tarball = join(tarballDir, `${p.manifest.name.replace("@", "").replace("/", "-")}-${p.manifest.version}.tgz`);
    if (!existsSync(p.tarball)) throw new Error(`pnpm pack ${p.manifest.name}: ${p.tarball} not found`);
  }
});

// ---- the packed manifests and files ----------------------------------------------------------
step("tarball contents", () => {
  const names = new Set(packages.map((p) => p.manifest.name));
  for (const p of packages) {
    const name = p.manifest.name;
    const list = run("tar", ["-tzf", p.tarball]).stdout.split("\n").filter(Boolean).map((f) => f.replace(/^package\//, ""));
    for (const f of ["package.json", "LICENSE", "README.md", "dist/index.js", "dist/index.d.ts"]) if (!list.includes(f)) fail(name, `the tarball has no ${f}`);
    for (const f of list) if (/^(src|test)\//.test(f) || /\.test\.|tsconfig|vitest/.test(f)) fail(name, `the tarball ships ${f}`);
    const m = JSON.parse(run("tar", ["-xzOf", p.tarball, "package/package.json"]).stdout);
    p.packed = m;
    if (JSON.stringify(m.exports).includes("@proctor/source")) fail(name, "the packed exports still have the @proctor/source condition (publishConfig.exports is not applied?)");
    const deps = { ...m.dependencies, ...m.peerDependencies, ...m.optionalDependencies };
    for (const [dep, spec] of Object.entries(deps)) {
      if (String(spec).startsWith("workspace:")) fail(name, `dependency ${dep} is still "${spec}" in the tarball`);
      if (dep.startsWith("@proctor/") && !names.has(dep)) fail(name, `depends on ${dep}, which is not one of the packed packages`);
    }
    // Every bare import of the shipped JS and .d.ts must be a declared dependency (types included:
    // a consumer compiles against dist/*.d.ts, so @types/* of what they import belong in dependencies).
    const distDir = join(work, "unpacked", basename(p.tarball, ".tgz"));
    mkdirSync(distDir, { recursive: true });
    run("tar", ["-xzf", p.tarball, "-C", distDir]);
    const files = readdirSync(join(distDir, "package", "dist"), { recursive: true }).filter((f) => /\.(js|d\.ts)$/.test(f));
    for (const f of files) {
      const text = readFileSync(join(distDir, "package", "dist", f), "utf8");
      for (const match of text.matchAll(/(?:^|[\s;])(?:import|export)\s[^'";]*?from\s*['"]([^'"]+)['"]|import\(\s*['"]([^'"]+)['"]\s*\)|^import\s*['"]([^'"]+)['"]/gm)) {
        const spec = match[1] ?? match[2] ?? match[3];
        if (spec.startsWith(".") || spec.startsWith("node:") || builtinModules.includes(spec)) continue;
        const pkg = spec.startsWith("@") ? spec.split("/").slice(0, 2).join("/") : spec.split("/")[0];
        const typesPkg = `@types/${pkg.replace(/^@/, "").replace("/", "__")}`;
        if (!(pkg in deps)) fail(name, `dist/${f} imports "${spec}", which is not in dependencies`);
        else if (f.endsWith(".d.ts") && !hasOwnTypes(pkg) && !(typesPkg in deps)) fail(name, `dist/${f} needs the types of "${pkg}": add ${typesPkg} to dependencies`);
      }
    }
  }
  stopOnFailures();
});

/** Whether a dependency ships its own types (looked up where the workspace installed it). */
function hasOwnTypes(pkg) {
  for (const p of packages) {
    const file = join(p.dir, "node_modules", pkg, "package.json");
    if (!existsSync(file)) continue;
    const m = readJson(file);
    return Boolean(m.types || m.typings || JSON.stringify(m.exports ?? {}).includes("types") || existsSync(join(p.dir, "node_modules", pkg, "index.d.ts")));
  }
  return true; // not installed anywhere here: the consumer's tsc below will tell
}

// ---- publint and attw ------------------------------------------------------------------------
await stepAsync("publint", async () => {
  for (const p of packages) {
    const tarball = readFileSync(p.tarball);
    const { messages, pkg } = await publint({ pack: { tarball: tarball.buffer.slice(tarball.byteOffset, tarball.byteOffset + tarball.byteLength) }, level: "suggestion", strict: true });
    for (const m of messages) fail(p.manifest.name, `publint ${m.type}: ${formatMessage(m, pkg, { color: false })}`);
  }
});

step("attw", () => {
  const attw = join(root, "node_modules", ".bin", "attw");
  for (const p of packages) {
    // ESM-only packages: the node10 and node16-from-CJS resolutions are not meant to work.
    const r = run(attw, [p.tarball, "--profile", "esm-only", "--format", "ascii", "--no-color"]);
    if (r.status !== 0) fail(p.manifest.name, `attw:\n${r.stdout}${r.stderr}`);
  }
  stopOnFailures();
});

async function stepAsync(name, fn) {
  const t0 = Date.now();
  await fn();
  timings.push([name, Date.now() - t0]);
  console.log(`pack-test: ${name} (${((Date.now() - t0) / 1000).toFixed(1)} s)`);
}

// ---- install into a project that is not this workspace ------------------------------------------
const project = join(work, "consumer");
mkdirSync(project);
writeFileSync(join(project, "package.json"), JSON.stringify({ name: "proctor-consumer", private: true, type: "module" }, null, 2));
const typesNode = readJson(join(root, "node_modules", "@types", "node", "package.json")).version;
step("npm install (tarballs + @types/node)", () => {
  // All tarballs in one install: each one's @proctor/* dependencies must be met by the others,
  // never by the registry. Install scripts of third-party deps (native builds) are not ours to test.
  const r = run("npm", ["install", "--no-audit", "--no-fund", "--prefer-offline", "--ignore-scripts", "--loglevel=error", ...packages.map((p) => p.tarball), `@types/node@${typesNode}`], { cwd: project });
  if (r.status !== 0) throw new Error(`npm install failed:\n${r.stdout}${r.stderr}`);
  for (const p of packages) {
    const installed = join(project, "node_modules", ...p.manifest.name.split("/"), "package.json");
    if (!existsSync(installed) || readJson(installed).version !== p.manifest.version) fail(p.manifest.name, "not installed from its tarball");
    const nested = run("npm", ["ls", p.manifest.name, "--all", "--parseable"], { cwd: project }).stdout.split("\n").filter((l) => l.includes("node_modules/"));
    if (nested.length > 1) fail(p.manifest.name, `installed more than once:\n${nested.join("\n")}`);
  }
  stopOnFailures();
});

// ---- compile: one file importing every package + every README's first TypeScript example ---------
const examples = [];
step("README examples (extract)", () => {
  mkdirSync(join(project, "readme"));
  const lines = [];
  for (const p of packages) {
    const id = p.manifest.name.replace("@proctor/", "");
    const ns = id.replace(/-(.)/g, (_, c) => c.toUpperCase());
    lines.push(`import * as ${ns} from "${p.manifest.name}";`);
    const readme = readFileSync(join(p.dir, "README.md"), "utf8");
    const block = /^```(ts|typescript|sh|bash)\n([\s\S]*?)^```/m.exec(readme);
    if (!block) { fail(p.manifest.name, "README.md has no code block; its first ```ts or ```sh block is its example"); continue; }
    const lang = block[1].startsWith("t") ? "ts" : "sh";
    if (block[2].trim().split("\n").length > 12) fail(p.manifest.name, "README's first example is longer than 12 lines: keep it short");
    const file = join(project, "readme", `${id}.${lang}`);
    writeFileSync(file, lang === "ts" ? `${block[2]}\nexport {};\n` : block[2]);
    examples.push({ name: p.manifest.name, id, lang, file });
  }
  lines.push("", "const all = { " + packages.map((p) => p.manifest.name.replace("@proctor/", "").replace(/-(.)/g, (_, c) => c.toUpperCase())).join(", ") + " };");
  lines.push("for (const [name, ns] of Object.entries(all)) if (Object.keys(ns).length === 0) throw new Error(`${name} exports nothing`);");
  lines.push(`console.log("imported", Object.keys(all).length, "packages");`);
  writeFileSync(join(project, "check.ts"), lines.join("\n") + "\n");
  // The README examples read the repository's example tasks (as they would in a clone).
  cpSync(join(root, "examples"), join(project, "examples"), { recursive: true });
  stopOnFailures();
});

step("tsc (NodeNext, strict)", () => {
  writeFileSync(join(project, "tsconfig.json"), JSON.stringify({
    compilerOptions: { module: "NodeNext", moduleResolution: "NodeNext", target: "ES2022", strict: true, skipLibCheck: false, types: ["node"], outDir: "build", rootDir: "." },
    include: ["check.ts", "readme/*.ts"],
  }, null, 2));
  const r = run(process.execPath, [join(root, "node_modules", "typescript", "bin", "tsc"), "-p", "tsconfig.json"], { cwd: project });
  if (r.status !== 0) { fail("tsc", `\n${r.stdout}${r.stderr}`); stopOnFailures(); }
  const c = run(process.execPath, ["build/check.js"], { cwd: project });
  if (c.status !== 0) fail("check.ts", `${c.stdout}${c.stderr}`);
  else console.log(`  ${c.stdout.trim()}`);
  stopOnFailures();
});

step("README examples (run)", () => {
  // The examples' temp files (a README shows mkdtemp in tmpdir()) go with the work dir, not into /tmp.
  const tmp = join(work, "tmp");
  mkdirSync(tmp);
  const env = { ...process.env, TMPDIR: tmp, NO_COLOR: "1", FORCE_COLOR: "0", PATH: `${join(project, "node_modules", ".bin")}:${process.env.PATH}` };
  for (const ex of examples) {
    if (ex.name === "@proctor/sandbox-docker" && process.env.CI !== "true" && !dockerImagePresent("proctor/base:bookworm")) {
      console.log(`  SKIPPED ${ex.name}: no Docker engine with proctor/base:bookworm (pnpm images); CI=true never skips`);
      continue;
    }
    const t0 = Date.now();
    const r = ex.lang === "ts"
      ? run(process.execPath, [join("build", "readme", `${ex.id}.js`)], { cwd: project, env, timeout: 120_000 })
      : run("bash", ["-euo", "pipefail", ex.file], { cwd: project, env, timeout: 120_000 });
    const took = `${((Date.now() - t0) / 1000).toFixed(1)} s`;
    if (r.error) fail(ex.name, `README example did not finish: ${r.error.message} after ${took}:\n${r.stdout}${r.stderr}`);
    else if (r.status !== 0) fail(ex.name, `README example exited ${r.status ?? r.signal} after ${took}:\n${r.stdout}${r.stderr}`);
    else console.log(`  ok ${ex.name} (${took}): ${r.stdout.trim().split("\n").slice(-1)[0]?.slice(0, 120) ?? ""}`);
  }
  stopOnFailures();
});

function dockerImagePresent(image) {
  const r = spawnSync("docker", ["image", "inspect", image], { stdio: "ignore" });
  return !r.error && r.status === 0;
}

if (!keep) rmSync(work, { recursive: true, force: true });
else console.log(`pack-test: kept ${work}`);
console.log(`pack-test: ${packages.length} packages packed, installed, type-checked and their README examples run in ${((Date.now() - started) / 1000).toFixed(1)} s`);
