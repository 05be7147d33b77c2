/**
 * `queue.waitFor(id)` (SPEC §9): resolves with the job once it is done, dead or cancelled, and
 * never misses that moment. The notification is only a hint; the row is the truth, and it is
 * read again:
 *   - when the job's completion hint arrives (migration 12: a trigger sends the id of a waited-for
 *     job with the transition that finishes it, on the schema's "finished" channel);
 *   - on every (re)connection of the LISTEN connection (a hint sent while it was down is lost);
 *   - every POLL_MS while LISTEN is unavailable (`listen: false`, or reconnecting), and every
 *     SAFETY_POLL_MS while it is up (a hint lost some other way costs a few seconds, not a hang);
 *   - once more when the time runs out, before the typed timeout error.
 * The LISTEN is in place before the hint is requested and the row first read, so a completion
 * either precedes that read (which sees it) or sends its hint to a connection already listening.
 * One LISTEN connection serves every waiter of the queue; it is opened on the first wait and
 * closed when the last one ends.
 */

import { isConnectionError } from '../db/database-error.js';
import { finishedChannel } from '../db/identifier.js';
import { NotificationListener } from '../db/listener.js';
import { DatabaseError, NotFoundError, WaitTimeoutError } from '../errors.js';
import type { Job } from '../types.js';
import type { EngineCore } from './engine-core.js';

/** The statuses a wait ends on. */
const FINISHED: ReadonlySet<string> = new Set(['done', 'dead', 'cancelled']);
/** Re-reads while LISTEN is unavailable. */
export const POLL_MS = 500;
/** Re-reads while LISTEN is up: the safety net under the hints. */
export const SAFETY_POLL_MS = 5_000;

interface Waiter {
  readonly id: string;
  /** Its completion hint is set (until then it is polled, and the hint asked for again). */
  hinted: boolean;
  /** A read in flight, and whether another was asked for meanwhile. */
  reading: Promise<void> | null;
  again: boolean;
  settled: boolean;
  resolve(job: Job): void;
  reject(error: unknown): void;
}

export class FinishWaiter {
  private readonly waiters = new Map<string, Set<Waiter>>();
  private listener: NotificationListener | null = null;
  private starting: Promise<void> | null = null;
  private poller: NodeJS.Timeout | null = null;
  private pollEvery = 0;

  constructor(
    private readonly engine: EngineCore,
    private readonly listen: boolean,
    /** The re-read intervals (tests lengthen them to see that nothing else is relied on). */
    private readonly tuning: { pollMs: number; safetyPollMs: number } = {
      pollMs: POLL_MS,
      safetyPollMs: SAFETY_POLL_MS,
    },
  ) {}

  /** Waits for job `id` to finish (see the file's header). */
  async wait(id: string, timeoutMs: number | null, signal: AbortSignal | undefined): Promise<Job> {
    signal?.throwIfAborted();
    let waiter!: Waiter;
    const done = new Promise<Job>((resolve, reject) => {
      waiter = { id, hinted: false, reading: null, again: false, settled: false, resolve, reject };
    });
    done.catch(() => undefined); // settled before it is awaited (a read racing the first look)
    const onAbort = () => this.settle(waiter, { error: signal?.reason });
    signal?.addEventListener('abort', onAbort, { once: true });
    let timer: NodeJS.Timeout | undefined;
    if (timeoutMs !== null) {
      timer = setTimeout(() => void this.timedOut(waiter, timeoutMs), timeoutMs);
    }
    this.add(waiter);
    try {
      await this.ensureListening();
      if (!waiter.settled) this.check(waiter);
      return await done;
    } finally {
      clearTimeout(timer);
      signal?.removeEventListener('abort', onAbort);
      this.remove(waiter);
    }
  }

  /** Ends every wait (the queue is closing) and the LISTEN connection. */
  async close(error: Error): Promise<void> {
    for (const set of this.waiters.values()) for (const waiter of set) this.settle(waiter, { error });
    this.waiters.clear();
    await this.stopListening();
  }

  /** Reads the row again (one read at a time per waiter; a request meanwhile reads once more). */
  private check(waiter: Waiter): void {
    if (waiter.settled) return;
    if (waiter.reading !== null) {
      waiter.again = true;
      return;
    }
    waiter.reading = (async () => {
      do {
        waiter.again = false;
        try {
          const job = await this.read(waiter);
          if (job === null) {
            this.settle(waiter, {
              error: new NotFoundError(
                waiter.hinted
                  ? `Job ${waiter.id} no longer exists: it was deleted before it was seen finished (retention: { completed: 'delete' }, prune, or a manual DELETE)`
                  : `Job ${waiter.id} does not exist (or was deleted already: retention: { completed: 'delete' } deletes jobs as they complete)`,
              ),
            });
          } else if (FINISHED.has(job.status)) this.settle(waiter, { job });
        } catch (error) {
          // the database is away: the next hint, reconnection or poll reads again; anything
          // else (not migrated, no such database or table, bad credentials) ends the wait now
          if (!worthRetrying(error)) this.settle(waiter, { error });
          else {
            this.engine.report(
              error,
              `reading job ${waiter.id} for waitFor failed; read again on the next hint or poll`,
            );
          }
        }
      } while (waiter.again && !waiter.settled);
    })().finally(() => {
      waiter.reading = null;
    });
  }

