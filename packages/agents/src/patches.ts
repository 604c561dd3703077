import { readFileSync } from "node:fs";
import { mkdir, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { applyDiff } from "./apply-diff";
import { AgentConfigError, AgentSetupError } from "./errors";
import type { Agent } from "./types";

/** One SWE-bench prediction: the patch a model produced for an instance. */
interface Prediction {
  instanceId: string;
  model: string | null;
  patch: string;
}

function parseOrNull(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return null;
  }
}

/**
 * Reads SWE-bench predictions (JSONL, or a JSON array / object keyed by instance id) with
 * `instance_id, model_name_or_path, model_patch`. Throws AgentConfigError naming the file and
 * line of a bad entry.
 */
function readPredictions(file: string): Map<string, Prediction> {
  let text: string;
  try {
    text = readFileSync(file, "utf8");
  } catch (error) {
    throw new AgentConfigError(`${file}: cannot read the predictions file: ${(error as Error).message}`, file, { cause: error });
  }
  const entries: { where: string; value: unknown }[] = [];
  const trimmed = text.trimStart();
  // A JSON array, or one object keyed by instance id (a one-line JSONL file holds a single row instead).
  const oneRow = (value: unknown) => typeof value === "object" && value !== null && !Array.isArray(value) && "instance_id" in value;
  if (trimmed.startsWith("[") || (trimmed.startsWith("{") && !text.trim().includes("\n") && !oneRow(parseOrNull(text)))) {
    let value: unknown;
    try {
      value = JSON.parse(text);
    } catch (error) {
      throw new AgentConfigError(`${file}: not valid JSON: ${(error as Error).message}`, file);
    }
    const list = Array.isArray(value) ? value : Object.values(value as object);
    list.forEach((v, i) => entries.push({ where: `${file} entry ${i + 1}`, value: v }));
  } else {
    text.split("\n").forEach((line, i) => {
      if (line.trim() === "") return;
      try {
        entries.push({ where: `${file}:${i + 1}`, value: JSON.parse(line) });
      } catch (error) {
        throw new AgentConfigError(`${file}:${i + 1}: not valid JSON: ${(error as Error).message}`, file);
      }
    });
  }
  const out = new Map<string, Prediction>();
  for (const { where, value } of entries) {
    const row = value as Record<string, unknown> | null;
    if (typeof row !== "object" || row === null || typeof row.instance_id !== "string") throw new AgentConfigError(`${where}: instance_id must be a string`, file);
    const patch = row.model_patch;
    if (patch !== null && patch !== undefined && typeof patch !== "string") throw new AgentConfigError(`${where}: model_patch must be a string (or null for no patch)`, file);
    if (out.has(row.instance_id)) throw new AgentConfigError(`${where}: a second prediction for ${row.instance_id}`, file);
    out.set(row.instance_id, { instanceId: row.instance_id, model: typeof row.model_name_or_path === "string" ? row.model_name_or_path : null, patch: typeof patch === "string" ? patch : "" });
  }
  return out;
}

/**
 * Applies each instance's `model_patch` from a SWE-bench predictions file in the workdir. The
 * patch is recorded as `agent/patch.diff` (an empty one too: the swebench report counts it as an
 * empty patch); a patch that applies nowhere ends the run with an `agent` error naming the hunk.
 */
export function patchesAgent(file: string): Agent {
  const predictions = readPredictions(file);
  const name = `patches:${file}`;
  return {
    name,
    async setup(ctx) {
      if (!predictions.has(ctx.task.id)) throw new AgentSetupError(`${file} has no prediction for instance ${ctx.task.id}`, null, false);
    },
    async run(ctx) {
      const prediction = predictions.get(ctx.task.id);
      if (!prediction) throw new AgentSetupError(`${file} has no prediction for instance ${ctx.task.id}`, null, false);
      await mkdir(ctx.logDir, { recursive: true });
      await writeFile(join(ctx.logDir, "patch.diff"), prediction.patch);
      const model = prediction.model !== null ? { model: prediction.model } : {};
      if (prediction.patch.trim() === "") return { exitCode: 0, timedOut: false, aborted: false, durationMs: 0, outputTruncated: false, ...model };
      const started = Date.now();
      const outcome = await applyDiff(ctx, prediction.patch, "apply-");
      const durationMs = Date.now() - started;
      if (outcome.applied) return { exitCode: 0, timedOut: false, aborted: false, durationMs, outputTruncated: false, ...model };
      const run = { exitCode: outcome.timedOut || outcome.aborted ? null : 1, timedOut: outcome.timedOut, aborted: outcome.aborted, durationMs, outputTruncated: outcome.outputTruncated, ...model };
      return outcome.timedOut || outcome.aborted ? run : { ...run, error: `the model patch does not apply: ${outcome.why}` };
    },
  };
}
