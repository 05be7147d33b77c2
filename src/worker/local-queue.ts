/**
 * The worker's local queue: jobs claimed ahead of free slots (prefetch), held in claim order
 * until a slot frees. Claiming then overlaps running instead of waiting for it — the claim
 * statement's round trip is paid while handlers run, and claims come in large batches.
 *
 *   open ──close()──▶ closed
 *
 * While open it takes claimed runs and hands them out in order, skipping any whose lease has
 * gone meanwhile (they were never started: the database gives them to someone else after their
 * lease expires, and nobody ran them). close() (on stop) refuses new runs and returns every run
 * still held, for the worker to give back at once without spending their attempts.
 *
 * Held runs keep their leases: the worker's heartbeat renews them like running ones, and its
 * lease clock expires them like running ones. The queue itself has no timers and no I/O.
 */
import type { JobRun } from './job-run.js';

export type LocalQueueState = 'open' | 'closed';

export class LocalQueue {
  private runs: JobRun[] = [];
  /** Index of the next run to hand out (runs before it were taken). */
  private head = 0;
  private current: LocalQueueState = 'open';

  get state(): LocalQueueState {
    return this.current;
  }

  /** Runs held now (including any found expired but not yet skipped). */
  get size(): number {
    return this.runs.length - this.head;
  }

  /** Adds claimed runs in claim order. After close() it refuses them: returns false. */
  push(runs: readonly JobRun[]): boolean {
    if (this.current !== 'open') return false;
    for (const run of runs) this.runs.push(run);
    return true;
  }

  /**
   * Adds runs ahead of every held one (a limited queue's jobs: their limits count them from
   * their claim, so they start at the next free slot). After close() it refuses them.
   */
  pushFront(runs: readonly JobRun[]): boolean {
    if (this.current !== 'open') return false;
    this.runs.splice(this.head, 0, ...runs);
    return true;
  }

  /**
   * The next held run whose lease still holds, or null. Runs that are no longer held (their
   * lease expired or was lost while they waited) are dropped on the way.
   */
  take(): JobRun | null {
    while (this.head < this.runs.length) {
      const run = this.runs[this.head] as JobRun;
      this.head++;
      if (this.head > 1_024 && this.head * 2 > this.runs.length) this.compact();
      if (run.phase === 'held' && !run.checkLease()) return run;
    }
    return null;
  }

  /** Stops taking runs; returns the ones still held (in claim order) for the caller to give back. */
  close(): JobRun[] {
    this.current = 'closed';
    const rest = this.runs.slice(this.head).filter((run) => run.phase === 'held' && !run.leaseExpired);
    this.runs = [];
    this.head = 0;
    return rest;
  }

  private compact(): void {
    this.runs = this.runs.slice(this.head);
    this.head = 0;
  }
}
