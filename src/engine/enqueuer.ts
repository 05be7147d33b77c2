/**
 * Every insert of jobs (SPEC §1.6, §1.7, §1.9, §3): single enqueues batched automatically, batch
 * enqueues, their dedupe rounds, and the wake-up hint after a batch committed.
 */

import { Batcher, type Settled } from '../core/batcher.js';
import type { NewJob } from '../core/job-spec.js';
import { compareKeys } from '../core/key-order.js';
import { isConnectionError } from '../db/database-error.js';
import { type Executor, inTransaction } from '../db/executor.js';
import { DatabaseError } from '../errors.js';
import type { EnqueueResult } from '../types.js';
import { CoalescedHint } from './coalesced-hint.js';
import type { EngineCore } from './engine-core.js';
import type { Flows } from './flows.js';

/** A dedupe hit whose holder finishes between the insert and the lookup retries the insert. */
const MAX_DEDUPE_ROUNDS = 10;

export class Enqueuer {
  private readonly batcher: Batcher<NewJob, EnqueueResult> | null;
  /** The wake-up hint after a batch committed (coalesced while one is in flight). */
  private readonly hint: CoalescedHint;
  /** Automatic batches being written now. */
  private flushing = 0;

  constructor(
    private readonly engine: EngineCore,
    /** §10 jobs with dependencies are written by the flows. */
    private readonly flows: Flows,
  ) {
    const tuning = engine.settings.batchEnqueue;
    this.batcher = tuning ? new Batcher((jobs) => this.flush(jobs), { ...tuning, eager: true }) : null;
    this.hint = new CoalescedHint(engine, 'jobs', 'wake-up NOTIFY');
  }

  /**
   * One job; through the automatic batch unless it joins the caller's transaction (`db`) or
   * has a dedupe mode (§8: one statement or transaction of its own).
   */
  enqueue(job: NewJob, db?: Executor): Promise<EnqueueResult> {
    // §10 a job with dependencies goes in with its edges, its dependencies locked
    if (job.dependsOn !== null)
      return this.flows.enqueueDependent([job], db).then((r) => r[0] as EnqueueResult);
    const { tracing } = this.engine;
    // §9 one PRODUCER span per call, its trace context stored with the job (when tracing: no
    // closure or array is made for a call that cannot be traced)
    return tracing?.mayTrace() ? tracing.send([job], () => this.insert(job, db)) : this.insert(job, db);
  }

  private insert(job: NewJob, db: Executor | undefined): Promise<EnqueueResult> {
    if (job.dedupe !== null) return this.insertWithMode(db, job);
    if (db === undefined && this.batcher) {
      const batcher = this.batcher;
      // the batch is flushed for every caller in it: scheduled outside any caller's span
      return this.engine.tracing ? this.engine.tracing.detached(() => batcher.add(job)) : batcher.add(job);
    }
    return this.insertOne(db ?? this.engine.pool, job);
  }

  /**
   * Many jobs in one INSERT and one NOTIFY, results in input order. On the pool, a batch with
   * dedupe keys runs in a transaction of its own (its holder lookups and a second INSERT may
   * follow): all rows or none.
   */
  enqueueMany(jobs: NewJob[], db?: Executor): Promise<EnqueueResult[]> {
    // §10 a batch with dependencies goes in with its edges (checked: none of it has a dedupe key)
    if (jobs.some((job) => job.dependsOn !== null)) return this.flows.enqueueDependent(jobs, db);
    const { tracing } = this.engine;
    // §9 one PRODUCER span for the whole call, its trace context stored with every job
    return tracing?.mayTrace()
      ? tracing.send(jobs, () => this.insertMany(jobs, db))
      : this.insertMany(jobs, db);
  }

