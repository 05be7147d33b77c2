/**
 * §11 one batch inside a worker: the jobs of one claim of a batch task, run by one call of its
 * handler. Each job keeps its own {@link JobRun} — its lease renewed by the worker's one heartbeat
 * statement with every other lease, its local lease clock, its own outcome — and the batch owns
 * what is shared: the handler's signal, its deadline and its grace period.
 *
 *   running ──handler settles──▶ writing (one statement for every job) ──▶ finished
 *      │
 *      ├─ deadline (timeoutMs), a lost lease of any job, stop: the signal is aborted (the first
 *      │  reason wins) and the handler gets `graceMs` to settle, then it is abandoned (runaway)
 *      └─ a job cancelled meanwhile: nothing is aborted; that job ends `cancelled` whatever the
 *         handler returns for it (decided in the outcome statement, on the row as locked)
 */
import { performance } from 'node:perf_hooks';
import { JobDeadlineExceeded, LeaseLostError, WorkerStoppingError } from '../errors.js';
import type { ProcessSpan } from '../telemetry/tracing.js';
import type { AbortReason, JobRun, RunBatch } from './job-run.js';

/** Why a batch's signal was aborted (a cancellation never aborts a batch). */
export type BatchAbortReason = 'deadline' | 'lost' | 'shutdown';

export class BatchRun implements RunBatch {
  readonly members: readonly JobRun[];
  readonly task: string;
  /** Bound of one call of the handler (the task's timeoutMs, else the smallest of its jobs'). */
  readonly timeoutMs: number | null;
  readonly graceMs: number;
  readonly startedAt = performance.now();
  abortReason: BatchAbortReason | null = null;
  /** The handler settled, or was abandoned: what it does later changes nothing. */
  handlerDone = false;
  /** Abandoned: the handler ignored its aborted signal for the whole grace period. */
  runaway = false;
  /** Every job's run was finished (the dispatcher told once). */
  finished = false;
  /** §9 the batch's one CONSUMER span, linked to each job's producer span (null: no tracing). */
  span: ProcessSpan | null = null;
  private readonly controller = new AbortController();
  private deadlineTimer: NodeJS.Timeout | null = null;
  private graceTimer: NodeJS.Timeout | null = null;
  private onAbandoned: (() => void) | null = null;

  constructor(task: string, members: readonly JobRun[], timeoutMs: number | null, graceMs: number) {
    this.task = task;
    this.members = members;
    this.timeoutMs = timeoutMs;
    this.graceMs = graceMs;
    for (const member of members) member.batch = this;
  }

  /** Every job starts now (held → running); the deadline runs from now. */
  start(): void {
    for (const member of this.members) member.start();
    if (this.timeoutMs !== null)
      this.deadlineTimer = setTimeout(() => this.abort('deadline'), this.timeoutMs);
  }

  /** `onAbandoned` is called if the grace period after an abort ends before the handler settles. */
  watchAbandon(onAbandoned: () => void): void {
    if (this.runaway) onAbandoned();
    else this.onAbandoned = onAbandoned;
  }

  get signal(): AbortSignal {
    return this.controller.signal;
  }

  get durationMs(): number {
    return Math.round(performance.now() - this.startedAt);
  }

  /**
   * One job's abort: a lost lease aborts the batch (the handler may be acting on a job another
   * worker may now run); a stop aborts it; a cancellation only marks that job.
   */
  memberAborted(run: JobRun, reason: AbortReason): void {
    if (reason === 'lost') {
      run.abortReason = 'lost';
      this.abort('lost');
      return;
    }
    run.abortReason ??= reason;
    if (reason === 'shutdown' || reason === 'deadline') this.abort(reason);
  }

  /** Aborts the handler's signal for `reason` (the first reason wins) and starts the grace period. */
  abort(reason: BatchAbortReason): void {
    if (this.handlerDone || this.abortReason !== null) return;
    this.abortReason = reason;
    this.controller.abort(this.reasonError(reason));
    if (this.deadlineTimer) clearTimeout(this.deadlineTimer);
    this.deadlineTimer = null;
    this.graceTimer = setTimeout(() => {
      this.runaway = true;
      this.onAbandoned?.();
    }, this.graceMs);
  }

  /** Marks the handler done (settled or abandoned); true the first time only. */
  settle(): boolean {
    if (this.handlerDone) return false;
    this.handlerDone = true;
    this.onAbandoned = null;
    if (this.deadlineTimer) clearTimeout(this.deadlineTimer);
    if (this.graceTimer) clearTimeout(this.graceTimer);
    this.deadlineTimer = this.graceTimer = null;
    return true;
  }

  /** The error stored for a deadline, noting a handler that ignored its signal. */
  deadlineError(abandoned: boolean): JobDeadlineExceeded {
    const detail = abandoned
      ? `; the batch handler ignored its aborted signal for ${this.graceMs} ms and was abandoned (runaway)`
      : ` (the batch of ${this.members.length} job(s) it ran in)`;
    return new JobDeadlineExceeded(this.timeoutMs ?? 0, detail);
  }

  /** The jobs whose lease this worker still holds (a lost one is never written). */
  owned(): JobRun[] {
    return this.members.filter((member) => member.abortReason !== 'lost');
  }

  /** Nothing more may be written for the batch (stop() gave up on it). */
  get writesClosed(): boolean {
    return this.members.some((member) => member.writesClosed);
  }

  /** performance.now() after which the earliest of the batch's leases may be gone. */
  get leaseDeadline(): number {
    let earliest = Number.POSITIVE_INFINITY;
    for (const member of this.owned()) earliest = Math.min(earliest, member.leaseDeadline);
    return earliest;
  }

  private reasonError(reason: BatchAbortReason): Error {
    switch (reason) {
      case 'deadline':
        return this.deadlineError(false);
      case 'lost': {
        const lost = this.members.find((member) => member.abortReason === 'lost');
        return new LeaseLostError(lost?.job.id ?? this.members[0]?.job.id ?? '?');
      }
      case 'shutdown':
        return new WorkerStoppingError();
    }
  }
}
