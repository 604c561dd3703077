import type { WorkerTrialEvent } from "./worker";
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from "prom-client";

const DURATION_BUCKETS_SEC = [1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600];

/** The worker's Prometheus metrics, in a registry of its own; fed by the queue worker's trial and heartbeat callbacks. */
export class WorkerMetrics {
  readonly registry = new Registry();
  private readonly running = new Set<string>();
  /** Epoch ms of the last heartbeat Redis took; 0 before the first. */
  lastHeartbeatMs = 0;
  draining = false;

  readonly trialsRunning: Gauge = new Gauge({
    name: "proctor_worker_running_trials",
    help: "Trials this worker runs now",
    registers: [this.registry],
    collect: (): void => this.trialsRunning.set(this.running.size),
  });
  readonly capacity = new Gauge({ name: "proctor_worker_capacity", help: "Trials this worker runs at once at most (--concurrency)", registers: [this.registry] });
  readonly trialsFinished = new Counter({
    name: "proctor_worker_trials_finished_total",
    help: "Trials whose result this worker sent, by status (passed, failed, error)",
    labelNames: ["status"] as const,
    registers: [this.registry],
  });
  readonly trialsFailed = new Counter({
    name: "proctor_worker_trials_failed_total",
    help: "Trial jobs that ended here without a result (infra errors, unreadable jobs, stops), by whether they run again",
    labelNames: ["retried"] as const,
    registers: [this.registry],
  });
  readonly trialDuration = new Histogram({
    name: "proctor_worker_trial_duration_seconds",
    help: "Wall time of a finished trial, by status",
    labelNames: ["status"] as const,
    buckets: DURATION_BUCKETS_SEC,
    registers: [this.registry],
  });
  readonly heartbeats = new Counter({
    name: "proctor_worker_heartbeats_total",
    help: "Heartbeats written to Redis, by outcome (ok, failed)",
    labelNames: ["outcome"] as const,
    registers: [this.registry],
  });
  readonly lastHeartbeat: Gauge = new Gauge({
    name: "proctor_worker_last_heartbeat_timestamp_seconds",
    help: "When Redis last took this worker's heartbeat (Unix time; 0 before the first)",
    registers: [this.registry],
    collect: (): void => this.lastHeartbeat.set(this.lastHeartbeatMs / 1000),
  });
  readonly drainingGauge: Gauge = new Gauge({
    name: "proctor_worker_draining",
    help: "1 once SIGTERM asked the worker to drain (no new trials), else 0",
    registers: [this.registry],
    collect: (): void => this.drainingGauge.set(this.draining ? 1 : 0),
  });

  /** Every series carries `worker="<name>"`, as the server's per-worker gauges do. */
  constructor(worker: string) {
    this.registry.setDefaultLabels({ worker });
    collectDefaultMetrics({ register: this.registry, prefix: "proctor_worker_" });
  }

  get runningTrials(): number {
    return this.running.size;
  }

  trial(event: WorkerTrialEvent): void {
    const key = `${event.runId}|${event.trialId}`;
    if (event.type === "started") {
      this.running.add(key);
      return;
    }
    this.running.delete(key);
    if (event.type === "finished") {
      this.trialsFinished.inc({ status: event.status });
      this.trialDuration.observe({ status: event.status }, event.durationMs / 1000);
    } else {
      this.trialsFailed.inc({ retried: event.willRetry ? "yes" : "no" });
    }
  }

  heartbeat(ok: boolean): void {
    this.heartbeats.inc({ outcome: ok ? "ok" : "failed" });
    if (ok) this.lastHeartbeatMs = Date.now();
  }
}

/** One log line per trial: what an operator greps for (`trial=<id> run=<id> status=...`). */
export function trialLogLine(worker: string, event: WorkerTrialEvent): string {
  const head = `trial=${event.trialId} run=${event.runId} worker=${worker}`;
  if (event.type === "started") return `${head} task=${event.taskId} status=started retry=${event.retry}`;
  if (event.type === "failed") {
    return `${head} status=lost retry=${event.willRetry ? "yes" : "no"} error=${JSON.stringify(oneLine(event.message))}`;
  }
  const reward = event.reward === null ? "-" : String(Number(event.reward.toFixed(4)));
  const error = event.error ? ` error=${JSON.stringify(`${event.error.kind}: ${oneLine(event.error.message)}`)}` : "";
  return `${head} task=${event.taskId} status=${event.status} reward=${reward} duration=${(event.durationMs / 1000).toFixed(1)}s${error}`;
}

function oneLine(text: string): string {
  const line = text.replace(/\s+/g, " ").trim();
  return line.length > 300 ? `${line.slice(0, 297)}...` : line;
}
