/**
 * One claimed job inside a worker, from claim to written outcome.
 *
 *   held ──start()──▶ running ──handler settles──▶ writing ──outcome written (or dropped)──▶ finished
 *     │
 *     └─ claimed ahead (prefetched) and waiting in the local queue: its lease is renewed like a
 *        running job's; given back on stop, dropped unstarted if its lease is lost or expires
 *      │
 *      ├─ deadline / cancel / lease lost / stop: signal aborted; the handler gets `graceMs` to
 *      │  settle, then it is abandoned (a "runaway") and the run moves on to writing
 *      └─ its local lease deadline passes (no renewal came back in time — a partition, a paused
 *         process): aborted as lost at once, by the worker's lease clock (or the first look at
 *         the signal or a write), before the database could hand the job to anyone else
 *
 * The first abort reason wins: a job cancelled after its deadline passed still fails with
 * JobDeadlineExceeded.
 */
import { performance } from 'node:perf_hooks';
import { JobCancelledError, JobDeadlineExceeded, LeaseLostError, WorkerStoppingError } from '../errors.js';
import type { ProcessSpan } from '../telemetry/tracing.js';
import type { ClaimedJob } from '../types.js';
import type { ProgressWriter } from './progress.js';

export type AbortReason = 'deadline' | 'cancel' | 'lost' | 'shutdown';
export type RunPhase = 'held' | 'running' | 'writing' | 'finished';

/** What the handler did, as far as the worker knows. */
export type HandlerOutcome =
  | { kind: 'result'; value: unknown }
  | { kind: 'error'; error: unknown }
  /** Completed inside ctx.transaction: already written. */
  | { kind: 'committed'; value: unknown }
  /** Aborted and not settled within the grace period. */
  | { kind: 'abandoned' };

/** Where the job's ctx.transaction is: while open or committing, a missing row is not a loss. */
export type TransactionState = 'none' | 'open' | 'committing' | 'committed';

export interface JobRunOptions {
  timeoutMs: number | null;
  leaseMs: number;
  graceMs: number;
  /** performance.now() when the claim statement was sent: the lease runs from then at the latest. */
  claimSentAt: number;
  /** Called (synchronously, from whoever noticed first) when the local lease deadline passes. */
  onLeaseExpired: (run: JobRun) => void;
}

/**
 * How often the worker's lease clock looks at every run's local deadline: a few times a second
 * for long leases, finer for short ones (tests), never busier than every 5 ms.
 */
export function leaseClockMs(leaseMs: number): number {
  return Math.min(100, Math.max(5, Math.floor(leaseMs / 40)));
}

/**
 * How much earlier than the database the worker considers a lease gone: at least one tick of
 * the lease clock plus timer lateness, never so much that short leases are cut. The database's
 * `lease_until` is its `now()` when the statement ran + leaseMs, always later than the send
 * time + leaseMs.
 */
export function leaseMargin(leaseMs: number): number {
  return Math.min(1_000, Math.max(20, Math.floor(leaseMs / 20), leaseClockMs(leaseMs) + 10));
}

/** AbortSignal's own getter of `aborted`. */
const abortedOf = Object.getOwnPropertyDescriptor(AbortSignal.prototype, 'aborted')?.get;

/**
 * Makes reading `signal.aborted` (or calling `signal.throwIfAborted()`) look at the lease
 * deadline first. After a process resumes from a pause, Node runs I/O callbacks — and the
 * timers that fell due during the pause, in due order — before the worker's lease clock
 * may have fired: a handler that checks its signal right before a side effect must still learn
 * that its lease is gone. The signal stays a real AbortSignal (fetch and others accept it).
 */
function watchSignal(signal: AbortSignal, checkLease: () => void): void {
  if (!abortedOf) return;
  const aborted = () => {
    checkLease();
    return abortedOf.call(signal) as boolean;
  };
  Object.defineProperty(signal, 'aborted', { configurable: true, get: aborted });
  Object.defineProperty(signal, 'throwIfAborted', {
    configurable: true,
    value: () => {
      if (aborted()) throw signal.reason;
    },
  });
}