  private async insertMany(jobs: NewJob[], db: Executor | undefined): Promise<EnqueueResult[]> {
    if (jobs.some((job) => job.dedupe !== null)) {
      // §8 dedupe modes decide job by job, all in one transaction, in dedupe-key order — two
      // batches that share keys then take their locks in one order and never deadlock (§3) —
      // with the results in input order. The order is code point order, the SQL functions'
      // COLLATE "C" (core/key-order.ts): a batch of the library and one of enqueue_many agree.
      const order = jobs.map((job, index) => ({ job, index }));
      order.sort((a, b) => compareKeys(a.job.dedupeKey, b.job.dedupeKey) || a.index - b.index);
      const pendingKeys = jobs.filter((job) => job.dedupe?.scope === 'pending').map((job) => job.dedupeKey);
      return this.engine.atomically(db, async (tx) => {
        // scope 'pending': every key's lock first, in the one lock order (SQL's)
        if (pendingKeys.length > 0)
          await this.engine.store.enqueue.lockPendingKeys(tx, pendingKeys as string[]);
        const results: EnqueueResult[] = new Array(jobs.length);
        for (const { job, index } of order) results[index] = await this.insertWithMode(tx, job);
        return results;
      });
    }
    if (db !== undefined) return settledOrThrow(await this.insertBatch(db, jobs, true));
    const { pool } = this.engine;
    if (jobs.every((job) => job.dedupeKey === null)) {
      return settledOrThrow(await this.insertBatch(pool, jobs, true));
    }
    return inTransaction(pool, async (tx) => settledOrThrow(await this.insertBatch(tx, jobs, true)));
  }

  /** Resolves once no batch and no hint is in flight. */
  async idle(): Promise<void> {
    await this.batcher?.idle();
    await this.hint.inFlight;
  }

  /** One INSERT with its NOTIFY in the same transaction; a dedupe hit reads the holder (§1.7). */
  private async insertOne(db: Executor, job: NewJob): Promise<EnqueueResult> {
    const { store } = this.engine;
    for (let round = 0; round < MAX_DEDUPE_ROUNDS; round++) {
      const id = await store.enqueue.insertOne(db, job);
      if (id !== null) return { id, created: true };
      // A dedupe hit: look the holder up in a new statement, whose snapshot sees it (§1.7).
      const holders = await store.enqueue.activeIdsByKey(db, [job.dedupeKey as string]);
      const holder = holders.get(job.dedupeKey as string);
      if (holder !== undefined) return { id: holder, created: false };
    }
    throw dedupeRace(job.dedupeKey);
  }

  /**
   * A job with a dedupe mode (§8), on `db` (the caller's transaction) or in a transaction of
   * its own: scope 'pending', throttle (`windowMs`) or debounce (`replace`, `maxWaitMs`); else
   * the plain insert.
   */
  private async insertWithMode(db: Executor | undefined, job: NewJob): Promise<EnqueueResult> {
    const mode = job.dedupe;
    if (mode?.scope === 'pending') return this.insertPending(db ?? this.engine.pool, job);
    if (mode?.replace) return this.insertDebounced(db ?? this.engine.pool, job);
    if (mode?.windowMs != null) {
      const windowMs = mode.windowMs;
      return this.engine.atomically(db, (tx) => this.insertThrottled(tx, job, windowMs));
    }
    return this.insertOne(db ?? this.engine.pool, job);
  }

  /**
   * Debounce (§8): one statement inserts the job or replaces a pending holder's payload,
   * priority and run time. A running holder is left alone (`replaced: false`); one that finished
   * between the statement and the lookup means trying again.
   */
  private async insertDebounced(db: Executor, job: NewJob): Promise<EnqueueResult> {
    const { store } = this.engine;
    const key = job.dedupeKey as string;
    for (let round = 0; round < MAX_DEDUPE_ROUNDS; round++) {
      const row = await store.enqueue.insertDebounced(db, job);
      if (row !== null)
        return row.created ? { id: row.id, created: true } : { id: row.id, created: false, replaced: true };
      const holder = (await store.enqueue.activeIdsByKey(db, [key])).get(key);
      if (holder !== undefined) return { id: holder, created: false, replaced: false };
    }
    throw dedupeRace(key);
  }

  /**
   * Scope 'pending' (§8): one statement inserts the job under its key's lock unless the key has a
   * queued job, which is then the answer; one that started or ended before the lookup means
   * trying again.
   */
  private async insertPending(db: Executor, job: NewJob): Promise<EnqueueResult> {
    const { store } = this.engine;
    const key = job.dedupeKey as string;
    for (let round = 0; round < MAX_DEDUPE_ROUNDS; round++) {
      const id = await store.enqueue.insertPending(db, job);
      if (id !== null) return { id, created: true };
      const holder = (await store.enqueue.pendingIdsByKey(db, [key])).get(key);
      if (holder !== undefined) return { id: holder, created: false };
    }
    throw dedupeRace(key);
  }

