import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { isCleanPass, type TrialResult } from "@proctor/schema";
import { trialCostUsd } from "@proctor/reward";
import type { LoadedRun } from "./load";
import { fullReason, trialFlags } from "./model";

function csvCell(value: string | number | null): string {
  const text = value === null ? "" : String(value);
  return /[",\r\n]/.test(text) ? `"${text.replace(/"/g, '""')}"` : text;
}

/** One row per trial (RFC 4180; a `run` column tells runs apart). */
/** One row per trial; `cost_usd` (tokens + compute) is empty when the trial's model has no price, never 0. */
export function renderCsv(runs: readonly LoadedRun[]): string {
  const header = ["run", "trial_id", "task_id", "attempt", "category", "difficulty", "status", "reward", "error_kind", "error_message", "duration_ms", "agent_exit_code", "agent_timed_out", "flags", "input_tokens", "output_tokens", "cost_usd"];
  const rows = [header.join(",")];
  for (const run of runs) {
    for (const r of run.results) {
      rows.push(
        [run.runId, r.trialId, r.taskId, r.attempt, r.category, r.difficulty, r.status, r.reward, r.error?.kind ?? null, r.error?.message ?? null, r.durationMs, r.agent?.exitCode ?? null, r.agent ? String(r.agent.timedOut) : null, trialFlags(r).join("; "), r.agent?.usage?.inputTokens ?? null, r.agent?.usage?.outputTokens ?? null, trialCostUsd(r)]
          .map(csvCell)
          .join(","),
      );
    }
  }
  return `${rows.join("\r\n")}\r\n`;
}

/** Characters XML 1.0 does not allow, even escaped. */
// eslint-disable-next-line no-control-regex
const XML_INVALID = /[\u0000-\u0008\u000B\u000C\u000E-\u001F\uFFFE\uFFFF]/g;

export function xmlEscape(text: string): string {
  return text.replace(XML_INVALID, "\uFFFD").replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;").replace(/'/g, "&apos;");
}

async function tail(file: string, maxChars: number): Promise<string | null> {
  const text = await readFile(file, "utf8").catch(() => null);
  if (text === null) return null;
  return text.length > maxChars ? `[... ${text.length - maxChars} characters cut]\n${text.slice(-maxChars)}` : text;
}

/**
 * JUnit XML (the Jenkins/GitLab/GitHub shape): one <testsuite> per run, one <testcase> per
 * trial (classname = category, name = trial id); failed -> <failure>, error -> <error
 * type="<kind>">, each with the reason; the tail of the verifier's output in <system-out>.
 */
export async function renderJunit(runs: readonly LoadedRun[], options: { logChars?: number } = {}): Promise<string> {
  const logChars = options.logChars ?? 4000;
  const suites: string[] = [];
  let total = 0;
  let failures = 0;
  let errors = 0;
  let seconds = 0;
  for (const run of runs) {
    const cases: string[] = [];
    const f = run.results.filter((r) => r.status === "failed").length;
    const e = run.results.filter((r) => r.status === "error").length;
    const time = run.results.reduce((s, r) => s + r.durationMs, 0) / 1000;
    for (const r of run.results) {
      const attrs = `classname="${xmlEscape(`${run.runId}.${r.category ?? "uncategorized"}`)}" name="${xmlEscape(r.trialId)}" time="${(r.durationMs / 1000).toFixed(3)}"`;
      const body: string[] = [];
      const reason = fullReason(r);
      if (r.status === "failed") body.push(`<failure message="${xmlEscape(reason || "reward below 1")}" type="failed">${xmlEscape(reason)}</failure>`);
      if (r.status === "error") body.push(`<error message="${xmlEscape(reason)}" type="${xmlEscape(r.error?.kind ?? "unknown")}">${xmlEscape(reason)}</error>`);
      if (r.status !== "passed") {
        const log = await tail(join(run.dir, "trials", r.trialId, "verifier", "test-stdout.txt"), logChars);
        if (log) body.push(`<system-out>${xmlEscape(log)}</system-out>`);
      }
      cases.push(body.length === 0 ? `    <testcase ${attrs}/>` : `    <testcase ${attrs}>\n      ${body.join("\n      ")}\n    </testcase>`);
    }
    total += run.results.length;
    failures += f;
    errors += e;
    seconds += time;
    const stamp = run.summary.startedAt.replace(/\.\d+Z$/, "").replace(/Z$/, "");
    suites.push(
      `  <testsuite name="${xmlEscape(run.runId)}" tests="${run.results.length}" failures="${f}" errors="${e}" skipped="0" time="${time.toFixed(3)}" timestamp="${xmlEscape(stamp)}">\n${cases.join("\n")}\n  </testsuite>`,
    );
  }
  return `<?xml version="1.0" encoding="UTF-8"?>\n<testsuites name="proctor" tests="${total}" failures="${failures}" errors="${errors}" time="${seconds.toFixed(3)}">\n${suites.join("\n")}\n</testsuites>\n`;
}

/** SWE-bench's run report (schema_version 2 field names). */
export interface SwebenchReport {
  total_instances: number;
  submitted_instances: number;
  completed_instances: number;
  resolved_instances: number;
  unresolved_instances: number;
  empty_patch_instances: number;
  error_instances: number;
  completed_ids: string[];
  incomplete_ids: string[];
  empty_patch_ids: string[];
  submitted_ids: string[];
  resolved_ids: string[];
  unresolved_ids: string[];
  error_ids: string[];
  schema_version: 2;
}

/** The patch an agent produced, when the trial dir has one (agent/patch.diff or agent/model.patch). */
async function patchOf(run: LoadedRun, r: TrialResult): Promise<string | null> {
  for (const name of ["patch.diff", "model.patch"]) {
    const text = await readFile(join(run.dir, "trials", r.trialId, "agent", name), "utf8").catch(() => null);
    if (text !== null) return text;
  }
  return null;
}

/**
 * SWE-bench's report.json for one run. Instance = task id; with several attempts the first
 * attempt counts (SWE-bench evaluates one prediction per instance). resolved = passed; error =
 * an errored trial; empty patch = the agent's recorded patch is empty (such an instance is not
 * completed, as in SWE-bench); planned tasks without a result are incomplete.
 */
export async function buildSwebenchReport(run: LoadedRun): Promise<SwebenchReport> {
  const firstByTask = new Map<string, TrialResult>();
  for (const r of [...run.results].sort((x, y) => x.attempt - y.attempt)) if (!firstByTask.has(r.taskId)) firstByTask.set(r.taskId, r);
  const planned = run.config ? run.config.tasks.map((t) => t.id) : [...firstByTask.keys()];
  const resolved: string[] = [];
  const unresolved: string[] = [];
  const errored: string[] = [];
  const empty: string[] = [];
  for (const [id, r] of firstByTask) {
    const patch = await patchOf(run, r);
    if (patch !== null && patch.trim() === "") empty.push(id);
    else if (r.status === "error") errored.push(id);
    else if (isCleanPass(r)) resolved.push(id);
    else unresolved.push(id);
  }
  const sorted = (xs: Iterable<string>) => [...xs].sort();
  const completed = sorted([...resolved, ...unresolved]);
  const submitted = sorted(firstByTask.keys());
  const incomplete = sorted(planned.filter((id) => !firstByTask.has(id)));
  return {
    total_instances: new Set([...planned, ...firstByTask.keys()]).size,
    submitted_instances: submitted.length,
    completed_instances: completed.length,
    resolved_instances: resolved.length,
    unresolved_instances: unresolved.length,
    empty_patch_instances: empty.length,
    error_instances: errored.length,
    completed_ids: completed,
    incomplete_ids: incomplete,
    empty_patch_ids: sorted(empty),
    submitted_ids: submitted,
    resolved_ids: sorted(resolved),
    unresolved_ids: sorted(unresolved),
    error_ids: sorted(errored),
    schema_version: 2,
  };
}
