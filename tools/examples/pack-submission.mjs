#!/usr/bin/env node
// Packs examples/submission.tar.gz, the ready archive a user can submit to `proctor serve`:
// tasks/ (the four example tasks) and agent_code/ (examples/agents/scripted-solver). Byte for
// byte reproducible (sorted entries, fixed owner and mtime, gzip without a name or time), so a
// test can tell when it is stale: `node tools/examples/pack-submission.mjs --check`.
import { execFileSync } from "node:child_process";
import { cpSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";

const repo = resolve(import.meta.dirname, "../..");
const archive = join(repo, "examples", "submission.tar.gz");

/** The archive's bytes, built from the repository's examples. */
export function packSubmission() {
  const stage = mkdtempSync(join(tmpdir(), "proctor-submission-"));
  try {
    cpSync(join(repo, "examples", "tasks"), join(stage, "tasks"), { recursive: true });
    cpSync(join(repo, "examples", "agents", "scripted-solver"), join(stage, "agent_code"), { recursive: true });
    const tar = execFileSync("tar", ["--sort=name", "--mtime=@0", "--owner=0", "--group=0", "--numeric-owner", "--mode=a+rX,u+w,go-w", "-cf", "-", "-C", stage, "tasks", "agent_code"]);
    return execFileSync("gzip", ["-n", "-9"], { input: tar });
  } finally {
    rmSync(stage, { recursive: true, force: true });
  }
}

if (process.argv[1] === import.meta.filename) {
  const bytes = packSubmission();
  if (process.argv.includes("--check")) {
    const same = Buffer.compare(bytes, readFileSync(archive)) === 0;
    process.stdout.write(same ? "examples/submission.tar.gz is up to date\n" : "examples/submission.tar.gz is stale: run node tools/examples/pack-submission.mjs\n");
    process.exit(same ? 0 : 1);
  }
  execFileSync("sh", ["-c", `cat > "${archive}"`], { input: bytes });
  process.stdout.write(`wrote ${archive} (${bytes.length} bytes)\n`);
}
