/**
 * When to claim (SPEC §1.9): on a NOTIFY hint, when a slot frees up while work may be waiting,
 * at the earliest future run_after (a timer, not a poll), and on a slow fallback poll that only
 * guards against lost notifications. Claim passes are single-flight: a burst of hints during a
 * pass causes one more pass, not one per hint.
 */
import { performance } from 'node:perf_hooks';
import type { ClaimedJob } from '../types.js';

/** The fallback poll waits pollIntervalMs ± this fraction, drawn anew each time. */
const POLL_JITTER = 0.25;
/** Longest timer Node accepts (~24.8 days). */
const MAX_TIMER_MS = 2 ** 31 - 1;

/**
 * What a claim returns: its jobs, or its jobs with when to look again (`waitMs`: a full rate
 * window, a claim lock held elsewhere) and whether it left work it knows of for later
 * (`leftWork`: a limited queue it had no slot for — then a freed slot claims again even though
 * the claim came back short).
 */
export type ClaimResult = ClaimedJob[] | { jobs: ClaimedJob[]; waitMs: number | null; leftWork: boolean };

export interface ClaimLoopDeps {
  /** Claims up to `limit` jobs. */
  claim(limit: number): Promise<ClaimResult>;
  /**
   * Milliseconds until the next pending job is due (database time), or null; a job that became
   * due within the last `sinceMs` gives 0.
   */
  nextDueInMs(sinceMs: number): Promise<number | null>;
  freeSlots(): number;
  /**
   * Optional: awaited before the free slots are measured and the claim is sent (a batch task's
   * `maxWaitMs`). The leases of what the claim brings run from after it, not from before.
   */
  beforeClaim?(): Promise<void>;
  /**
   * Optional: holds `n` slots while a claim for them is in flight (called synchronously when the
   * claim is sent), so that the other claim loops of the worker never count them as free too.
   */
  reserve?(n: number): void;
  /** Gives back the `n` slots held by reserve(), synchronously just before accept() (or on failure). */
  unreserve?(n: number): void;
  /**
   * Takes the jobs of one claim (must not throw). `sentAt` (performance.now()) is when the claim
   * was sent: their leases run from then at the latest.
   */
  accept(jobs: ClaimedJob[], sentAt: number): void;
  /** Gives back at once jobs claimed while the loop was stopping: they were never started. */
  giveBack(jobs: ClaimedJob[]): Promise<void>;
  onError(error: unknown, during: string): void;
  pollIntervalMs: number;
}

export class ClaimLoop {
  private readonly deps: ClaimLoopDeps;
  private stopped = true;
  /** Set by any hint that jobs may be waiting; cleared when a pass drains the queue. */
  private mayHaveWork = true;
  private again = false;
  private pass: Promise<void> | null = null;
  private pollTimer: NodeJS.Timeout | null = null;
  private dueTimer: NodeJS.Timeout | null = null;
  /** When the due timer fires (Date.now() time); meaningful while dueTimer is set. */
  private dueAt = 0;
  private retryTimer: NodeJS.Timeout | null = null;
  private refill: NodeJS.Immediate | null = null;
  private failures = 0;

  constructor(deps: ClaimLoopDeps) {
    this.deps = deps;
  }

  /** Starts polling and runs the first pass; rejects if that pass fails (e.g. not migrated). */
  async start(): Promise<void> {
    this.stopped = false;
    this.schedulePoll();
    this.pass = this.runPass(true).finally(() => {
      this.pass = null;
    });
    await this.pass;
  }

  /** Stops claiming; resolves once an in-flight pass has finished. */
  async stop(): Promise<void> {
    this.stopped = true;
    for (const timer of [this.pollTimer, this.dueTimer, this.retryTimer]) if (timer) clearTimeout(timer);
    this.pollTimer = this.dueTimer = this.retryTimer = null;
    if (this.refill) clearImmediate(this.refill);
    this.refill = null;
    await this.pass?.catch(() => undefined);
  }

  /** A hint that jobs may be waiting (NOTIFY, timer, poll, reconnect, reaped jobs). */
  wake(): void {
    this.mayHaveWork = true;
    this.request();
  }

  /** A job of ours becomes due in `ms` (a retry's backoff): wake then, if nothing wakes us sooner. */
  wakeIn(ms: number): void {
    if (this.stopped) return;
    const at = Date.now() + ms;
    if (this.dueTimer && this.dueAt <= at) return;
    this.setDueTimer(ms);
  }

  /**
   * A slot was freed: claim again if jobs may be waiting. Deferred by one turn of the event
   * loop, so that the slots freed by one batched completion are refilled by one claim.
   */
  slotFreed(): void {
    if (!this.mayHaveWork || this.refill !== null || this.stopped) return;
    this.refill = setImmediate(() => {
      this.refill = null;
      if (this.mayHaveWork) this.request();
    });
  }

