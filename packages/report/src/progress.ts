import { existsSync, statSync } from "node:fs";
import { isAbsolute, join, relative } from "node:path";
import cliProgress from "cli-progress";
import { isCleanPass, type ProctorEvent, type TrialResult } from "@proctor/schema";
import { trialFlags } from "./model";
import { EtaEstimator } from "./eta";
import { clipAtWord, formatDuration } from "./text";

export interface ProgressReporter {
  onEvent(event: ProctorEvent): void;
  /** Print the periodic status (the timer calls it; tests may too). */
  tick(): void;
  stop(): void;
}

export interface ProgressOptions {
  /** Redraw a bar (a terminal) or print lines (CI, pipes). Default: the stream's isTTY. */
  tty?: boolean;
  /** The run directory, for the paths of verifier logs. */
  runDir?: string;
  /**
   * Whether a trial's line names its log (default: every trial that did not pass). `proctor tasks
   * validate` names none for the outcome it expects (nop scoring 0), whose logs it does not keep.
   */
  showLog?: (r: TrialResult) => boolean;
  /**
   * Lines mode: the most often a status line or a build's progress line is printed, in ms
   * (default 20 s). Bar mode redraws every second.
   */
  intervalMs?: number;
  /** Clock, injectable for tests. */
  now?: () => number;
  /** Start the timer that calls tick() (default true; tests call tick() themselves). */
  timer?: boolean;
}

interface Counts { done: number; passed: number; failed: number; errored: number; total: number }

interface Build {
  image: string;
  taskId: string;
  startedAt: number;
  line: string | null;
  /** Lines mode: when this build's progress was last printed. */
  printedAt: number;
}

const MAX_LINE = 240;
/** A trial's error message is Proctor's own one-line sentence: shown whole up to this. */
const MAX_ERROR = 600;

function statusWord(status: string): string {
  return status === "passed" ? "PASS" : status === "failed" ? "FAIL" : "ERROR";
}

function clip(text: string, max = MAX_LINE): string {
  return clipAtWord(text.split("\n")[0] ?? "", max);
}

/** Built images are tagged with a 64-digit content hash; 12 digits tell them apart on screen. */
function shortImage(image: string): string {
  return image.replace(/^(proctor-build\/[0-9a-f]{12})[0-9a-f]{52}$/, "$1");
}

/** A path as the user can type it: relative to the working directory when under it. */
function shownPath(path: string): string {
  const rel = relative(process.cwd(), path);
  return rel !== "" && !rel.startsWith("..") && !isAbsolute(rel) ? rel : path;
}

/** Why a trial did not pass (or what to audit in a pass), in one line: error kind, reward, agent exit, checks, integrity flags. */
function trialWhy(r: TrialResult): string {
  const parts: string[] = [];
  const c = r.competition;
  if (r.error) parts.push(`${r.error.kind} error: ${clip(r.error.message, MAX_ERROR)}`);
  else if (c) parts.push(c.valid ? `score ${c.score} ${c.metric}, ${c.medal ?? "no"} medal` : `invalid submission: ${clip(c.note ?? "")}`);
  else if (r.status !== "passed") parts.push(`reward ${r.reward ?? "-"}`);
  if (r.agent) parts.push(r.agent.timedOut ? "agent timed out" : `agent exit ${r.agent.exitCode ?? "-"}`);
  const failedChecks = (r.checks ?? []).filter((c) => !c.passed).map((c) => (c.timedOut ? `${c.name} (timed out)` : c.name));
  if (failedChecks.length > 0) parts.push(`failed checks: ${failedChecks.join(", ")}`);
  for (const flag of trialFlags(r)) if (!parts.some((p) => p.includes(flag))) parts.push(flag);
  return parts.join("; ");
}

