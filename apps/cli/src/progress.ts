import cliProgress from "cli-progress";
import type { ProctorEvent } from "@proctor/schema";
import { formatDuration } from "./format";

export interface ProgressReporter {
  onEvent(event: ProctorEvent): void;
  stop(): void;
}

interface Counts { done: number; passed: number; failed: number; errored: number; total: number }

function statusWord(status: string): string {
  return status === "passed" ? "PASS" : status === "failed" ? "FAIL" : "ERROR";
}

/** A bar with passed/failed/errored counts and ETA on a TTY; one plain line per event otherwise. */
export function createProgress(stream: NodeJS.WriteStream, options: { tty?: boolean } = {}): ProgressReporter {
  const tty = options.tty ?? Boolean(stream.isTTY);
  const counts: Counts = { done: 0, passed: 0, failed: 0, errored: 0, total: 0 };
  const running = new Set<string>();
  const startedAt = Date.now();
  let bar: cliProgress.SingleBar | null = null;

  const write = (line: string) => {
    if (bar) bar.stop();
    stream.write(`${line}\n`);
    if (bar) bar.start(counts.total, counts.done, payload());
  };
  const payload = () => ({
    passed: counts.passed,
    failed: counts.failed,
    errored: counts.errored,
    running: [...running].slice(0, 3).join(", ") + (running.size > 3 ? ` +${running.size - 3}` : ""),
  });

  return {
    onEvent(event) {
      switch (event.type) {
        case "run_started": {
          counts.total = event.data.totalTrials;
          const skipped = event.data.skipped > 0 ? `, ${event.data.skipped} already done (resume)` : "";
          stream.write(`run ${event.data.runId}: ${event.data.tasks} tasks x ${event.data.attempts} attempts on ${event.data.runtime}, concurrency ${event.data.concurrency}${skipped}\n`);
          counts.total = event.data.totalTrials;
          if (tty) {
            bar = new cliProgress.SingleBar(
              {
                stream,
                format: "{bar} {value}/{total} | passed {passed} failed {failed} errored {errored} | ETA {eta_formatted} | {running}",
                hideCursor: true,
                clearOnComplete: false,
                etaBuffer: 20,
              },
              cliProgress.Presets.shades_classic,
            );
            bar.start(counts.total, 0, payload());
          }
          break;
        }
        case "trial_started":
          running.add(event.trialId);
          bar?.update(counts.done, payload());
          break;
        case "trial_retry":
          write(`retry ${event.trialId} (#${event.data.retry} in ${formatDuration(event.data.delayMs)}): ${event.data.message}`);
          break;
        case "trial_finished": {
          running.delete(event.trialId);
          const r = event.data;
          counts.done += 1;
          if (r.status === "passed") counts.passed += 1;
          else if (r.status === "failed") counts.failed += 1;
          else counts.errored += 1;
          if (bar) {
            if (r.status === "error") write(`ERROR ${r.trialId}: ${r.error?.kind}: ${r.error?.message}`);
            bar.update(counts.done, payload());
          } else {
            const reward = r.reward === null ? "-" : String(r.reward);
            const why = r.error ? ` ${r.error.kind}: ${r.error.message}` : "";
            const elapsed = Date.now() - startedAt;
            const eta = counts.done > 0 ? (elapsed / counts.done) * (counts.total - counts.done) : NaN;
            stream.write(
              `[${counts.done}/${counts.total}] ${statusWord(r.status)} ${r.trialId} reward=${reward} ${formatDuration(r.durationMs)}${why} ` +
                `(passed ${counts.passed} failed ${counts.failed} errored ${counts.errored}, ETA ${formatDuration(eta)})\n`,
            );
          }
          break;
        }
        default:
          break;
      }
    },
    stop() {
      bar?.stop();
      bar = null;
    },
  };
}