  /** Runs one claim pass now (for tests and for callers that need to await it). */
  async tick(): Promise<void> {
    this.mayHaveWork = true;
    this.request();
    await this.pass;
  }

  private request(): void {
    if (this.stopped) return;
    if (this.pass !== null) {
      this.again = true;
      return;
    }
    this.pass = this.runPass(false).finally(() => {
      this.pass = null;
    });
  }

  private async runPass(rethrow: boolean): Promise<void> {
    do {
      this.again = false;
      if (this.deps.beforeClaim) {
        if (this.deps.freeSlots() <= 0 || this.stopped) return;
        await this.deps.beforeClaim();
      }
      const free = this.deps.freeSlots();
      if (free <= 0 || this.stopped) return;
      let jobs: ClaimedJob[];
      let leftWork = false;
      // the slots are held from when the claim is sent until its jobs are accepted
      this.deps.reserve?.(free);
      let reserved = true;
      const unreserve = () => {
        if (reserved) this.deps.unreserve?.(free);
        reserved = false;
      };
      const sentAt = performance.now();
      try {
        const result = await this.deps.claim(free);
        unreserve();
        if (Array.isArray(result)) {
          jobs = result;
        } else {
          jobs = result.jobs;
          leftWork = result.leftWork;
          if (result.waitMs !== null) this.wakeIn(result.waitMs + 1);
        }
        this.failures = 0;
      } catch (error) {
        unreserve();
        if (rethrow) throw error;
        this.retryLater(error);
        return;
      }
      if (this.stopped) {
        // stop() began while the claim was in flight: these jobs never start here.
        if (jobs.length > 0) await this.deps.giveBack(jobs);
        return;
      }
      if (jobs.length > 0) this.deps.accept(jobs, sentAt);
      if (jobs.length < free && !leftWork) {
        this.mayHaveWork = false; // drained: wait for a hint, the next due time or the poll
        await this.armDueTimer(sentAt);
      }
    } while (this.again && !this.stopped);
  }

  /**
   * The fallback poll: each delay drawn anew within ±25 % of pollIntervalMs. Fixed intervals
   * keep workers started together in step, and the fleet then polls like one worker: with
   * `listen: false`, 4 Workers started in one process, a 1 s poll and 5 jobs/s behind
   * PgBouncer had a p50 latency of 480 ms, 155 ms with jitter (docs/pgbouncer.md).
   */
  private schedulePoll(): void {
    const interval = this.deps.pollIntervalMs;
    const delay = Math.round(interval * (1 - POLL_JITTER + Math.random() * 2 * POLL_JITTER));
    this.pollTimer = setTimeout(() => {
      if (this.stopped) return;
      this.schedulePoll();
      this.wake();
    }, delay);
  }

  /**
   * Sets the wake-up timer to the earliest future run_after (database time). The claim that came
   * back short was sent at `claimSentAt`: a job that became due since then was not seen by it
   * (a timer fires up to a millisecond early, a due time falls between the two statements), and
   * reading only jobs due after *now* would leave it to the slow poll — a retry 30 s late.
   * So jobs due since the claim was sent count as due now: one more claim takes them.
   */
  private async armDueTimer(claimSentAt: number): Promise<void> {
    let ms: number | null;
    try {
      ms = await this.deps.nextDueInMs(performance.now() - claimSentAt);
    } catch (error) {
      this.deps.onError(error, 'reading the next due time');
      return;
    }
    // Keep a timer that is due sooner: the read may be older than a retry armed meanwhile
    // (wakeIn), and a stale wake-up costs one empty claim, a missed one a whole poll interval.
    if (ms === null || this.stopped) return;
    if (this.dueTimer && this.dueAt <= Date.now() + ms) return;
    this.setDueTimer(ms);
  }

  private setDueTimer(ms: number): void {
    if (this.dueTimer) clearTimeout(this.dueTimer);
    const delay = Math.min(Math.ceil(ms), MAX_TIMER_MS);
    this.dueAt = Date.now() + delay;
    this.dueTimer = setTimeout(() => {
      this.dueTimer = null;
      this.wake();
    }, delay);
  }

  /** A failed claim (database away?): retry with backoff, 100 ms doubling to 5 s. */
  private retryLater(error: unknown): void {
    this.deps.onError(error, 'claiming jobs');
    this.mayHaveWork = true;
    if (this.stopped || this.retryTimer) return;
    const delay = Math.min(5_000, 100 * 2 ** this.failures++);
    this.retryTimer = setTimeout(() => {
      this.retryTimer = null;
      this.wake();
    }, delay);
  }
}