/** Where to look next: the verifier's output when there is one (its stderr when only that holds anything), else the trial directory. */
function trialLogHint(runDir: string, trialId: string): string {
  const log = join(runDir, "trials", trialId, "verifier", "test-stdout.txt");
  const errLog = join(runDir, "trials", trialId, "verifier", "test-stderr.txt");
  if (existsSync(log) && sizeOf(log) === 0 && sizeOf(errLog) > 0) return `verifier log ${shownPath(errLog)}`;
  if (existsSync(log)) return `verifier log ${shownPath(log)}`;
  const grader = join(runDir, "trials", trialId, "verifier", "grade-stdout.txt");
  if (existsSync(grader)) return `grader log ${shownPath(grader)}`;
  return `no verifier log; trial dir ${shownPath(join(runDir, "trials", trialId))}`;
}

function sizeOf(path: string): number {
  try {
    return statSync(path).size;
  } catch {
    return 0;
  }
}

/**
 * Live progress of a run. On a TTY: a bar with passed/failed/errored counts, an ETA, and what is
 * running or being built, redrawn every second, with FAIL/ERROR lines above it. Otherwise plain
 * lines: one per finished trial, image builds (start, progress at most every `intervalMs`, end),
 * and a status line when nothing was printed for `intervalMs`.
 * The ETA counts only finished trials' time outside image pulls and builds ("ETA unknown" before).
 */
