import { ImageError, SandboxStartError, type Sandbox } from "@proctor/sandbox";
import { HOUSEKEEPING_MS, SANDBOX_START_MS, effectiveLimits, type Attempt } from "./context";
import { competitionMounts, containerSettingsFor } from "./grade-competition";

/**
 * Phases 1 and 2: the task's image (used, pulled or built) and a fresh sandbox of it with the
 * task's limits. `onPending` receives the create call at once, so the caller can remove a sandbox
 * that appears after it stopped waiting.
 */
export async function startSandbox(attempt: Attempt, lifetimeMs: number, onPending: (create: Promise<Sandbox>) => void): Promise<Sandbox> {
  const { task, env, signal, phase, budgets, trialId } = attempt;
  const spec = task.environment;
  // A competition's agent sandbox is the agent's own image when it brings one (plus the public data).
  const agentImage = task.competition ? env.agent.image : undefined;
  const wanted = agentImage ? null : (spec.dockerImage ?? (spec.buildContext ? null : env.defaultImage));
  const buildContext = agentImage?.buildContext ?? spec.buildContext;
  // The runtime bounds a build by buildTimeoutMs; this bound also covers a hung daemon call.
  const imageBound = AbortSignal.timeout(budgets.buildMs + HOUSEKEEPING_MS);
  const imageSignal = AbortSignal.any([signal, imageBound]);
  const image = await phase(
    "environment",
    () =>
      env.runtime.resolveImage({
        image: wanted,
        buildContext,
        ...(agentImage ? { buildArgs: agentImage.buildArgs } : spec.buildContextExclude ? { contextExclude: spec.buildContextExclude } : {}),
        buildTimeoutMs: budgets.buildMs,
        taskId: task.id,
        signal: imageSignal,
        onProgress: (line) => env.logger.debug(line, { trialId }),
        onBuild: (update) => {
          const ids = { trialId, taskId: task.id };
          if (update.status === "started") env.emit({ type: "image_build_started", ...ids, data: { image: update.image, context: update.context } });
          else if (update.status === "progress") env.emit({ type: "image_build_progress", ...ids, data: { image: update.image, line: update.line, elapsedMs: update.elapsedMs } });
          else env.emit({ type: "image_build_finished", ...ids, data: { image: update.image, ok: update.ok, durationMs: update.durationMs, ...(update.error !== undefined ? { error: update.error } : {}) } });
        },
      }),
    wanted ?? buildContext ?? undefined,
    imageSignal,
  ).catch((error: unknown) => {
    if (imageBound.aborted && !signal.aborted) {
      throw new ImageError(`resolving the image did not finish within ${Math.round((budgets.buildMs + HOUSEKEEPING_MS) / 1000)} s`, wanted, { cause: error });
    }
    throw error;
  });

  attempt.image = image;
  // The image's content id is the trial's pin: a tag can move, the id cannot.
  const imageId = env.runtime.imageId ? await env.runtime.imageId(image).catch(() => null) : null;
  attempt.state.environment = { image, imageId };
  // An installed CLI agent is bound read-only into the sandbox (installed on first use, once per machine).
  const agentMounts = (await env.agent.sandboxMounts?.(env.runtime, signal)) ?? [];
  const limits = effectiveLimits(task, env.limits);
  const container = containerSettingsFor(task, env.container);
  const startBound = AbortSignal.timeout(SANDBOX_START_MS);
  const startSignal = AbortSignal.any([signal, startBound]);
  const create = env.runtime.create({
    image,
    ...(limits.cpus !== undefined ? { cpus: limits.cpus } : {}),
    ...(limits.memoryMb !== undefined ? { memoryMb: limits.memoryMb } : {}),
    ...(limits.pidsLimit !== undefined ? { pidsLimit: limits.pidsLimit } : {}),
    network: spec.allowInternet,
    ...(task.competition || agentMounts.length > 0 ? { mounts: [...competitionMounts(task), ...agentMounts] } : {}),
    ...(container ? { container } : {}),
    env: spec.env,
    ...(spec.workdir !== null ? { workdir: spec.workdir } : {}),
    labels: { "proctor.run": env.runId, "proctor.trial": trialId },
    lifetimeMs,
    ...(env.upcomingTrials ? { upcoming: env.upcomingTrials() } : {}),
    signal: startSignal,
  });
  onPending(create);
  return phase("sandbox", () => create, image, startSignal).catch((error: unknown) => {
    if (startBound.aborted && !signal.aborted) {
      throw new SandboxStartError(`the sandbox did not start within ${SANDBOX_START_MS / 1000} s`, { cause: error });
    }
    throw error;
  });
}
