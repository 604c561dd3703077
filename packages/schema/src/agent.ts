import { z } from "zod";

export const AgentSpec = z.discriminatedUnion("kind", [
  z.object({ kind: z.literal("oracle") }),
  z.object({ kind: z.literal("nop") }),
  /** A host directory uploaded to /agent and started by its entrypoint. */
  z.object({ kind: z.literal("code"), dir: z.string() }),
  /** An Agent object a library user passed to the engine; recorded by its name. */
  z.object({ kind: z.literal("custom"), name: z.string() }),
]);
export type AgentSpec = z.infer<typeof AgentSpec>;
