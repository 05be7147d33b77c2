/**
 * Prometheus metrics (SPEC §5) through prom-client, on a registry of our own (the host's
 * default registry is left alone). Queue gauges are read from the database at scrape time,
 * through the same cheap statements as ops() (SPEC §7), cached for a second so concurrent
 * scrapes cost one read. A worker attached with {@link Metrics.observe} adds outcome counters
 * and a duration histogram.
 */
import { Counter, Gauge, Histogram, Registry } from 'prom-client';
import type { Queue } from '../queue.js';
import type { OpsSnapshot } from '../types.js';
import type { Worker } from '../worker/worker.js';
import type { AdminReads } from './read-route.js';

export class Metrics {
  readonly registry = new Registry();
  private readonly queue: AdminReads;
  private cache: {
    at: number;
    value: Promise<[OpsSnapshot, Awaited<ReturnType<Queue['liveByQueue']>>]>;
  } | null = null;
  private readonly outcomes: Counter<'task' | 'outcome'>;
  private readonly durations: Histogram<'task' | 'outcome'>;
  private readonly runaways: Counter<'task'>;

  constructor(queue: AdminReads) {
    this.queue = queue;
    const registers = [this.registry];
    const snapshot = () => this.snapshot();
    new Gauge({
      name: 'skiplock_jobs',
      help: 'Jobs by status; waiting, pending and running also by queue (finished statuses may be estimates on large tables)',
      labelNames: ['status', 'queue'],
      registers,
      async collect() {
        const [ops, live] = await snapshot();
        this.reset();
        for (const row of live) this.set({ status: row.status, queue: row.queue }, row.count);
        for (const status of ['done', 'dead', 'cancelled'] as const)
          this.set({ status, queue: '' }, ops[status]);
      },
    });
    const gauge = (name: string, help: string, pick: (ops: OpsSnapshot) => number) =>
      new Gauge({
        name,
        help,
        registers,
        async collect() {
          this.set(pick((await snapshot())[0]));
        },
      });
    gauge('skiplock_oldest_pending_seconds', 'Age of the oldest due pending job', (o) => o.oldestPendingSec);
    gauge('skiplock_dead_last_hour', 'Jobs that went dead in the last hour', (o) => o.dead1h);
    gauge(
      'skiplock_stuck_running',
      'Running jobs with an expired lease or running past the stuck threshold',
      (o) => o.stuckRunning,
    );
    gauge(
      'skiplock_deadline_exceeded_last_hour',
      'Jobs that failed with JobDeadlineExceeded in the last hour',
      (o) => o.deadline1h,
    );
    this.outcomes = new Counter({
      name: 'skiplock_worker_jobs_total',
      help: 'Job outcomes of the workers in this process',
      labelNames: ['task', 'outcome'],
      registers,
    });
    this.durations = new Histogram({
      name: 'skiplock_worker_job_duration_seconds',
      help: 'Handler run time of the workers in this process, by outcome',
      labelNames: ['task', 'outcome'],
      buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60],
      registers,
    });
    this.runaways = new Counter({
      name: 'skiplock_worker_runaway_handlers_total',
      help: 'Handlers that ignored their aborted signal past the grace period',
      labelNames: ['task'],
      registers,
    });
  }

  /** Counts a worker's outcomes (done, retry, dead, cancelled) and their durations. */
  observe(worker: Worker): void {
    const record = (task: string, outcome: string, durationMs: number) => {
      this.outcomes.inc({ task, outcome });
      this.durations.observe({ task, outcome }, durationMs / 1000);
    };
    worker.on('job:done', ({ job, durationMs }) => record(job.task, 'done', durationMs));
    worker.on('job:retry', ({ job, durationMs }) => record(job.task, 'retry', durationMs));
    worker.on('job:dead', ({ job, durationMs }) => record(job.task, 'dead', durationMs));
    worker.on('job:cancelled', ({ job, durationMs }) => record(job.task, 'cancelled', durationMs));
    worker.on('job:runaway', ({ job }) => this.runaways.inc({ task: job.task }));
  }

  /** The Prometheus text exposition. */
  async text(): Promise<string> {
    return this.registry.metrics();
  }

  get contentType(): string {
    return this.registry.contentType;
  }

  private snapshot() {
    const now = Date.now();
    if (!this.cache || now - this.cache.at > 1_000) {
      const value = Promise.all([this.queue.ops(), this.queue.liveByQueue()]);
      value.catch(() => {
        this.cache = null; // do not cache a failure
      });
      this.cache = { at: now, value };
    }
    return this.cache.value;
  }
}