export function createProgress(stream: NodeJS.WritableStream & { isTTY?: boolean }, options: ProgressOptions = {}): ProgressReporter {
  const tty = options.tty ?? Boolean(stream.isTTY);
  const now = options.now ?? Date.now;
  const intervalMs = options.intervalMs ?? 20_000;
  const counts: Counts = { done: 0, passed: 0, failed: 0, errored: 0, total: 0 };
  const running = new Set<string>();
  const builds = new Map<string, Build>();
  const eta = new EtaEstimator(now);
  const startedAt = now();
  let lastPrinted = now();
  // MultiBar (one bar) because its log() prints lines above the bar without moving the cursor back.
  let bars: cliProgress.MultiBar | null = null;
  let bar: cliProgress.SingleBar | null = null;
  let timer: NodeJS.Timeout | null = null;

  const etaText = () => {
    const ms = eta.etaMs();
    return ms === null ? "ETA unknown" : `ETA ${formatDuration(ms)}`;
  };
  const runningText = () => [...running].slice(0, 3).join(", ") + (running.size > 3 ? ` +${running.size - 3}` : "");
  const buildText = (b: Build) => `building ${shortImage(b.image)} (${b.taskId}) ${formatDuration(now() - b.startedAt)}${b.line ? `: ${clip(b.line, 80)}` : ""}`;
  const activity = () => {
    const first = [...builds.values()][0];
    if (first) return buildText(first) + (builds.size > 1 ? ` +${builds.size - 1} more` : "");
    return runningText();
  };
  const payload = () => ({ passed: counts.passed, failed: counts.failed, errored: counts.errored, etaText: etaText(), activity: activity() });

  const write = (line: string) => {
    lastPrinted = now();
    if (bars && bar) {
      bars.log(`${line}\n`);
      bar.update(counts.done, payload());
    } else {
      stream.write(`${line}\n`);
    }
  };

  const statusLine = () => {
    const parts = [`${counts.done}/${counts.total} done (passed ${counts.passed} failed ${counts.failed} errored ${counts.errored})`];
    if (running.size > 0) parts.push(`running ${running.size}: ${runningText()}`);
    if (builds.size > 0) parts.push(`building ${builds.size} image${builds.size > 1 ? "s" : ""}`);
    parts.push(`elapsed ${formatDuration(now() - startedAt)}`, etaText());
    return `... ${parts.join(", ")}`;
  };

  const tick = () => {
    if (bar) {
      bar.update(counts.done, payload());
      return;
    }
    const t = now();
    for (const b of builds.values()) {
      if (b.line !== null && t - b.printedAt >= intervalMs) {
        b.printedAt = t;
        write(buildText(b));
      }
    }
    if (counts.total > 0 && t - lastPrinted >= intervalMs) write(statusLine());
  };

  const trialLine = (r: TrialResult) => {
    const reward = r.reward === null ? "-" : String(r.reward);
    const head = `[${counts.done}/${counts.total}] ${statusWord(r.status)} ${r.trialId} reward=${reward} ${formatDuration(r.durationMs)}`;
    const why = trialWhy(r);
    const where = r.status !== "passed" && options.runDir && (options.showLog?.(r) ?? true) ? `; ${trialLogHint(options.runDir, r.trialId)}` : "";
    const detail = r.status !== "passed" || trialFlags(r).length > 0 ? ` — ${why}${where}` : "";
    return `${head}${detail}`;
  };

  return {
    onEvent(event) {
      switch (event.type) {
        case "run_started": {
          counts.total = event.data.totalTrials - event.data.skipped;
          eta.start(counts.total, event.data.concurrency);
          const skipped = event.data.skipped > 0 ? `, ${event.data.skipped} already done (resume)` : "";
          write(`run ${event.data.runId}: ${event.data.tasks} tasks x ${event.data.attempts} attempts on ${event.data.runtime}, concurrency ${event.data.concurrency}${skipped}`);
          if (tty) {
            bars = new cliProgress.MultiBar(
              {
                stream: stream as NodeJS.WriteStream,
                format: "{bar} {value}/{total} | passed {passed} failed {failed} errored {errored} | {etaText} | {activity}",
                hideCursor: true,
                clearOnComplete: false,
                linewrap: false,
              },
              cliProgress.Presets.shades_classic,
            );
            bar = bars.create(counts.total, 0, payload());
          }
          if (options.timer !== false && !timer) {
            timer = setInterval(tick, tty ? 1000 : Math.min(intervalMs, 5000));
            timer.unref();
          }
          break;
        }
        case "trial_started":
          running.add(event.trialId);
          eta.trialStarted(event.trialId);
          bar?.update(counts.done, payload());
          break;
        case "trial_phase":
          if (event.data.phase === "environment") eta.imagePhase(event.trialId, event.data.status);
          break;
        case "trial_retry":
          write(`retry ${event.trialId} (#${event.data.retry} in ${formatDuration(event.data.delayMs)}): ${clip(event.data.message)}`);
          break;
        case "image_build_started":
          builds.set(event.data.image, { image: event.data.image, taskId: event.taskId, startedAt: now(), line: null, printedAt: -Infinity });
          write(`building image ${shortImage(event.data.image)} for ${event.taskId} from ${shownPath(event.data.context)}`);
          break;
        case "image_build_progress": {
          const b = builds.get(event.data.image);
          if (!b) break;
          b.line = event.data.line;
          // Lines mode: the first log line at once, then at most one line per interval (tick()).
          if (!bar && b.printedAt === -Infinity) {
            b.printedAt = now();
            write(buildText(b));
          }
          break;
        }
        case "image_build_finished":
          builds.delete(event.data.image);
          write(
            event.data.ok
              ? `built image ${shortImage(event.data.image)} in ${formatDuration(event.data.durationMs)}`
              : `building image ${shortImage(event.data.image)} failed after ${formatDuration(event.data.durationMs)}: ${clip(event.data.error ?? "unknown error")}`,
          );
          break;
        case "trial_finished": {
          running.delete(event.trialId);
          const r = event.data;
          eta.trialFinished(r.trialId, r.durationMs, r.phases);
          counts.done += 1;
          if (isCleanPass(r)) counts.passed += 1;
          else if (r.status === "failed" || r.status === "passed") counts.failed += 1;
          else counts.errored += 1;
          if (bar) {
            if (r.status !== "passed" || trialFlags(r).length > 0) write(trialLine(r));
            else bar.update(counts.done, payload());
          } else {
            write(`${trialLine(r)} (passed ${counts.passed} failed ${counts.failed} errored ${counts.errored}, ${etaText()})`);
          }
          break;
        }
        default:
          break;
      }
    },
    tick,
    stop() {
      if (timer) clearInterval(timer);
      timer = null;
      if (bars && bar) {
        bar.update(counts.done, payload());
        bars.update(); // print what log() still holds
        bars.stop();
      }
      bars = null;
      bar = null;
    },
  };
}
