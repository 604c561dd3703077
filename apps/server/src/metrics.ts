import type { RunQueue } from "@proctor/engine";
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from "prom-client";

const DURATION_BUCKETS_SEC = [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600];

/** The server's Prometheus metrics, in a registry of its own (never prom-client's global one). */
export class ServerMetrics {
  readonly registry = new Registry();
  readonly batchesSubmitted = new Counter({ name: "proctor_batches_submitted_total", help: "Batches accepted by POST /submit", registers: [this.registry] });
  readonly batchesFinished = new Counter({
    name: "proctor_batches_finished_total",
    help: "Batches that ended, by outcome (completed, failed, cancelled)",
    labelNames: ["outcome"] as const,
    registers: [this.registry],
  });
  readonly trialsFinished = new Counter({
    name: "proctor_trials_finished_total",
    help: "Trials (tasks) that ended, by outcome (passed, failed, error)",
    labelNames: ["outcome"] as const,
    registers: [this.registry],
  });
  readonly trialDuration = new Histogram({
    name: "proctor_trial_duration_seconds",
    help: "Wall time of a finished trial, by outcome",
    labelNames: ["outcome"] as const,
    buckets: DURATION_BUCKETS_SEC,
    registers: [this.registry],
  });
  readonly phaseDuration = new Histogram({
    name: "proctor_trial_phase_duration_seconds",
    help: "Wall time of one trial phase (environment, sandbox, workspace, agent_setup, agent, verifier, collect)",
    labelNames: ["phase"] as const,
    buckets: DURATION_BUCKETS_SEC,
    registers: [this.registry],
  });
  /** Read from the batch queue at each scrape (see observe). */
  private queue: RunQueue | null = null;
  readonly activeTrials = this.queueGauge("proctor_active_trials", "Trials running now", (c) => c.runningTrials);
  readonly activeBatches = this.queueGauge("proctor_active_batches", "Batches running now", (c) => c.active);
  readonly queuedBatches = this.queueGauge("proctor_queued_batches", "Batches waiting for a free slot", (c) => c.queued);
  readonly wsClients = new Gauge({ name: "proctor_ws_clients", help: "Open WebSocket connections", registers: [this.registry] });
  /** Read from the upload caps at each scrape (see observeUploads). */
  private uploads: { readonly inUse: number } | null = null;
  readonly uploadsInProgress: Gauge = new Gauge({
    name: "proctor_uploads_in_progress",
    help: "Batch uploads being received now (each holds one of --max-uploads)",
    registers: [this.registry],
    collect: () => {
      if (this.uploads) this.uploadsInProgress.set(this.uploads.inUse);
    },
  });
  readonly wsDropped = new Counter({
    name: "proctor_ws_dropped_events_total",
    help: "Events not sent to a slow WebSocket client (task_phase dropped, or skipped until a resync snapshot)",
    registers: [this.registry],
  });
  readonly wsResyncs = new Counter({ name: "proctor_ws_resyncs_total", help: "Fresh snapshots sent to WebSocket clients that fell behind", registers: [this.registry] });
  readonly authFailures = new Counter({
    name: "proctor_auth_failures_total",
    help: "Requests refused by authentication, by status code",
    labelNames: ["status"] as const,
    registers: [this.registry],
  });

  constructor() {
    collectDefaultMetrics({ register: this.registry, prefix: "proctor_" });
  }

  /** Take the batch gauges from this queue's counts at each scrape. */
  observe(queue: RunQueue): void {
    this.queue = queue;
  }

  /** Take the uploads gauge from these caps at each scrape. */
  observeUploads(uploads: { readonly inUse: number }): void {
    this.uploads = uploads;
  }

  private queueGauge(name: string, help: string, pick: (counts: ReturnType<RunQueue["counts"]>) => number): Gauge {
    const gauge: Gauge = new Gauge({
      name,
      help,
      registers: [this.registry],
      collect: () => {
        if (this.queue) gauge.set(pick(this.queue.counts()));
      },
    });
    return gauge;
  }

  async render(): Promise<{ contentType: string; body: string }> {
    return { contentType: this.registry.contentType, body: await this.registry.metrics() };
  }
}