  /**
   * The row as it is now; until the waiter's hint is set, asks for it in the same statement
   * (never waiting for the row: a locked row is asked again on the next poll).
   */
  private async read(waiter: Waiter): Promise<Job | null> {
    const { store, pool } = this.engine;
    if (waiter.hinted) return store.observe.get(pool, waiter.id);
    const found = await store.observe.requestFinishHint(pool, waiter.id);
    if (found?.hinted) {
      waiter.hinted = true;
      this.schedulePoll();
    }
    return found?.job ?? null;
  }

  private async timedOut(waiter: Waiter, timeoutMs: number): Promise<void> {
    if (waiter.settled) return;
    try {
      const job = await this.engine.store.observe.get(this.engine.pool, waiter.id);
      if (job === null)
        this.settle(waiter, {
          error: new NotFoundError(`Job ${waiter.id} no longer exists: it was deleted`),
        });
      else if (FINISHED.has(job.status)) this.settle(waiter, { job });
      else this.settle(waiter, { error: new WaitTimeoutError(waiter.id, job.status, timeoutMs) });
    } catch (error) {
      this.settle(waiter, {
        error: worthRetrying(error)
          ? new WaitTimeoutError(waiter.id, null, timeoutMs, { cause: error })
          : error,
      });
    }
  }

  private settle(waiter: Waiter, outcome: { job: Job } | { error: unknown }): void {
    if (waiter.settled) return;
    waiter.settled = true;
    if ('job' in outcome) waiter.resolve(outcome.job);
    else waiter.reject(outcome.error);
  }

  private add(waiter: Waiter): void {
    const set = this.waiters.get(waiter.id) ?? new Set<Waiter>();
    this.waiters.set(waiter.id, set);
    set.add(waiter);
    this.schedulePoll();
  }

  private remove(waiter: Waiter): void {
    const set = this.waiters.get(waiter.id);
    set?.delete(waiter);
    if (set?.size === 0) this.waiters.delete(waiter.id);
    if (this.waiters.size === 0) void this.stopListening();
  }

  private checkAll(): void {
    for (const set of this.waiters.values()) for (const waiter of set) this.check(waiter);
  }

  private ensureListening(): Promise<void> {
    if (!this.listen) return Promise.resolve();
    if (this.listener) return this.starting ?? Promise.resolve();
    const listener = new NotificationListener({
      clientConfig: this.engine.clientConfig,
      channel: finishedChannel(this.engine.schema),
      onNotification: (id) => {
        for (const waiter of this.waiters.get(id) ?? []) this.check(waiter);
      },
      onConnected: () => {
        this.schedulePoll();
        this.checkAll(); // hints sent while it was not listening are lost: read the rows
      },
      onError: (error) => {
        this.schedulePoll();
        this.engine.report(error, "waitFor's LISTEN connection failed; reconnecting (polling meanwhile)");
      },
    });
    this.listener = listener;
    this.starting = listener.start().finally(() => {
      this.starting = null;
      this.schedulePoll();
    });
    return this.starting;
  }

  private async stopListening(): Promise<void> {
    if (this.poller) clearInterval(this.poller);
    this.poller = null;
    this.pollEvery = 0;
    const listener = this.listener;
    this.listener = null;
    await listener?.stop();
  }

  /** The poll interval now: short while LISTEN is unavailable or a waiter's hint is not set yet. */
  private pollInterval(): number {
    if (!this.listener?.listening) return this.tuning.pollMs;
    for (const set of this.waiters.values())
      for (const waiter of set) if (!waiter.hinted) return this.tuning.pollMs;
    return this.tuning.safetyPollMs;
  }

  /** Polls at the rate LISTEN's state and the waiters call for (none without waiters). */
  private schedulePoll(): void {
    if (this.waiters.size === 0) return;
    const every = this.pollInterval();
    if (this.poller && this.pollEvery === every) return;
    if (this.poller) clearInterval(this.poller);
    this.pollEvery = every;
    this.poller = setInterval(() => {
      if (this.pollInterval() !== this.pollEvery) this.schedulePoll();
      this.checkAll();
    }, every); // not unref'd: a caller waiting for a job keeps the process alive
  }
}

/**
 * A failed read a later one may not meet: the database away, restarting or overloaded, or a
 * statement cancelled (57014: a slow moment). Not a misconfiguration, which ends the wait.
 */
function worthRetrying(error: unknown): boolean {
  if (error instanceof DatabaseError && /^(57014|40001|40P01)$/.test(error.sqlState ?? '')) return true;
  return isConnectionError(error);
}
