import { existsSync } from "node:fs";
import { join, resolve } from "node:path";
import { readJsonl } from "@proctor/events";
import { RunSummary, TrialResult, type KeptOutputs } from "@proctor/schema";
import { readFile } from "node:fs/promises";
import type { StoredRunConfig } from "./config";
import type { RegradeSource } from "./run";
import { readRunConfig } from "./store";

/** What `proctor regrade` can grade again in a run directory, and what it cannot. */
export interface RegradePlan {
  /** The earlier run's run.json. */
  config: StoredRunConfig;
  /** For startRun's `regrade`: the trials whose outputs were kept. */
  source: RegradeSource;
  /** The tasks of the trials in `source.trials`, sorted. */
  taskIds: string[];
  /** Trials that cannot be graded again, each with why (no outputs kept, over the cap, file gone). */
  missing: { trialId: string; taskId: string; why: string }[];
}

/**
 * Reads a finished (or interrupted) run directory for a regrade: its run.json (RunDirectoryError
 * when `runDir` is not a run directory), its results (last line per trial) and the outputs each
 * trial kept. A trial graded in the agent's sandbox, or whose outputs went past the cap, is listed
 * in `missing` with the reason.
 */
export async function planRegrade(runDir: string): Promise<RegradePlan> {
  const dir = resolve(runDir);
  const config = await readRunConfig(dir);
  const { records } = await readJsonl(join(dir, "results.jsonl"), { schema: TrialResult, missingOk: true });
  const latest = new Map<string, TrialResult>();
  for (const r of records) {
    latest.delete(r.trialId);
    latest.set(r.trialId, r);
  }
  const trials = new Map<string, { archive: string; outputs: KeptOutputs }>();
  const missing: RegradePlan["missing"] = [];
  for (const r of latest.values()) {
    const outputs = r.outputs;
    const why = !outputs
      ? r.integrity?.grading?.mode === "shared"
        ? "graded in the agent's own sandbox: no outputs were taken from it"
        : "no outputs kept (the trial ended before its outputs were taken, or Proctor did not keep them then)"
      : !outputs.kept
        ? (outputs.note ?? "outputs not kept")
        : null;
    const archive = join(dir, "trials", r.trialId, outputs?.file ?? "outputs.tar.gz");
    if (why) missing.push({ trialId: r.trialId, taskId: r.taskId, why });
    else if (!existsSync(archive)) missing.push({ trialId: r.trialId, taskId: r.taskId, why: `${archive} is gone` });
    else trials.set(r.trialId, { archive, outputs: outputs as KeptOutputs });
  }
  const summary = await readFile(join(dir, "summary.json"), "utf8").then(
    (text) => RunSummary.safeParse(JSON.parse(text)),
    () => null,
  ).catch(() => null);
  const pins = summary?.success ? summary.data.pins : config.pins;
  const taskIds = [...new Set([...latest.values()].filter((r) => trials.has(r.trialId)).map((r) => r.taskId))].sort();
  return {
    config,
    taskIds,
    missing,
    source: { runId: config.runId, agent: config.agent, agentHash: config.agentHash, ...(pins ? { pins: { agent: pins.agent, model: pins.model } } : {}), trials },
  };
}