  /**
   * Throttle (§8), inside a transaction: the key's window row is locked first, so throttled
   * enqueues of one key decide one at a time. While the window holds, its holder is the answer
   * (finished or not); else the job is inserted (an active holder still wins, §1.7) and, when it
   * was, the window restarts from now.
   */
  private async insertThrottled(tx: Executor, job: NewJob, windowMs: number): Promise<EnqueueResult> {
    const { store } = this.engine;
    const key = job.dedupeKey as string;
    const window = await store.enqueue.windowLock(tx, key);
    if (window.taken) return { id: window.jobId, created: false };
    const result = await this.insertOne(tx, job);
    if (result.created) await store.enqueue.windowTake(tx, key, windowMs, result.id);
    return result;
  }

  /**
   * One INSERT for the batch, then the holders of dedupe hits looked up in a new statement,
   * whose snapshot sees them (§1.7); a holder that finished meanwhile means inserting again.
   * Rejects only when its first INSERT fails (then nothing was written). After that, each job
   * settles with its own fate (SPEC §3): a later step that fails fails only the jobs it was for,
   * never one whose row was written.
   */
  private async insertBatch(
    db: Executor,
    jobs: NewJob[],
    notify: boolean,
  ): Promise<Settled<EnqueueResult>[]> {
    const { store } = this.engine;
    const results: Settled<EnqueueResult>[] = new Array(jobs.length);
    let todo = jobs.map((job, index) => ({ job, index }));
    for (let round = 0; todo.length > 0; round++) {
      try {
        if (round === MAX_DEDUPE_ROUNDS) throw dedupeRace(todo[0]?.job.dedupeKey ?? null);
        const inserted = await store.enqueue.insertMany(
          db,
          todo.map((t) => t.job),
          notify,
        );
        const hits: typeof todo = [];
        todo.forEach((t, i) => {
          const row = inserted[i];
          if (row?.created) results[t.index] = { ok: true, value: { id: row.id, created: true } };
          else hits.push(t);
        });
        todo = hits;
        if (hits.length === 0) break;
        const holders = await store.enqueue.activeIdsByKey(
          db,
          hits.map((h) => h.job.dedupeKey as string),
        );
        todo = hits.filter((h) => {
          const holder = holders.get(h.job.dedupeKey as string);
          if (holder !== undefined) results[h.index] = { ok: true, value: { id: holder, created: false } };
          return holder === undefined;
        });
      } catch (error) {
        if (round === 0 && todo.length === jobs.length) throw error; // nothing was written
        for (const t of todo) results[t.index] = { ok: false, error };
        break;
      }
    }
    return results;
  }

  /**
   * The flush of automatic enqueue batching: one INSERT and one commit for every enqueue call
   * that arrived together. Each caller settles with its own job's fate (SPEC §3). If the INSERT
   * itself fails for a reason other than the connection (nothing was written), each job is
   * retried alone so that each caller gets its own outcome.
   *
   * §1.9 the wake-up: a batch written alone (no other batch and no hint in flight) sends its
   * NOTIFY inside its own transaction — one round trip and one commit less between the call and
   * a worker waking (W3). Under load, batches overlap: then one coalesced NOTIFY follows the
   * commits, because a transaction that notifies holds a global lock until its commit is flushed
   * (TECH-NOTES), which would make overlapping batches commit one at a time.
   */
  private async flush(jobs: NewJob[]): Promise<Settled<EnqueueResult>[]> {
    const { pool } = this.engine;
    this.flushing++;
    const alone = this.flushing === 1 && this.hint.inFlight === null;
    try {
      const results = await this.insertBatch(pool, jobs, alone);
      if (!alone && results.some((r) => r.ok && r.value.created)) this.hint.send();
      return results;
    } catch (error) {
      if (jobs.length === 1 || isConnectionError(error)) throw error;
      return Promise.all(
        jobs.map((job) =>
          this.insertOne(pool, job).then(
            (value): Settled<EnqueueResult> => ({ ok: true, value }),
            (err: unknown): Settled<EnqueueResult> => ({ ok: false, error: err }),
          ),
        ),
      );
    } finally {
      this.flushing--;
    }
  }
}

/** The values of a batch whose jobs all settled well; else the first job's error. */
function settledOrThrow(results: Settled<EnqueueResult>[]): EnqueueResult[] {
  return results.map((result) => {
    if (!result.ok) throw result.error;
    return result.value;
  });
}

function dedupeRace(dedupeKey: string | null): DatabaseError {
  return new DatabaseError(
    `Enqueue with dedupeKey ${JSON.stringify(dedupeKey)} kept conflicting with jobs that finished before they could be read; retry the call`,
    { sqlState: undefined },
  );
}
