import type { Pins } from "@proctor/schema";
import type { LoadedRun } from "./load";

/** Per-task differences named one by one before they are counted. */
const SHOWN_TASKS = 5;

/** A digest short enough to read: `sha256:` dropped, 12 hex digits. */
function short(digest: string | null): string {
  return digest === null ? "unknown" : digest.replace(/^sha256:/, "").slice(0, 12);
}

/** The pins a run recorded: summary.json's (with the images its trials used), else run.json's; null for runs made before pins. */
export function pinsOf(run: Pick<LoadedRun, "summary" | "config">): Pins | null {
  return run.summary.pins ?? run.config?.pins ?? null;
}

/**
 * Each pin that differs between two runs, in words ("agent version 1.0.3 vs 1.0.4", "task
 * fix-bug content (a1b2 vs c3d4)", "image of task x (...)"); empty when they agree. Tasks only one
 * run has are not pins (a comparison lists them apart). A run without pins is named as such.
 */
export function diffPins(a: Pins | null, b: Pins | null): string[] {
  if (a === null && b === null) return [];
  if (a === null) return ["A records no pins (made before Proctor recorded them)"];
  if (b === null) return ["B records no pins (made before Proctor recorded them)"];
  const out: string[] = [];
  if (a.proctor !== b.proctor) out.push(`Proctor ${a.proctor} vs ${b.proctor}`);
  if (a.agent.name !== b.agent.name) out.push(`agent ${a.agent.name} vs ${b.agent.name}`);
  if (a.agent.version !== b.agent.version) out.push(`agent version ${a.agent.version ?? "none"} vs ${b.agent.version ?? "none"}`);
  if (a.agent.hash !== b.agent.hash) out.push(`agent files (${short(a.agent.hash)} vs ${short(b.agent.hash)})`);
  if (a.model !== b.model) out.push(`model ${a.model ?? "none"} vs ${b.model ?? "none"}`);
  const content: string[] = [];
  const images: string[] = [];
  const origins: string[] = [];
  for (const id of Object.keys(a.tasks).sort()) {
    const x = a.tasks[id];
    const y = b.tasks[id];
    if (!x || !y) continue;
    if (x.digest !== y.digest) content.push(`task ${id} content (${short(x.digest)} vs ${short(y.digest)})`);
    // An image not resolved by a run (no trial of the task ran) is no difference.
    if (x.imageId !== null && y.imageId !== null && x.imageId !== y.imageId) images.push(`image of task ${id} (${x.image ?? "?"} ${short(x.imageId)} vs ${y.image ?? "?"} ${short(y.imageId)})`);
    else if ((x.imageId === null || y.imageId === null) && x.image !== null && y.image !== null && x.image !== y.image) images.push(`image of task ${id} (${x.image} vs ${y.image})`);
    const ox = x.origin ? `${x.origin.dataset ? `${x.origin.dataset.name}@${x.origin.dataset.version} ` : ""}${x.origin.commit.slice(0, 12)}` : "local";
    const oy = y.origin ? `${y.origin.dataset ? `${y.origin.dataset.name}@${y.origin.dataset.version} ` : ""}${y.origin.commit.slice(0, 12)}` : "local";
    if (ox !== oy) origins.push(`origin of task ${id} (${ox} vs ${oy})`);
  }
  for (const [items, what] of [[content, "tasks' content"], [images, "tasks' images"], [origins, "tasks' origins"]] as const) {
    out.push(...items.slice(0, SHOWN_TASKS));
    if (items.length > SHOWN_TASKS) out.push(`and ${items.length - SHOWN_TASKS} more ${what}`);
  }
  return out;
}

/** The warning line for two runs whose pins differ ("pins differ: ..."), or null when they agree. */
export function pinsWarning(a: Pins | null, b: Pins | null): string | null {
  const diff = diffPins(a, b);
  return diff.length > 0 ? `pins differ: ${diff.join(", ")}` : null;
}
