import { rm } from "node:fs/promises";
import { join, posix } from "node:path";
import { SANDBOX_PATHS, type Sandbox } from "@proctor/sandbox";
import { DEFAULT_LOG_BYTES, type RunLimits } from "./context";

/** What collect brought over, for result notes. */
export interface Collected {
  truncated: string[];
  skipped: string[];
}

const LOG_DIRS = [
  ["verifier", SANDBOX_PATHS.verifierLogs],
  ["agent", SANDBOX_PATHS.agentLogs],
] as const;
const LOGS_ROOT = posix.dirname(SANDBOX_PATHS.verifierLogs);

/**
 * Phase 6: copies the sandbox's /logs/verifier, then /logs/agent, into `trials/<id>/logs/` in
 * one download, sharing one byte budget (the verifier's first: it is what the score rests on).
 * Only regular files and directories come over; links, FIFOs and devices are never followed.
 * Proctor's own captures (agent/stdout.txt, verifier/test-stdout.txt, ...) live elsewhere, so
 * nothing a sandbox process writes can replace them.
 */
export async function collectLogs(sandbox: Sandbox, trialDir: string, limits: RunLimits): Promise<Collected> {
  const root = join(trialDir, "logs");
  await rm(root, { recursive: true, force: true });
  const report = await sandbox.download(LOGS_ROOT, root, { maxBytes: limits.logBytes ?? DEFAULT_LOG_BYTES, entries: LOG_DIRS.map(([name]) => name) });
  // The dir the cut fell in and every one after it were not collected in full.
  const cutIn = report.truncated ? LOG_DIRS.findIndex(([name]) => report.cutAt === undefined || report.cutAt === name || report.cutAt.startsWith(`${name}/`)) : -1;
  return {
    truncated: cutIn < 0 ? [] : LOG_DIRS.slice(cutIn).map(([, from]) => from),
    skipped: report.skipped,
  };
}
