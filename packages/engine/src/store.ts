import { randomBytes } from "node:crypto";
import { mkdir, readFile, rename, rm, writeFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import { RunConfig } from "@proctor/schema";
import type { StoredRunConfig } from "./config";
import { RunDirectoryError } from "./errors";

/** Write JSON so a reader sees the old file or the new one, never half of one. */
export async function writeJsonAtomic(path: string, value: unknown): Promise<void> {
  await mkdir(dirname(path), { recursive: true });
  const temp = `${path}.${process.pid}.${randomBytes(4).toString("hex")}.tmp`;
  try {
    await writeFile(temp, `${JSON.stringify(value, null, 2)}\n`);
    await rename(temp, path);
  } catch (error) {
    await rm(temp, { force: true });
    throw error;
  }
}

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
