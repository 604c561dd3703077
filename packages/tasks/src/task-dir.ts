import { join } from "node:path";
import type { LoadedTask } from "./common";
import { isCompetitionDir, loadCompetitionTask } from "./competition";
import { TaskLoadError } from "./errors";
import { displayPath } from "./fields";
import { loadNativeTask } from "./native";
import { loadTb1Task } from "./tb1";
import { loadTermExecutorTask, type TermExecutorOptions } from "./term-executor";
import { isDir, isFile } from "./tree";

export type TaskDirFormat = "native" | "tb1" | "term-executor" | "competition";

/** Which single-task format a directory holds, or null when it is not a task directory. */
export async function detectTaskDir(dir: string): Promise<TaskDirFormat | null> {
  if (await isCompetitionDir(dir)) return "competition";
  if ((await isFile(join(dir, "task.toml"))) || (await isFile(join(dir, "instruction.md")))) return "native";
  if (await isFile(join(dir, "task.yaml"))) return "tb1";
  if ((await isFile(join(dir, "run-tests.sh"))) || (await isFile(join(dir, "solution.sh")))) return "tb1";
  if ((await isFile(join(dir, "tests", "test.sh"))) || (await isDir(join(dir, "environment")))) return "native";
  if (await isFile(join(dir, "workspace.yaml"))) return "term-executor";
  return null;
}

/** Load one task directory in whichever format it holds. */
export async function loadTaskDir(dir: string, options: TermExecutorOptions = {}): Promise<LoadedTask> {
  const format = await detectTaskDir(dir);
  if (format === "competition") return loadCompetitionTask(dir, options);
  if (format === "native") return loadNativeTask(dir, options);
  if (format === "tb1") return loadTb1Task(dir, options);
  if (format === "term-executor") return loadTermExecutorTask(dir, options);
  // A term-executor task without its workspace.yaml still gets term-executor's own message.
  if (await isFile(join(dir, "prompt.md"))) return loadTermExecutorTask(dir, options);
  return { task: null, errors: [new TaskLoadError(displayPath(dir), NOT_A_TASK)] };
}


/** What a task directory must hold, for messages. */
const NOT_A_TASK =
  "is not a task directory: expected task.toml + instruction.md + tests/test.sh (Harbor / Terminal-Bench 2), task.yaml (Terminal-Bench 1) or workspace.yaml + prompt.md (term-executor)";
