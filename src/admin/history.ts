/**
 * Queue depth and throughput over the last hour, for the dashboard's charts. Depth (waiting,
 * pending, running) is sampled in memory every `intervalMs`; throughput comes from the database (finished
 * jobs per minute, through jobs_finished_idx), so it covers the hour before the server started.
 */
import type { AdminReads } from './read-route.js';

export interface DepthSample {
  t: number;
  /** Jobs whose dependencies are not all done (SPEC §10): not backlog, but work to come. */
  waiting: number;
  pending: number;
  running: number;
}

export interface ThroughputBucket {
  t: number;
  done: number;
  dead: number;
  cancelled: number;
}

const HOUR = 3_600_000;

export class History {
  private readonly queue: AdminReads;
  private readonly intervalMs: number;
  private readonly depth: DepthSample[] = [];
  private timer: NodeJS.Timeout | null = null;
  private throughputCache: { at: number; value: Promise<ThroughputBucket[]> } | null = null;

  constructor(queue: AdminReads, intervalMs = 10_000) {
    this.queue = queue;
    this.intervalMs = intervalMs;
  }

  start(onError: (error: unknown) => void): void {
    const sample = () => this.sample().catch(onError);
    void sample();
    this.timer = setInterval(sample, this.intervalMs);
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
  }

  async snapshot(): Promise<{ depth: DepthSample[]; throughput: ThroughputBucket[] }> {
    return { depth: [...this.depth], throughput: await this.throughput() };
  }

  /** Takes one depth sample now. */
  async sample(): Promise<void> {
    const counts = await this.queue.counts();
    const t = Date.now();
    this.depth.push({ t, waiting: counts.waiting, pending: counts.pending, running: counts.running });
    while (this.depth.length > 0 && (this.depth[0]?.t ?? t) < t - HOUR) this.depth.shift();
  }

  private throughput(): Promise<ThroughputBucket[]> {
    const now = Date.now();
    if (!this.throughputCache || now - this.throughputCache.at > Math.min(this.intervalMs, 10_000)) {
      const value = this.queue.throughput({ bucketMs: 60_000, windowMs: HOUR }).then((rows) => {
        const buckets = new Map<number, ThroughputBucket>();
        for (const row of rows) {
          const bucket = buckets.get(row.bucket) ?? { t: row.bucket, done: 0, dead: 0, cancelled: 0 };
          bucket[row.status] += row.count;
          buckets.set(row.bucket, bucket);
        }
        return [...buckets.values()].sort((a, b) => a.t - b.t);
      });
      value.catch(() => {
        this.throughputCache = null;
      });
      this.throughputCache = { at: now, value };
    }
    return this.throughputCache.value;
  }
}
