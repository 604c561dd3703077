import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { RunConfig } from "@proctor/schema";
import type { StoredRunConfig } from "./config";
import { RunDirectoryError } from "./errors";

export { writeJsonAtomic } from "@proctor/events";

/** Runs async jobs one after another (file writes from trials finishing at once). */
export class SerialQueue {
  private tail: Promise<unknown> = Promise.resolve();

  run<T>(job: () => Promise<T>): Promise<T> {
    const next = this.tail.then(job, job);
    this.tail = next.catch(() => undefined);
    return next;
  }
}

/** A run directory's run.json, checked against the schema. Throws RunDirectoryError naming what is wrong. */
export async function readRunConfig(runDir: string): Promise<StoredRunConfig> {
  const file = join(runDir, "run.json");
  let text: string;
  try {
    text = await readFile(file, "utf8");
  } catch (error) {
    throw new RunDirectoryError(`${runDir} is not a run directory: cannot read ${file} (${(error as Error).message})`, runDir, { cause: error });
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (error) {
    throw new RunDirectoryError(`${file} is not valid JSON`, runDir, { cause: error });
  }
  const parsed = RunConfig.extend({ configHash: RunConfig.shape.runId }).safeParse(json);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    throw new RunDirectoryError(`${file}: not a run.json this version understands (${issue?.path.join(".") || "(root)"}: ${issue?.message})`, runDir);
  }
  return parsed.data;
}
