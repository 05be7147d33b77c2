/**
 * What a worker does when it may no longer own a job (SPEC §1.3, §3): a renewal that came back
 * without the lease, or a local lease deadline that passed first (a partition, a pause). A
 * running handler is aborted at once (the database may hand the job to another worker any
 * moment); a held job is never started here — given back when only the local deadline passed,
 * reported lost when the lease is gone.
 */
import type { ClaimedJob } from '../types.js';
import type { Dispatcher } from './dispatcher.js';
import type { JobRun } from './job-run.js';

export interface LeaseLossDeps {
  dispatcher: Dispatcher;
  /** True while the worker runs (a stopping worker gives nothing back here: stop() does). */
  running(): boolean;
  /** Counts and emits `lease:lost`, logging it for a running job. */
  lost(job: ClaimedJob, wasRunning: boolean): void;
  /** Releases unstarted jobs (attempt not spent); per job, whether it was released; null if it failed. */
  release(jobs: ClaimedJob[], doing: string): Promise<boolean[] | null>;
}

export class LeaseLoss {
  constructor(private readonly deps: LeaseLossDeps) {}

  /** The renewal came back without this lease: someone else may own the job now. */
  lost(run: JobRun): void {
    // §12 suspended by ctx.sleep / waitForEvent: the lease was given up on purpose
    if (run.suspended !== null) return;
    if (run.phase === 'held') {
      this.dropHeld(run, false);
      return;
    }
    if (run.phase !== 'running' || run.abortReason === 'lost') return;
    // §11 a batch's job always goes through abort(): the batch aborts as a whole
    if (run.abortReason === null || run.batch !== null) run.abort('lost');
    else run.abortReason = 'lost'; // already aborted (deadline, cancel, stop): write nothing now
    this.deps.lost(run.job, true);
  }

  /**
   * The run's local lease deadline passed before a renewal confirmed it (a partition, a pause):
   * the database may hand the job to another worker any moment, so the handler is aborted now.
   */
  expired(run: JobRun): void {
    // A COMMIT in flight decides by itself whether the completion happened under the lease; if
    // it fails, the run calls this again.
    if (run.transaction === 'committing' || run.transaction === 'committed') return;
    if (run.phase === 'held') {
      this.dropHeld(run, true);
      return;
    }
    run.cutOpenTransaction();
    if (run.phase !== 'running' || run.runaway) return;
    this.lost(run);
  }

  /**
   * A held job's lease is gone, or may be, before it started: it is never started here. When
   * only the local deadline passed (a blocked event loop, a pause), the database may still hold
   * the lease: the job is given back at once, attempt not spent (its handler never ran, and a
   * lease that is gone makes the compare-and-set change nothing); else it is reported lost.
   */
  private dropHeld(run: JobRun, giveBack: boolean): void {
    this.deps.dispatcher.drop(run);
    if (!giveBack || !this.deps.running()) {
      this.deps.lost(run.job, false);
      return;
    }
    const doing = `giving back job ${run.job.id} whose lease ran out before it started`;
    void this.deps.release([run.job], doing).then((released) => {
      if (!released?.[0]) this.deps.lost(run.job, false);
    });
  }
}
