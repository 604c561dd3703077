import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import type { Logger, TaskSpec } from "@proctor/schema";
import { formatDuration, textTable } from "@proctor/report";
import { DockerRuntime, ImageResolver, defaultBuildConcurrency, dockerAvailable, dockerDisk, type CachedImage } from "@proctor/sandbox-docker";
import { loadTasks } from "@proctor/tasks";
import { RuntimeMissingError, UsageError } from "../errors";
import { dockerImageOptions, type ImageFlags } from "../runtime";
import { prepareSources } from "../sources";

const MB = 1024 ** 2;
const GB = 1024 ** 3;

export function formatBytes(bytes: number): string {
  if (bytes >= GB) return `${(bytes / GB).toFixed(1)} GB`;
  if (bytes >= MB) return `${(bytes / MB).toFixed(1)} MB`;
  return `${Math.round(bytes / 1024)} kB`;
}

/** A Docker runtime with the image settings; `withRegistry` false: none (ls and prune need no registry). */
async function openDocker(logger: Logger, flags: ImageFlags, withRegistry = true, buildConcurrency?: number): Promise<DockerRuntime> {
  if (!(await dockerAvailable())) {
    throw new RuntimeMissingError("no Docker engine answers on DOCKER_HOST or /var/run/docker.sock; task images live in Docker. Start one (tools/docker/ensure-engine.sh).");
  }
  const env = withRegistry ? process.env : { ...process.env, PROCTOR_IMAGE_REGISTRY: "" };
  return new DockerRuntime({ logger, warmPool: 0, ...(buildConcurrency !== undefined ? { buildConcurrency } : {}), ...(await dockerImageOptions(withRegistry ? flags : { imageCacheGb: flags.imageCacheGb }, env)) });
}

export interface ImagesBuildOptions extends ImageFlags {
  sources: string[];
  include: string[];
  exclude: string[];
  concurrency?: number;
  logger: Logger;
  stdout?: NodeJS.WritableStream;
  stderr?: NodeJS.WritableStream;
}

/** One image the tasks need: a build context's (its hash tag) or a named one. */
interface Wanted {
  key: string;
  request: { image: string | null; buildContext: string | null; contextExclude?: readonly string[]; buildTimeoutMs: number };
  tasks: string[];
}

/**
 * `proctor images build <source...>`: every image the tasks need, built (or pulled from the
 * registry, or found here) before a run, `-n` at once; with a registry each is pushed there.
 * One line per image as it is done, then a summary; a failed build shows its log's last lines.
 * Exit 1 when any image failed, 2 for bad sources, 3 without Docker.
 */
export async function imagesBuildCommand(options: ImagesBuildOptions): Promise<number> {
  const out = options.stdout ?? process.stdout;
  const err = options.stderr ?? process.stderr;
  if (options.sources.length === 0) throw new UsageError("give at least one task source: proctor images build <source>... (a task dir, a dir of tasks, or an archive)");
  const scratch = await mkdtemp(join(tmpdir(), "proctor-images-"));
  try {
    const prepared = await prepareSources(options.sources.map((s) => resolve(s)), scratch, options.logger);
    const loaded = await loadTasks(prepared.taskSources, { include: options.include, exclude: options.exclude });
    if (loaded.errors.length > 0) throw new UsageError(`${loaded.errors.length} problem(s) loading ${options.sources.join(", ")}:\n${loaded.errors.map((e) => `  ${e.message}`).join("\n")}`);
    if (loaded.tasks.length === 0) throw new UsageError(`no tasks in ${options.sources.join(", ")}`);
    const concurrency = options.concurrency ?? defaultBuildConcurrency();
    const runtime = await openDocker(options.logger, options, true, concurrency);
    const wanted = new Map<string, Wanted>();
    let none = 0;
    for (const task of loaded.tasks) {
      const key = await imageKey(task);
      if (key === null) {
        none++;
        continue;
      }
      const entry = wanted.get(key) ?? { key, request: { image: task.environment.dockerImage, buildContext: task.environment.buildContext, ...(task.environment.buildContextExclude ? { contextExclude: task.environment.buildContextExclude } : {}), buildTimeoutMs: task.environment.buildTimeoutSec * 1000 }, tasks: [] };
      entry.tasks.push(task.id);
      wanted.set(key, entry);
    }
    const jobs = [...wanted.values()];
    const registry = runtime.imageRegistry;
    err.write(`images: ${jobs.length} image(s) for ${loaded.tasks.length} task(s)${none > 0 ? ` (${none} use the default image)` : ""}, ${concurrency} at once${registry ? `, shared through ${registry.host}` : ""}\n`);
    const counts = { built: 0, reused: 0, pulled: 0, failed: 0 };
    const failures: { key: string; tasks: string[]; message: string }[] = [];
    let done = 0;
    let next = 0;
    const worker = async () => {
      while (next < jobs.length) {
        const job = jobs[next++] as Wanted;
        const started = Date.now();
        const tasks = `(${job.tasks.length <= 3 ? job.tasks.join(", ") : `${job.tasks.slice(0, 3).join(", ")} +${job.tasks.length - 3}`})`;
        try {
          const { image, outcome } = await runtime.resolveImageWithOutcome({ ...job.request, ...(job.tasks[0] ? { taskId: job.tasks[0] } : {}) });
          // An image that was here already is pushed too, so the registry ends up with all of them.
          const pushed = outcome === "reused" && image.startsWith("proctor-build/") && runtime.imageRegistry !== null ? await runtime.shareImage(image) : false;
          counts[outcome]++;
          const how = outcome === "pulled" && image.startsWith("proctor-build/") ? `pulled from ${registry?.host ?? "its registry"}` : outcome === "reused" ? `reused${pushed ? `, pushed to ${runtime.imageRegistry?.host}` : ""}` : outcome;
          out.write(`[${++done}/${jobs.length}] ${how} ${image} in ${formatDuration(Date.now() - started)} ${tasks}\n`);
        } catch (error) {
          counts.failed++;
          const message = error instanceof Error ? error.message : String(error);
          failures.push({ key: job.key, tasks: job.tasks, message });
          out.write(`[${++done}/${jobs.length}] FAILED ${job.key} after ${formatDuration(Date.now() - started)} ${tasks}: ${message.split("\n")[0]}\n`);
        }
      }
    };
    await Promise.all(Array.from({ length: Math.min(concurrency, Math.max(1, jobs.length)) }, worker));
    for (const failure of failures) {
      const lines = failure.message.split("\n");
      out.write(`\n${failure.key} (${failure.tasks.join(", ")}) failed: ${lines[0]}\n${lines.slice(1).map((l) => `  ${l}`).join("\n")}\n`);
    }
    out.write(`images: ${counts.built} built, ${counts.reused} reused, ${counts.pulled} pulled, ${counts.failed} failed\n`);
    return counts.failed > 0 ? 1 : 0;
  } finally {
    await rm(scratch, { recursive: true, force: true });
  }
}

