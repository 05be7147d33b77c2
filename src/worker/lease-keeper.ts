/**
 * The heartbeat (SPEC §3): one UPDATE renews the leases of all of this worker's running jobs,
 * about every third of the lease, so two missed beats still leave time. A job whose lease did
 * not come back is lost: its handler's signal is aborted and its outcome is never written. The
 * same statement reports cancellation requests, so a lost NOTIFY cannot hide a cancel.
 */
import { performance } from 'node:perf_hooks';
import type { JobRun } from './job-run.js';

export interface LeaseKeeperDeps {
  intervalMs: number;
  leaseMs: number;
  runs(): Iterable<JobRun>;
  renew(runs: JobRun[]): Promise<Map<string, { cancelRequested: boolean }>>;
  onLost(run: JobRun): void;
  onCancelRequested(run: JobRun): void;
  onError(error: unknown, during: string): void;
}

export class LeaseKeeper {
  private readonly deps: LeaseKeeperDeps;
  private timer: NodeJS.Timeout | null = null;
  private beat: Promise<void> | null = null;

  constructor(deps: LeaseKeeperDeps) {
    this.deps = deps;
  }

  start(): void {
    this.timer ??= setInterval(() => {
      if (!this.beat) {
        this.beat = this.tick().finally(() => {
          this.beat = null;
        });
      }
    }, this.deps.intervalMs);
  }

  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    await this.beat;
  }

  /** One heartbeat: renew every lease this worker holds, then act on what came back. */
  async tick(): Promise<void> {
    // A lost lease is not renewed again (and not reported twice) while its handler winds down.
    const runs = [...this.deps.runs()].filter(
      (run) => run.phase !== 'finished' && !run.released && run.abortReason !== 'lost',
    );
    if (runs.length === 0) return;
    const sentAt = performance.now();
    let owned: Map<string, { cancelRequested: boolean }>;
    try {
      owned = await this.deps.renew(runs);
    } catch (error) {
      // The database is unreachable: handlers keep running and the next beat tries again —
      // but a lease that has run out by now may already be someone else's: abort its handler.
      this.deps.onError(error, 'renewing leases');
      const now = performance.now();
      for (const run of runs) if (run.phase === 'running' && run.leaseExpiresAt <= now) this.deps.onLost(run);
      return;
    }
    for (const run of runs) {
      const lease = owned.get(run.key);
      if (lease) {
        run.leaseExpiresAt = sentAt + this.deps.leaseMs;
        if (lease.cancelRequested) this.deps.onCancelRequested(run);
      } else if (run.phase === 'running') {
        // Writing-phase runs settle ownership through their own compare-and-set.
        this.deps.onLost(run);
      }
    }
  }
}
