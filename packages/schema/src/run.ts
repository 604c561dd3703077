import { z } from "zod";
import { AgentSpec } from "./agent";

/** The resolved configuration of one run, stored as run.json with its hash. */
export const RunConfig = z.object({
  runId: z.string(),
  /** Sorted task ids with a content hash of each task's files, so a resume sees edits. */
  tasks: z.array(z.object({ id: z.string(), hash: z.string() })),
  sources: z.array(z.string()),
  agent: AgentSpec,
  agentHash: z.string().nullable(),
  runtime: z.enum(["docker", "local"]),
  attempts: z.number().int().positive(),
  concurrency: z.number().int().positive(),
  timeoutMultiplier: z.number().positive(),
  defaultImage: z.string().nullable(),
});
export type RunConfig = z.infer<typeof RunConfig>;