/**
 * §11 the batch a run belongs to: it decides what an abort of one of its jobs means (a lost lease
 * or a stop aborts the whole batch; a cancellation only changes that job's outcome).
 */
export interface RunBatch {
  memberAborted(run: JobRun, reason: AbortReason): void;
}

export class JobRun {
  readonly job: ClaimedJob;
  /** §11 the batch this job runs in, or null for a job of its own. */
  batch: RunBatch | null = null;
  readonly timeoutMs: number | null;
  /** performance.now() when the handler started (the claim time while held). */
  startedAt = performance.now();
  /** Made on first use: most handlers finish without anyone looking at their signal. */
  private controller: AbortController | null = null;
  phase: RunPhase = 'held';
  abortReason: AbortReason | null = null;
  /** Set once ctx.transaction() has committed the completion. */
  committed: { value: unknown } | null = null;
  transaction: TransactionState = 'none';
  /** ctx.transaction() was called (it may be called once). */
  transactionUsed = false;
  /** The handler was abandoned (it ignored its aborted signal past the grace period). */
  runaway = false;
  /** Nothing may be written for this run any more (stop() resolved, or it was abandoned on stop). */
  writesClosed = false;
  /** An outcome write (or ctx.transaction's COMMIT) in flight, for stop() to wait on. */
  inFlight: Promise<unknown> | null = null;
  /** performance.now() after which the lease may be gone: claim or last renewal sent + leaseMs − margin. */
  leaseDeadline: number;
  /**
   * The same deadline on the wall clock (Date.now()). The monotonic clock stops while the
   * machine is suspended; the database's clock does not. The lease is gone when either passes.
   */
  private leaseDeadlineWall = 0;
  /** The deadline as the database last confirmed it (a claim or a renewal; not a held lock). */
  private confirmedMono = 0;
  private confirmedWall = 0;
  /** Set while ctx.transaction holds a session: cuts it when the lease is lost. */
  private cutTransaction: (() => void) | null = null;
  private transactionEnded: { promise: Promise<void>; resolve: () => void } | null = null;
  /** `queue.cancel(id)` was heard while the job was held: it starts cancelled. */
  private cancelWhileHeld = false;
  /** True once the local lease deadline passed. */
  leaseExpired = false;
  readonly leaseMs: number;
  private readonly graceMs: number;
  private readonly onLeaseExpired: (run: JobRun) => void;
  private deadlineTimer: NodeJS.Timeout | null = null;
  private graceTimer: NodeJS.Timeout | null = null;
  /**
   * Called once if the grace period after an abort ends before the handler settled (one
   * function for every run of a worker, set when the handler starts).
   */
  private onAbandoned: ((run: JobRun) => void) | null = null;
  /** The handler settled, or was abandoned: whatever happens to it later changes nothing. */
  handlerDone = false;
  /** The job was cancelled while held: it started aborted and its handler never ran. */
  startedCancelled = false;
  /** §9 the attempt's CONSUMER span (null without tracing). */
  span: ProcessSpan | null = null;
  /** The result being written by a batched completion (JSON text, and the value for `job:done`). */
  resultJson = 'null';
  resultValue: unknown = undefined;
  private sleeper: { timer: NodeJS.Timeout; resolve: () => void } | null = null;

  constructor(job: ClaimedJob, options: JobRunOptions) {
    this.job = job;
    this.timeoutMs = options.timeoutMs;
    this.leaseMs = options.leaseMs;
    this.graceMs = options.graceMs;
    this.onLeaseExpired = options.onLeaseExpired;
    this.leaseDeadline = 0;
    this.armLease(options.claimSentAt);
  }

  /** held → running: the handler starts now, and its deadline (if any) runs from now. */
  start(): void {
    if (this.phase !== 'held') return;
    this.phase = 'running';
    this.startedAt = performance.now();
    if (this.cancelWhileHeld) this.abort('cancel');
    else if (this.timeoutMs !== null) {
      this.deadlineTimer = setTimeout(() => this.abort('deadline'), this.timeoutMs);
    }
  }

