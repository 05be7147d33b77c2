/**
 * One claimed job inside a worker, from claim to freed slot.
 *
 *   running ──handler settles──▶ writing ──outcome written (or dropped)──▶ finished
 *      │
 *      ├─ deadline / cancel / lease lost: signal aborted; the handler gets `graceMs` to settle,
 *      │  then it is abandoned (a "runaway") and the run moves on to writing
 *      └─ stop() past its timeout: signal aborted, abandoned at once, released (nothing written)
 *
 * The first abort reason wins: a job cancelled after its deadline passed still fails with
 * JobDeadlineExceeded.
 */
import { performance } from 'node:perf_hooks';
import { JobCancelledError, JobDeadlineExceeded, LeaseLostError, WorkerStoppingError } from '../errors.js';
import type { ClaimedJob } from '../types.js';

export type AbortReason = 'deadline' | 'cancel' | 'lost' | 'shutdown';
export type RunPhase = 'running' | 'writing' | 'finished';

/** What the handler did, as far as the worker knows. */
export type HandlerOutcome =
  | { kind: 'result'; value: unknown }
  | { kind: 'error'; error: unknown }
  /** Completed inside ctx.transaction: already written. */
  | { kind: 'committed'; value: unknown }
  /** Aborted and not settled within the grace period (or interrupted by stop). */
  | { kind: 'abandoned' };

export class JobRun {
  readonly job: ClaimedJob;
  /** `id/attempt`: one claim of one job. */
  readonly key: string;
  readonly timeoutMs: number | null;
  readonly startedAt = performance.now();
  readonly controller = new AbortController();
  phase: RunPhase = 'running';
  abortReason: AbortReason | null = null;
  /** Set once ctx.transaction() has committed the completion. */
  committed: { value: unknown } | null = null;
  /** ctx.transaction() was called (it may be called once). */
  transactionUsed = false;
  /** stop() released this job: nothing is written for it. */
  released = false;
  /** stop() gave up on writing the outcome. */
  writesCancelled = false;
  /** Local (monotonic) estimate of when the lease runs out: claim or last renewal + leaseMs. */
  leaseExpiresAt: number;
  private readonly graceMs: number;
  private deadlineTimer: NodeJS.Timeout | null = null;
  private graceTimer: NodeJS.Timeout | null = null;
  private abandon!: () => void;
  private sleeper: { timer: NodeJS.Timeout; resolve: () => void } | null = null;
  /** Resolves when the handler is given up on (after the grace period, or at once on shutdown). */
  readonly abandoned: Promise<HandlerOutcome>;

  constructor(
    job: ClaimedJob,
    timeoutMs: number | null,
    leaseMs: number,
    graceMs: number,
    claimedAt: number,
  ) {
    this.job = job;
    this.key = `${job.id}/${job.attempt}`;
    this.timeoutMs = timeoutMs;
    this.graceMs = graceMs;
    this.leaseExpiresAt = claimedAt + leaseMs;
    this.abandoned = new Promise((resolve) => {
      this.abandon = () => resolve({ kind: 'abandoned' });
    });
    if (timeoutMs !== null) {
      this.deadlineTimer = setTimeout(() => this.abort('deadline'), timeoutMs);
    }
  }

  get signal(): AbortSignal {
    return this.controller.signal;
  }

  get durationMs(): number {
    return Math.round(performance.now() - this.startedAt);
  }

  /** Aborts the handler's signal for `reason` (the first reason wins). */
  abort(reason: AbortReason): void {
    if (this.phase !== 'running') return;
    if (reason === 'shutdown') {
      this.released = true;
      this.abortReason ??= reason;
      this.controller.abort(new WorkerStoppingError());
      this.clearTimers();
      this.abandon();
      return;
    }
    if (this.abortReason !== null) return;
    this.abortReason = reason;
    this.controller.abort(this.reasonError(reason));
    if (this.deadlineTimer) clearTimeout(this.deadlineTimer);
    this.graceTimer = setTimeout(() => this.abandon(), this.graceMs);
  }

  /** The error stored for a deadline, noting a handler that ignored its signal. */
  deadlineError(abandoned: boolean): JobDeadlineExceeded {
    const detail = abandoned
      ? `; the handler ignored its aborted signal for ${this.graceMs} ms and was abandoned (runaway)`
      : '';
    return new JobDeadlineExceeded(this.timeoutMs ?? 0, detail);
  }

  clearTimers(): void {
    if (this.deadlineTimer) clearTimeout(this.deadlineTimer);
    if (this.graceTimer) clearTimeout(this.graceTimer);
    this.deadlineTimer = null;
    this.graceTimer = null;
  }

  private reasonError(reason: Exclude<AbortReason, 'shutdown'>): Error {
    switch (reason) {
      case 'deadline':
        return this.deadlineError(false);
      case 'cancel':
        return new JobCancelledError(this.job.id);
      case 'lost':
        return new LeaseLostError(this.job.id);
    }
  }

  get graceMsSetting(): number {
    return this.graceMs;
  }

  /** Waits between write retries; cut short by {@link cancelWrites}. */
  sleep(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.sleeper = null;
        resolve();
      }, ms);
      this.sleeper = { timer, resolve };
    });
  }

  /** stop() gives up on writing this run's outcome (the reaper will recover the job). */
  cancelWrites(): void {
    this.writesCancelled = true;
    if (this.sleeper) {
      clearTimeout(this.sleeper.timer);
      this.sleeper.resolve();
      this.sleeper = null;
    }
  }
}
