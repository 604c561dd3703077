import { z } from "zod";
import { Phase, TrialResult, RunSummary } from "./result";

/** Events the engine emits; the server maps them to term-executor's names on the wire. */
export const EventBody = z.discriminatedUnion("type", [
  z.object({ type: z.literal("run_started"), data: z.object({ runId: z.string(), totalTrials: z.number().int(), tasks: z.number().int(), attempts: z.number().int(), concurrency: z.number().int(), runtime: z.string(), skipped: z.number().int() }) }),
  z.object({ type: z.literal("trial_started"), trialId: z.string(), taskId: z.string(), data: z.object({ attempt: z.number().int(), retry: z.number().int() }) }),
  z.object({ type: z.literal("trial_phase"), trialId: z.string(), taskId: z.string(), data: z.object({ phase: Phase, status: z.enum(["started", "finished"]), durationMs: z.number().optional(), detail: z.string().optional() }) }),
  z.object({ type: z.literal("trial_retry"), trialId: z.string(), taskId: z.string(), data: z.object({ retry: z.number().int(), delayMs: z.number(), message: z.string() }) }),
  z.object({ type: z.literal("trial_finished"), trialId: z.string(), taskId: z.string(), data: TrialResult }),
  z.object({ type: z.literal("run_finished"), data: RunSummary }),
  // Image builds (a task's Dockerfile): told by the trial that started the build; trials that
  // need the same image wait on it without events of their own.
  z.object({ type: z.literal("image_build_started"), trialId: z.string(), taskId: z.string(), data: z.object({ image: z.string(), context: z.string() }) }),
  z.object({ type: z.literal("image_build_progress"), trialId: z.string(), taskId: z.string(), data: z.object({ image: z.string(), line: z.string(), elapsedMs: z.number().nonnegative() }) }),
  z.object({ type: z.literal("image_build_finished"), trialId: z.string(), taskId: z.string(), data: z.object({ image: z.string(), ok: z.boolean(), durationMs: z.number().nonnegative(), error: z.string().optional() }) }),
]);
export type EventBody = z.infer<typeof EventBody>;
export type EventType = EventBody["type"];

/** An event as stored in events.jsonl and replayed to subscribers. */
export type ProctorEvent = EventBody & { seq: number; ts: string; runId: string };
