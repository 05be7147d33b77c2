/** The events a {@link Worker} emits, with their payloads. */
import type { ClaimedJob } from '../types.js';

export interface WorkerEvents {
  /** A claimed job's handler is about to run. */
  'job:start': { job: ClaimedJob };
  /** The job completed; `result` is what the handler returned. */
  'job:done': { job: ClaimedJob; result: unknown; durationMs: number };
  /** The attempt failed and the job will run again after `retryInMs`. */
  'job:retry': { job: ClaimedJob; error: unknown; retryInMs: number; durationMs: number };
  /** The attempt failed and no attempts are left: the job is dead (dead-letter). */
  'job:dead': { job: ClaimedJob; error: unknown; durationMs: number };
  /**
   * The job ended cancelled. `reason` 'cancel': `queue.cancel(id)` while it ran (its handler was
   * aborted). 'superseded' (§8 `dedupe: { scope: 'pending' }`): its attempt failed (`error`) and
   * the key already had a queued job, which takes the retry over.
   */
  'job:cancelled': { job: ClaimedJob; durationMs: number; reason: 'cancel' | 'superseded'; error?: unknown };
  /**
   * Given back without spending the attempt: claimed while the worker was stopping (never
   * started), or aborted by stop() past its timeout and settled within the grace period.
   */
  /**
   * §12 ctx.sleep / ctx.waitForEvent suspended the job: it is `pending` until `until` (a sleep)
   * or `waiting` for `event` (until it is emitted, or its timeout `until`); attempt not spent.
   */
  'job:suspended': {
    job: ClaimedJob;
    kind: 'sleep' | 'event';
    until: Date | null;
    event: string | null;
    durationMs: number;
  };
  'job:released': { job: ClaimedJob };
  /**
   * The handler ignored its aborted signal (deadline, cancel, lost lease, stop) for the whole
   * grace period; the handler itself may still be running, so its job is never handed to another
   * worker while its lease could still be this one's: after a deadline the failure is written
   * with the retry held back until then; after a stop nothing is written and the job comes back
   * when its lease expires.
   */
  'job:runaway': { job: ClaimedJob; reason: 'deadline' | 'cancel' | 'lost' | 'stop'; graceMs: number };
  /** The worker no longer owns the job (its lease expired and it was reclaimed). The handler's
   * signal was aborted; whatever it returns is discarded. */
  'lease:lost': { job: ClaimedJob };
  /** Expired leases of (possibly other, crashed) workers were reclaimed by this worker's reaper. */
  reaped: { ids: string[] };
  /** Finished jobs past the queue's `retention.keepFinishedMs` were deleted by this worker's pruner. */
  pruned: { deleted: number };
  /** This worker's scheduler enqueued the job of a schedule's tick (SPEC §8). */
  'schedule:fired': { name: string; tick: Date; jobId: string };
  /**
   * This worker's scheduler skipped a due tick: 'overlap' (the previous tick's job is still
   * pending or running, and the schedule has `overlap: false`) or 'missed' (older than its
   * `catchUp` allows); `tick` is the latest tick skipped.
   */
  'schedule:skipped': { name: string; tick: Date; reason: 'overlap' | 'missed' };
  /** The LISTEN connection is (again) in place; `reconnected` is false the first time. */
  'listen:connected': { reconnected: boolean };
  /**
   * Something the operator should know, e.g. `LISTEN_UNREACHABLE`: the LISTEN connection did not
   * receive a notification the worker sent itself (a transaction-pooling proxy such as
   * PgBouncer?) — use `listen: false`.
   */
  warning: { code: string; message: string };
  /**
   * A background step failed (claim, lease renewal, reaper, writing an outcome, the LISTEN
   * connection). The worker keeps going and retries; emitted only when someone listens, so an
   * unheard error never crashes the process. Always logged through `logger`.
   */
  error: { error: Error; during: string };
}

export type WorkerEventName = keyof WorkerEvents;

/** Running totals since start(). */
export interface WorkerStats {
  running: number;
  claimed: number;
  done: number;
  retried: number;
  dead: number;
  cancelled: number;
  released: number;
  leaseLost: number;
  /** Handlers that ignored their aborted signal past the grace period (see `job:runaway`). */
  runaway: number;
}

/** The events that move a counter of {@link WorkerStats}, and which. */
export const COUNTED = {
  'job:done': 'done',
  'job:retry': 'retried',
  'job:dead': 'dead',
  'job:cancelled': 'cancelled',
  'job:released': 'released',
  'lease:lost': 'leaseLost',
  'job:runaway': 'runaway',
} as const;
