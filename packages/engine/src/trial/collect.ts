import { rm } from "node:fs/promises";
import { join } from "node:path";
import { SANDBOX_PATHS, type Sandbox } from "@proctor/sandbox";
import { DEFAULT_LOG_BYTES, type RunLimits } from "./context";

/** What collect brought over, for result notes. */
export interface Collected {
  truncated: string[];
  skipped: string[];
}

/**
 * Phase 6: copies the sandbox's /logs/verifier, then /logs/agent, into `trials/<id>/logs/`,
 * sharing one byte budget (the verifier's first: it is what the score rests on). Only regular
 * files and directories come over; links, FIFOs and devices are never followed. Proctor's own
 * captures (agent/stdout.txt, verifier/test-stdout.txt, ...) live elsewhere, so nothing a
 * sandbox process writes can replace them.
 */
export async function collectLogs(sandbox: Sandbox, trialDir: string, limits: RunLimits): Promise<Collected> {
  const root = join(trialDir, "logs");
  await rm(root, { recursive: true, force: true });
  let budget = limits.logBytes ?? DEFAULT_LOG_BYTES;
  const collected: Collected = { truncated: [], skipped: [] };
  for (const [name, from] of [["verifier", SANDBOX_PATHS.verifierLogs], ["agent", SANDBOX_PATHS.agentLogs]] as const) {
    const report = await sandbox.download(from, join(root, name), { maxBytes: budget });
    budget = Math.max(0, budget - report.bytes);
    if (report.truncated) collected.truncated.push(from);
    collected.skipped.push(...report.skipped);
  }
  return collected;
}