  get signal(): AbortSignal {
    return this.abortController().signal;
  }

  private abortController(): AbortController {
    if (this.controller === null) {
      this.controller = new AbortController();
      watchSignal(this.controller.signal, () => this.checkLease());
    }
    return this.controller;
  }

  get durationMs(): number {
    return Math.round(performance.now() - this.startedAt);
  }

  /**
   * The lease was (re)confirmed by a statement sent at `sentAt` (performance.now() time): it
   * lasts until then + leaseMs in database time, so locally until a margin before that.
   */
  armLease(sentAt: number): void {
    if (this.leaseExpired || this.phase === 'finished') return;
    const deadline = sentAt + this.leaseMs - leaseMargin(this.leaseMs);
    const wall = Date.now() + (deadline - performance.now());
    if (deadline > this.confirmedMono) {
      this.confirmedMono = deadline;
      this.confirmedWall = wall;
    }
    if (deadline > this.leaseDeadline) this.setDeadline(deadline, wall);
  }

  /**
   * The heartbeat found the row still ours but locked by the job's own open ctx.transaction:
   * nobody can take it while the lock holds, so the local deadline moves on — provisionally:
   * `lease_until` did not move, and if the lock goes without a commit the deadline falls back
   * to the last confirmed one ({@link revertToConfirmed}).
   */
  holdByLock(sentAt: number): void {
    if (this.leaseExpired || this.phase === 'finished') return;
    const deadline = sentAt + this.leaseMs - leaseMargin(this.leaseMs);
    if (deadline > this.leaseDeadline)
      this.setDeadline(deadline, Date.now() + (deadline - performance.now()));
  }

  /**
   * The row lock of ctx.transaction is gone without a commit (its session died): the lease is
   * what the database last confirmed — expired at once if that has passed.
   */
  revertToConfirmed(): void {
    if (this.leaseExpired || this.phase === 'finished') return;
    this.setDeadline(this.confirmedMono, this.confirmedWall);
    this.checkLease();
  }

  private setDeadline(mono: number, wall: number): void {
    this.leaseDeadline = mono;
    this.leaseDeadlineWall = wall;
  }

  /**
   * Marks the lease expired if its local deadline has passed (the worker's lease clock, a look
   * at the signal, and every write path call this). Returns true when expired.
   */
  checkLease(now = performance.now()): boolean {
    if (this.leaseExpired) return true;
    if ((now < this.leaseDeadline && Date.now() < this.leaseDeadlineWall) || this.phase === 'finished')
      return false;
    this.leaseExpired = true;
    this.onLeaseExpired(this);
    return true;
  }

  /**
   * ctx.transaction's state. While it is open the job's row is locked under the lease; a lost
   * lease then also cuts its connection (`cut`), so the lock never outlives the lease.
   */
  setTransaction(state: TransactionState, cut?: () => void): void {
    this.transaction = state;
    if (state === 'open') {
      this.cutTransaction = cut ?? null;
      let resolve!: () => void;
      const promise = new Promise<void>((r) => {
        resolve = r;
      });
      this.transactionEnded ??= { promise, resolve };
    } else if (state === 'none' || state === 'committed') {
      this.cutTransaction = null;
      this.transactionEnded?.resolve();
      this.transactionEnded = null;
      // A deadline that passed while COMMIT was in flight was put off: act on it now.
      if (state === 'none' && this.leaseExpired) this.onLeaseExpired(this);
    }
  }

  /** Resolves once ctx.transaction is neither open nor committing. */
  async transactionSettled(): Promise<void> {
    await this.transactionEnded?.promise;
  }

  /** The lease is lost: an open ctx.transaction's connection is cut (its lock must not outlive the lease). */
  cutOpenTransaction(): void {
    if (this.transaction === 'open') this.cutTransaction?.();
  }

  /** The lease can no longer be proven (the session holding its row lock died): it ends now. */
  expireNow(): void {
    this.leaseDeadline = 0;
    this.leaseDeadlineWall = 0;
    this.checkLease();
  }