/** The image a task needs: `proctor-build/<hash>` for a build context, else its named image; null for the default image. */
async function imageKey(task: TaskSpec): Promise<string | null> {
  const { dockerImage, buildContext, buildContextExclude } = task.environment;
  if (buildContext) return ImageResolver.buildTag(buildContext, undefined, buildContextExclude);
  return dockerImage;
}

function ago(date: Date | null): string {
  return date === null ? "-" : `${formatDuration(Date.now() - date.getTime())} ago`;
}

function imageRow(image: CachedImage): string[] {
  const tasks = image.tasks.length <= 3 ? image.tasks.join(", ") : `${image.tasks.slice(0, 3).join(", ")} +${image.tasks.length - 3}`;
  return [image.tag, formatBytes(image.bytes), formatBytes(image.totalBytes), ago(image.lastUsedAt), image.inUse ?? "-", tasks || "-"];
}

/** `proctor images ls`: Proctor's task images, least recently used first, with what they take and who used them. */
export async function imagesLsCommand(options: { json: boolean; logger: Logger; stdout?: NodeJS.WritableStream }): Promise<number> {
  const out = options.stdout ?? process.stdout;
  const runtime = await openDocker(options.logger, {}, false);
  const images = await runtime.imageCache.list();
  const budget = await runtime.imageCache.budget();
  const usage = images.reduce((sum, image) => sum + image.bytes, 0);
  if (options.json) {
    out.write(`${JSON.stringify({ budgetBytes: budget, usageBytes: usage, images: images.map((i) => ({ ...i, createdAt: i.createdAt.toISOString(), lastUsedAt: i.lastUsedAt?.toISOString() ?? null })) }, null, 2)}\n`);
    return 0;
  }
  if (images.length > 0) out.write(`${textTable(["image", "own size", "size", "last used", "in use", "tasks"], images.map(imageRow), "left")}\n`);
  out.write(`${images.length} task image(s), ${formatBytes(usage)} of their own${budget !== null ? ` (budget ${formatBytes(budget)})` : ""}\n`);
  return 0;
}

/**
 * `proctor images prune [--dry-run]`: removes the least recently used task images until the rest
 * fit the budget (--image-cache-gb, else the default), never one in use.
 */
export async function imagesPruneCommand(options: { dryRun: boolean; imageCacheGb?: number | undefined; logger: Logger; stdout?: NodeJS.WritableStream }): Promise<number> {
  const out = options.stdout ?? process.stdout;
  const runtime = await openDocker(options.logger, { imageCacheGb: options.imageCacheGb }, false);
  const result = await runtime.imageCache.prune({ dryRun: options.dryRun });
  const verb = options.dryRun ? "would remove" : "removed";
  for (const image of result.removed) out.write(`${verb} ${image.tag} (${formatBytes(image.bytes)}, last used ${ago(image.lastUsedAt)})\n`);
  const budget = result.budgetBytes === null ? "no budget (the Docker data root's disk is not visible here: give --image-cache-gb)" : `budget ${formatBytes(result.budgetBytes)}`;
  out.write(`${verb} ${result.removed.length} task image(s); ${formatBytes(result.usageBytes)} left${options.dryRun ? " after it" : ""}, ${budget}${result.overBudget ? "; still over it: the rest are in use" : ""}${options.dryRun ? " (--dry-run: nothing was removed)" : ""}\n`);
  return 0;
}

/** For `proctor doctor`: what task images take and what the Docker data root's disk has free. */
export async function imagesDiskReport(runtime: DockerRuntime): Promise<{ count: number; usageBytes: number; budgetBytes: number | null; disk: Awaited<ReturnType<typeof dockerDisk>> }> {
  const images = await runtime.imageCache.list();
  return { count: images.length, usageBytes: images.reduce((sum, image) => sum + image.bytes, 0), budgetBytes: await runtime.imageCache.budget(), disk: await dockerDisk(runtime.docker).catch(() => null) };
}
