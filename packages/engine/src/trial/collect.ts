import { rm, writeFile } from "node:fs/promises";
import { join, posix } from "node:path";
import { SANDBOX_PATHS, type DownloadReport, type Sandbox } from "@proctor/sandbox";
import { DEFAULT_LOG_BYTES, type RunLimits } from "./context";

/** What collect could not bring over in full (each cut dir also gets a `<name>.TRUNCATED` note in logs/). */
export interface Collected {
  truncated: string[];
  skipped: string[];
}

const LOG_DIRS = [
  ["verifier", SANDBOX_PATHS.verifierLogs],
  ["agent", SANDBOX_PATHS.agentLogs],
] as const;
const LOGS_ROOT = posix.dirname(SANDBOX_PATHS.verifierLogs);

/** Where each log dir is read: the verifier's from the sandbox it ran in, the agent's from its own. */
export interface LogSources {
  verifier: Sandbox;
  agent: Sandbox;
}

/**
 * Phase 6: copies /logs/verifier (from where the verifier ran), then /logs/agent, into
 * `trials/<id>/logs/`, sharing one byte budget (the verifier's first: it is what the score
 * rests on); one download when both are in one sandbox.
 * Only regular files and directories come over; links, FIFOs and devices are never followed.
 * Proctor's own captures (agent/stdout.txt, verifier/test-stdout.txt, ...) live elsewhere, so
 * nothing a sandbox process writes can replace them.
 */
export async function collectLogs(sources: LogSources, trialDir: string, limits: RunLimits): Promise<Collected> {
  const root = join(trialDir, "logs");
  await rm(root, { recursive: true, force: true });
  const cap = limits.logBytes ?? DEFAULT_LOG_BYTES;
  const report = sources.verifier === sources.agent ? await sources.agent.download(LOGS_ROOT, root, { maxBytes: cap, entries: LOG_DIRS.map(([name]) => name) }) : await downloadApart(sources, root, cap);
  // The dir the cut fell in and every one after it were not collected in full.
  const cutIn = report.truncated ? LOG_DIRS.findIndex(([name]) => report.cutAt === undefined || report.cutAt === name || report.cutAt.startsWith(`${name}/`)) : -1;
  const cut = cutIn < 0 ? [] : LOG_DIRS.slice(cutIn);
  // Beside the copy, so whoever reads the logs sees that they are not whole.
  for (const [name, from] of cut) {
    const where = report.cutAt?.startsWith(`${name}/`) ? `${LOGS_ROOT}/${report.cutAt} was cut and nothing after it copied` : "none of it was copied (the cap was spent before it)";
    await writeFile(join(root, `${name}.TRUNCATED`), `${from} went past the ${cap} byte cap on collected logs (limits.logBytes): ${where}\n`);
  }
  return { truncated: cut.map(([, from]) => from), skipped: report.skipped };
}

/** The verifier's logs from its sandbox, then the agent's from its own, sharing `cap`. */
async function downloadApart(sources: LogSources, root: string, cap: number): Promise<DownloadReport> {
  const first = await sources.verifier.download(LOGS_ROOT, root, { maxBytes: cap, entries: ["verifier"] });
  if (first.truncated) return first;
  const second = await sources.agent.download(LOGS_ROOT, root, { maxBytes: cap - first.bytes, entries: ["agent"] });
  return {
    files: first.files + second.files,
    bytes: first.bytes + second.bytes,
    truncated: second.truncated,
    ...(second.cutAt !== undefined ? { cutAt: second.cutAt } : {}),
    skipped: [...first.skipped, ...second.skipped].slice(0, 100),
  };
}