  /** How long the database may still consider the lease held, in ms (≥ 0). */
  leaseRemainingMs(now = performance.now()): number {
    return Math.max(0, this.leaseDeadline + leaseMargin(this.leaseMs) - now);
  }

  /**
   * Aborts the handler's signal for `reason` (the first reason wins) and starts its grace period.
   * A cancellation of a job still held is kept for when it starts: it starts already aborted,
   * and its handler is never called.
   */
  abort(reason: AbortReason): void {
    if (this.batch !== null) {
      if (this.phase === 'running') this.batch.memberAborted(this, reason);
      return;
    }
    if (this.phase === 'held' && reason === 'cancel') this.cancelWhileHeld = true;
    if (this.phase !== 'running' || this.abortReason !== null) return;
    this.abortReason = reason;
    this.abortController().abort(this.reasonError(reason));
    if (this.deadlineTimer) clearTimeout(this.deadlineTimer);
    this.deadlineTimer = null;
    this.graceTimer = setTimeout(() => {
      this.runaway = true;
      this.onAbandoned?.(this);
    }, this.graceMs);
  }

  /** The lease of this claim: a run is its own item in a batch of completions. */
  get lease(): ClaimedJob {
    return this.job;
  }

  /**
   * The handler was called: `onAbandoned` is told if the grace period after an abort ends
   * before it settles (its promise is watched by the executor; no promise of the run's own).
   */
  handlerStarted(onAbandoned: (run: JobRun) => void): void {
    this.onAbandoned = onAbandoned;
  }

  /**
   * Marks the handler done — it settled, or was abandoned — and says whether this is the first
   * time (what comes second changes nothing).
   */
  settleHandler(): boolean {
    if (this.handlerDone) return false;
    this.handlerDone = true;
    this.onAbandoned = null;
    return true;
  }

  /** The error stored for a deadline, noting a handler that ignored its signal. */
  deadlineError(abandoned: boolean): JobDeadlineExceeded {
    const detail = abandoned
      ? `; the handler ignored its aborted signal for ${this.graceMs} ms and was abandoned (runaway)`
      : '';
    return new JobDeadlineExceeded(this.timeoutMs ?? 0, detail);
  }

  /** Clears the deadline and grace timers (the handler settled or was given up on). */
  clearTimers(): void {
    if (this.deadlineTimer) clearTimeout(this.deadlineTimer);
    if (this.graceTimer) clearTimeout(this.graceTimer);
    this.deadlineTimer = null;
    this.graceTimer = null;
  }

  /**
   * §12 the job was suspended by ctx.sleep / ctx.waitForEvent (the database already holds it
   * pending or waiting, lease cleared; or cancelled, when a cancel was requested meanwhile):
   * nothing is written for this run any more.
   */
  suspended: { kind: 'sleep' | 'event' | 'cancelled'; until: Date | null; event: string | null } | null =
    null;

  /** §9 ctx.progress's writer, made on the handler's first report. */
  progressWriter: ProgressWriter | null = null;

  /** The run is over: no timer of it is left. */
  finish(): void {
    this.phase = 'finished';
    this.clearTimers();
    this.progressWriter?.close();
  }

  private reasonError(reason: AbortReason): Error {
    switch (reason) {
      case 'deadline':
        return this.deadlineError(false);
      case 'cancel':
        return new JobCancelledError(this.job.id);
      case 'lost':
        return new LeaseLostError(this.job.id);
      case 'shutdown':
        return new WorkerStoppingError();
    }
  }

  get graceMsSetting(): number {
    return this.graceMs;
  }

  /** Waits between write retries; cut short by {@link closeWrites}. */
  sleep(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.sleeper = null;
        resolve();
      }, ms);
      this.sleeper = { timer, resolve };
    });
  }

  /** Nothing more is written for this run (stop() gives up; the reaper recovers the job). */
  closeWrites(): void {
    this.writesClosed = true;
    this.progressWriter?.close();
    if (this.sleeper) {
      clearTimeout(this.sleeper.timer);
      this.sleeper.resolve();
      this.sleeper = null;
    }
  }
}
