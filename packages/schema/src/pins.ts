import { z } from "zod";

/**
 * Where one task of a run came from, for tasks fetched from git (a dataset by name, or a
 * `git+URL@commit#path` source): the repository URL, the full commit id and the task's directory
 * in it (`""` for the repository's root), plus the dataset's name and version when it was named
 * through a registry. With the task's content hash (RunConfig `tasks[].hash`) this pins the task.
 */
export const TaskOrigin = z.object({
  taskId: z.string(),
  dataset: z.object({ name: z.string(), version: z.string() }).optional(),
  repository: z.string(),
  commit: z.string(),
  path: z.string(),
});
export type TaskOrigin = z.infer<typeof TaskOrigin>;

/** What one task of a run was pinned to: its content and the image its sandboxes ran on. */
export const TaskPin = z.object({
  /** sha256 of the task's files (run.json's task hash). */
  digest: z.string(),
  /** The image reference the task's sandboxes were created from; null until a trial resolved it. */
  image: z.string().nullable(),
  /** The image's content id as the runtime reports it (Docker: `sha256:...`); null when unknown. */
  imageId: z.string().nullable(),
  /** The dataset and commit the task was fetched from, when it was. */
  origin: TaskOrigin.omit({ taskId: true }).optional(),
});
export type TaskPin = z.infer<typeof TaskPin>;

/**
 * Everything a run's results depend on besides chance: Proctor's version, the agent (name,
 * version, content hash), the model, and per task its content, image and origin. Two runs whose
 * pins agree ran the same thing; `proctor report A B` names each pin that differs.
 */
export const Pins = z.object({
  /** The Proctor version that ran the trials. */
  proctor: z.string(),
  agent: z.object({
    name: z.string(),
    /** An installed CLI's package version as installed; a versioned agent's version; else null. */
    version: z.string().nullable(),
    /** sha256 of an agent directory's files (code and image agents); else null. */
    hash: z.string().nullable(),
  }),
  /** The model a model-driven agent used; null for agents without one. */
  model: z.string().nullable(),
  tasks: z.record(z.string(), TaskPin),
});
export type Pins = z.infer<typeof Pins>;
