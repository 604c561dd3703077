#!/usr/bin/env node
// Puts `proctor` on the PATH after `pnpm install` (the root package's postinstall): a symlink to
// this clone's tools/bin/proctor in npm's global bin directory, where `npm i -g pnpm` put pnpm.
// Never fails the install: when it cannot link, it says why and what to do in one line.
import { execFileSync } from "node:child_process";
import { lstatSync, mkdirSync, readlinkSync, rmSync, symlinkSync } from "node:fs";
import { delimiter, dirname, join, resolve } from "node:path";

const target = resolve(import.meta.dirname, "proctor");
const say = (line) => process.stderr.write(`proctor: ${line}\n`);

/** npm's global bin directory: $PROCTOR_BIN_DIR, else `npm prefix -g`/bin, else beside node. */
function binDir() {
  if (process.env.PROCTOR_BIN_DIR) return resolve(process.env.PROCTOR_BIN_DIR);
  try {
    const prefix = execFileSync("npm", ["prefix", "-g"], { encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] }).trim();
    if (prefix) return join(prefix, "bin");
  } catch {
    // no npm on PATH: node's own directory is npm's default global bin
  }
  return dirname(process.execPath);
}

/** Where an existing link points, or null when `path` is not a symlink (a file of its own, or nothing). */
function linkTarget(path) {
  try {
    return lstatSync(path).isSymbolicLink() ? resolve(dirname(path), readlinkSync(path)) : "not-a-link";
  } catch {
    return null;
  }
}

if (process.env.PROCTOR_NO_LINK) process.exit(0);
const dir = binDir();
const link = join(dir, "proctor");
const existing = linkTarget(link);
if (existing === target) {
  say(`${link} -> ${target} (already linked)`);
  process.exit(0);
}
// Another clone's link is replaced; anything else (an npm-installed @proctor/cli, a file) is left alone.
if (existing === "not-a-link") {
  say(`${link} exists and is not a link to a clone; left as it is (run ${target} directly, or remove ${link} and run pnpm install again)`);
  process.exit(0);
}
if (existing !== null && !existing.endsWith(join("tools", "bin", "proctor"))) {
  say(`${link} links to ${existing}, not to a clone's tools/bin/proctor; left as it is (run ${target} directly, or remove the link and run pnpm install again)`);
  process.exit(0);
}
try {
  mkdirSync(dir, { recursive: true });
  if (existing !== null) rmSync(link);
  symlinkSync(target, link);
} catch (error) {
  say(`cannot link ${link} (${error.code ?? error.message}); run ${target} directly, or link it yourself: ln -s ${target} <a directory on your PATH>/proctor`);
  process.exit(0);
}
const onPath = (process.env.PATH ?? "").split(delimiter).some((p) => p !== "" && resolve(p) === dir);
say(`linked ${link} -> ${target}${existing !== null ? ` (was ${existing})` : ""}${onPath ? "" : `; ${dir} is not on your PATH: add it (export PATH="${dir}:$PATH")`}`);
