/**
 * The heartbeat (SPEC §3): one UPDATE renews the leases of all of this worker's running jobs,
 * about every third of the lease, so two missed beats still leave time. Per lease it learns:
 *   - renewed: the run's local lease deadline moves to (this beat's send time + leaseMs − margin);
 *   - busy: the row is locked by another transaction, so it was skipped rather than waited for —
 *     still ours, tried again next beat; when the lock is the job's own open ctx.transaction, no
 *     one else can take the job while it is held, so the local deadline moves on (see below);
 *   - lost: its handler's signal is aborted and its outcome is never written.
 * The same statement reports cancellation requests, so a lost NOTIFY cannot hide a cancel.
 *
 * Between beats the lease clock checks every run's local deadline (held or running) a few times
 * a second — more often for short leases, and always more often than the lease margin
 * (`leaseClockMs`, `leaseMargin`): one timer for all runs, not one per run. The clock is also what
 * makes a process that was paused (SIGSTOP, a long GC, a suspended machine) abort its handlers
 * first thing after it resumes: Node runs expired timers in due order, and the clock's next tick
 * is due before almost any timer a handler set; a handler that reads its signal first learns it
 * from the signal itself.
 */
import { performance } from 'node:perf_hooks';
import type { LeaseRenewal } from '../engine/engine.js';
import type { JobRun } from './job-run.js';

export interface LeaseKeeperDeps {
  intervalMs: number;
  runs(): Iterable<JobRun>;
  /** Renews these runs' leases in one statement; one answer per run, in order. */
  renew(runs: JobRun[]): Promise<LeaseRenewal[]>;
  onLost(run: JobRun): void;
  onCancelRequested(run: JobRun): void;
  onError(error: unknown, during: string): void;
  /** How often the lease clock looks at local deadlines (default 100 ms). */
  clockMs?: number;
}

export class LeaseKeeper {
  private readonly deps: LeaseKeeperDeps;
  private timer: NodeJS.Timeout | null = null;
  private clock: NodeJS.Timeout | null = null;
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
    this.clock ??= setInterval(() => this.checkDeadlines(), this.deps.clockMs ?? 100);
  }

  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    if (this.clock) clearInterval(this.clock);
    this.timer = this.clock = null;
    await this.beat;
  }

  /** Aborts, synchronously, every run whose local lease deadline has passed. */
  checkDeadlines(now = performance.now()): void {
    for (const run of this.deps.runs()) run.checkLease(now);
  }

  /** One heartbeat: renew every lease this worker holds, then act on what came back. */
  async tick(): Promise<void> {
    this.checkDeadlines();
    // A lost lease is not renewed again; a runaway abandoned on stop is let expire.
    const runs = [...this.deps.runs()].filter(
      (run) =>
        run.phase !== 'finished' && !run.leaseExpired && run.abortReason !== 'lost' && !run.writesClosed,
    );
    if (runs.length === 0) return;
    const sentAt = performance.now();
    let answers: LeaseRenewal[];
    try {
      answers = await this.deps.renew(runs);
    } catch (error) {
      // The database is unreachable: handlers keep running and the next beat tries again; the
      // lease clock aborts each run when its lease may be gone.
      this.deps.onError(error, 'renewing leases');
      return;
    }
    runs.forEach((run, i) => {
      const answer = answers[i];
      if (answer?.state === 'renewed') {
        run.armLease(sentAt);
        if (answer.cancelRequested) this.deps.onCancelRequested(run);
      } else if (answer?.state === 'busy' && run.transaction === 'open') {
        // Still ours, and locked by the job's own ctx.transaction (FOR NO KEY UPDATE under the
        // lease): nobody can reap or complete it while that lock is held, so the job stays ours
        // though lease_until did not move. The transaction re-syncs the lease when it rolls
        // back; a session that dies while it is open falls back to the last confirmed deadline.
        run.holdByLock(sentAt);
      } else if (
        answer?.state === 'lost' &&
        (run.phase === 'held' || run.phase === 'running') &&
        run.transaction === 'none'
      ) {
        // A held run is dropped unstarted. Writing-phase runs settle ownership through their own
        // compare-and-set; a run whose ctx.transaction is open or committing holds its row (or
        // has just completed it).
        this.deps.onLost(run);
      }
    });
  }
}
