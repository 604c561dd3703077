import { taskDetailJson } from "@proctor/client";
import type { TaskDetailResponse } from "@proctor/client";
import type { QueuedBatch, RunQueue } from "@proctor/engine";
import { NotFoundError } from "./errors";

/** GET /batch/:id/task/:task_id: the task plus per-check results from its result.json. */
export async function taskDetail(queue: RunQueue, batch: QueuedBatch, taskId: string): Promise<TaskDetailResponse> {
  const task = batch.tasks.get(taskId);
  if (!task) throw new NotFoundError(`batch ${batch.id} has no task ${JSON.stringify(taskId)}; list its tasks with GET /batch/${batch.id}/tasks`);
  return taskDetailJson(task, task.status === "completed" ? await queue.trialResult(batch, taskId) : null);
}
