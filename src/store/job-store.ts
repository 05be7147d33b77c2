import { createHash } from 'node:crypto';
import { type JobRow, toClaimedJob, toJob } from '../core/job-row.js';
import type { NewJob } from '../core/job-spec.js';
import { toDatabaseError } from '../db/database-error.js';
import type { Executor } from '../db/executor.js';
import { notifyChannel, quoteIdent } from '../db/identifier.js';
import { DatabaseError, DedupeConflictError, type SkiplockError } from '../errors.js';
import type { ClaimedJob, Job, JobStatus, Lease } from '../types.js';
import { buildStatements, type Statements } from './statements.js';

/** Rows counted exactly before `counts()` switches a finished status to an estimate (§7). */
export const EXACT_COUNT_LIMIT = 10_000;

/** Rows one `listPage` examines by primary key at most (a rare status's own rows aside). */
export const LIST_WINDOW = 10_000;

/** A job's status before and after a one-statement transition (`after` null: it did not apply). */
export interface Transition {
  before: JobStatus;
  after: JobStatus | null;
}

/** Counts by status, with the statuses whose figure is an estimate. */
export interface StatusCounts {
  counts: Record<JobStatus, number>;
  estimated: JobStatus[];
}

/**
 * The only layer that talks SQL to the jobs table: one method per statement of
 * {@link buildStatements}, each taking the executor to run on (a pool, or the caller's
 * transaction client), mapping rows, and turning driver errors into Skiplock errors.
 */
export class JobStore {
  readonly schema: string;
  readonly channel: string;
  private readonly sql: Statements;

  /** Statement text → prepared-statement name (unique per schema). */
  private readonly names: Map<string, string>;
  /** The executor on which statements run as named prepared statements (our own pg pool). */
  private preparedOn: Executor | null = null;

  /** `retention: { completed: 'delete' }`: completions delete the row and count it (§7). */
  private readonly deleteCompleted: boolean;

  constructor(schema: string, options: { deleteCompleted?: boolean } = {}) {
    this.schema = schema;
    this.deleteCompleted = options.deleteCompleted === true;
    this.channel = notifyChannel(schema);
    this.sql = buildStatements(quoteIdent(schema));
    const prefix = `skiplock_${createHash('sha256').update(schema).digest('hex').slice(0, 8)}_`;
    this.names = new Map(Object.entries(this.sql).map(([key, text]) => [text, `${prefix}${key}`]));
  }

  /**
   * Runs every statement on `pool` as a named prepared statement: parsed and planned once per
   * connection (1.2–1.4× on the claim/complete loop, TECH-NOTES). Off behind PgBouncer in
   * transaction mode, where a session's prepared statements do not follow the client.
   */
  prepareOn(pool: Executor | null): void {
    this.preparedOn = pool;
  }

  /** Inserts one job; `null` on a dedupe hit (the caller then looks the holder up). */
  async insertOne(db: Executor, job: NewJob): Promise<string | null> {
    const rows = await this.run<{ id: string }>(db, this.sql.insertOne, [
      job.queue,
      job.task,
      job.payloadJson,
      job.priority,
      job.dedupeKey,
      job.maxAttempts,
      job.runAt?.toISOString() ?? null,
      job.delayMs,
      job.timeoutMs,
      this.channel,
    ]);
    return rows[0]?.id ?? null;
  }

  /**
   * Inserts a batch in one statement; per input row, its id and whether it was inserted. With
   * `notify` false no NOTIFY is sent in the statement (the caller hints after the commit).
   */
  async insertMany(
    db: Executor,
    jobs: readonly NewJob[],
    notify = true,
  ): Promise<{ id: string; created: boolean }[]> {
    const column = <T>(pick: (job: NewJob) => T) => jobs.map(pick);
    const rows = await this.run<{ id: string; created: boolean }>(db, this.sql.insertMany, [
      column((j) => j.queue),
      column((j) => j.task),
      column((j) => j.payloadJson),
      column((j) => j.priority),
      column((j) => j.dedupeKey),
      column((j) => j.maxAttempts),
      column((j) => j.runAt?.toISOString() ?? null),
      column((j) => j.delayMs),
      column((j) => j.timeoutMs),
      notify ? this.channel : null,
    ]);
    return rows.map((row) => ({ id: String(row.id), created: row.created }));
  }

  /** The ids of the active jobs holding these dedupe keys, by key. */
  async activeIdsByKey(db: Executor, keys: readonly string[]): Promise<Map<string, string>> {
    const rows = await this.run<{ id: string; dedupe_key: string }>(db, this.sql.activeIdsByKey, [keys]);
    return new Map(rows.map((row) => [row.dedupe_key, String(row.id)]));
  }

  async claim(
    db: Executor,
    workerId: string,
    limit: number,
    leaseMs: number,
    tasks: string[] | null,
    queues: string[] | null,
  ): Promise<ClaimedJob[]> {
    const rows = await this.run<JobRow>(db, this.sql.claim, [workerId, limit, tasks, queues, leaseMs]);
    return rows.map(toClaimedJob);
  }

  /** running → done (or deleted and counted, with `deleteCompleted`), under the lease. */
  async complete(db: Executor, lease: Lease, resultJson: string): Promise<boolean> {
    const rows = this.deleteCompleted
      ? await this.run(db, this.sql.completeDelete, leaseValues(lease))
      : await this.run(db, this.sql.complete, [...leaseValues(lease), resultJson]);
    return rows.length === 1;
  }

  /**
   * Completes many leases in one statement; answers per input item, in input order (SPEC §3):
   * a stale and a live lease of one job each get their own answer, and a lease listed twice
   * completes once (its first entry answers true).
   */
  async completeMany(
    db: Executor,
    batch: readonly { lease: Lease; resultJson: string }[],
  ): Promise<boolean[]> {
    const first = new Map<string, number>();
    batch.forEach((item, i) => {
      const key = leaseKey(item.lease);
      if (!first.has(key)) first.set(key, i);
    });
    const unique = [...first.values()].map((i) => batch[i] as { lease: Lease; resultJson: string });
    const items = byId(unique, (i) => i.lease.id); // one lock order for all batch statements: no deadlocks
    const leases = [
      items.map((i) => i.lease.id),
      items.map((i) => i.lease.workerId),
      items.map((i) => i.lease.attempt),
      items.map((i) => i.lease.token),
    ];
    const rows = this.deleteCompleted
      ? await this.run<{ id: string; token: string }>(db, this.sql.completeManyDelete, leases)
      : await this.run<{ id: string; token: string }>(db, this.sql.completeMany, [
          ...leases,
          items.map((i) => i.resultJson),
        ]);
    const completed = new Set(rows.map((row) => `${row.id}/${row.token}`));
    return batch.map(
      (item, i) => first.get(leaseKey(item.lease)) === i && completed.has(leaseKey(item.lease)),
    );
  }

  /**
   * Locks the job's row under `lease` inside the caller's transaction (`db` must be its
   * client); false when the lease no longer owns the job.
   */
  async lockLease(db: Executor, lease: Lease): Promise<boolean> {
    const rows = await this.run(db, this.sql.lockLease, leaseValues(lease));
    return rows.length === 1;
  }

  async fail(
    db: Executor,
    lease: Lease,
    errorText: string,
    retryInMs: number,
  ): Promise<'pending' | 'dead' | 'cancelled' | null> {
    const rows = await this.run<{ status: 'pending' | 'dead' | 'cancelled' }>(db, this.sql.fail, [
      ...leaseValues(lease),
      errorText,
      retryInMs,
    ]);
    return rows[0]?.status ?? null;
  }

  async renewLease(db: Executor, lease: Lease, leaseMs: number): Promise<boolean> {
    const rows = await this.run(db, this.sql.renewLease, [...leaseValues(lease), leaseMs]);
    return rows.length === 1;
  }

  /**
   * Renews every listed lease of `workerId` (each must be one of its own); answers per lease, in
   * input order: `renewed`, `busy` (still its own, but its row is locked by another transaction
   * and was skipped rather than waited for) or `lost`, with the cancel flag of renewed ones.
   */
  async renewLeases(
    db: Executor,
    workerId: string,
    leases: readonly Lease[],
    leaseMs: number,
  ): Promise<LeaseRenewal[]> {
    if (leases.length === 0) return [];
    const rows = await this.run<{
      id: string;
      token: string;
      renewed: boolean;
      owned: boolean;
      cancel_requested: boolean;
    }>(db, this.sql.renewLeases, [
      workerId,
      leases.map((l) => l.id),
      leases.map((l) => l.attempt),
      leases.map((l) => l.token),
      leaseMs,
    ]);
    const answers = new Map(rows.map((row) => [`${row.id}/${row.token}`, row]));
    return leases.map((lease) => {
      const row = answers.get(leaseKey(lease));
      const state = row?.renewed ? 'renewed' : row?.owned ? 'busy' : 'lost';
      return { state, cancelRequested: row?.cancel_requested === true };
    });
  }

  async cancelRunning(db: Executor, lease: Lease, note: string): Promise<boolean> {
    const rows = await this.run(db, this.sql.cancelRunning, [...leaseValues(lease), note]);
    return rows.length === 1;
  }

  /** Milliseconds until the next pending job of these tasks/queues is due, or null. */
  async nextDueInMs(db: Executor, tasks: string[] | null, queues: string[] | null): Promise<number | null> {
    const rows = await this.run<{ ms: string | number | null }>(db, this.sql.nextDueInMs, [tasks, queues]);
    const ms = rows[0]?.ms;
    return ms === null || ms === undefined ? null : Math.max(0, Number(ms));
  }

  async release(db: Executor, lease: Lease): Promise<boolean> {
    const rows = await this.run(db, this.sql.release, [...leaseValues(lease), this.channel]);
    return rows.length === 1;
  }

  /** Releases many leases in one statement; answers per input lease, in input order. */
  async releaseMany(db: Executor, leases: readonly Lease[]): Promise<boolean[]> {
    if (leases.length === 0) return [];
    const sorted = byId(leases, (lease) => lease.id); // one lock order for all batch statements
    const rows = await this.run<{ id: string; token: string }>(db, this.sql.releaseMany, [
      sorted.map((l) => l.id),
      sorted.map((l) => l.workerId),
      sorted.map((l) => l.attempt),
      sorted.map((l) => l.token),
      this.channel,
    ]);
    const released = new Set(rows.map((row) => `${row.id}/${row.token}`));
    return leases.map((lease) => released.has(leaseKey(lease)));
  }

  async reap(db: Executor): Promise<string[]> {
    const rows = await this.run<{ id: string }>(db, this.sql.reap, [this.channel]);
    return rows.map((row) => String(row.id));
  }

  /**
   * dead → pending, decided on the locked row: its status before, and after (`null`: not
   * requeued); `null` for an unknown id. A {@link DedupeConflictError} when another active job
   * holds its key.
   */
  async requeue(db: Executor, id: string): Promise<Transition | null> {
    try {
      const rows = await this.run<Transition>(db, this.sql.requeue, [id, this.channel]);
      return rows[0] ? { before: rows[0].before, after: rows[0].after } : null;
    } catch (error) {
      if (error instanceof DatabaseError && error.sqlState === '23505') {
        throw new DedupeConflictError(
          `Job ${id} cannot be requeued: another active job holds its dedupe key. Cancel or finish that job first`,
          null,
          { cause: error },
        );
      }
      throw error;
    }
  }

  /** Requeues one keyset batch of dead jobs; throws a DatabaseError 23505 when a key is taken. */
  async requeueDeadBatch(
    db: Executor,
    task: string | null,
    afterId: string,
    batchSize: number,
  ): Promise<{ requeued: number; lastId: string | null }> {
    const rows = await this.run<{ requeued: number; last_id: string | null }>(db, this.sql.requeueDeadBatch, [
      task,
      afterId,
      batchSize,
      this.channel,
    ]);
    return { requeued: Number(rows[0]?.requeued ?? 0), lastId: rows[0]?.last_id ?? null };
  }

  async deadIds(db: Executor, task: string | null, afterId: string, batchSize: number): Promise<string[]> {
    const rows = await this.run<{ id: string }>(db, this.sql.deadIds, [task, afterId, batchSize]);
    return rows.map((row) => String(row.id));
  }

  async liveByQueue(
    db: Executor,
  ): Promise<{ queue: string; status: 'pending' | 'running'; count: number }[]> {
    const rows = await this.run<{ queue: string; status: 'pending' | 'running'; n: number }>(
      db,
      this.sql.liveByQueue,
      [],
    );
    return rows.map((row) => ({ queue: row.queue, status: row.status, count: Number(row.n) }));
  }

  async finishedPerBucket(
    db: Executor,
    bucketMs: number,
    windowMs: number,
  ): Promise<{ bucket: number; status: 'done' | 'dead' | 'cancelled'; count: number }[]> {
    const rows = await this.run<{ bucket: number; status: 'done' | 'dead' | 'cancelled'; n: number }>(
      db,
      this.sql.finishedPerBucket,
      [bucketMs, windowMs],
    );
    return rows.map((row) => ({ bucket: Number(row.bucket), status: row.status, count: Number(row.n) }));
  }

  /**
   * pending → cancelled, running → cancellation requested, decided on the locked row: its status
   * before, and after (`null`: finished, left alone); `null` for an unknown id.
   */
  async cancel(db: Executor, id: string): Promise<Transition | null> {
    const rows = await this.run<Transition>(db, this.sql.cancel, [id, this.channel]);
    return rows[0] ? { before: rows[0].before, after: rows[0].after } : null;
  }

  /** Deletes up to `batchSize` finished jobs after id `afterId`; returns the count and the cursor. */
  async pruneBatch(
    db: Executor,
    statuses: readonly string[],
    olderThanMs: number,
    afterId: string,
    batchSize: number,
  ): Promise<{ deleted: number; lastId: string | null }> {
    const rows = await this.run<{ deleted: number; last_id: string | null }>(db, this.sql.pruneBatch, [
      statuses,
      olderThanMs,
      afterId,
      batchSize,
    ]);
    return { deleted: Number(rows[0]?.deleted ?? 0), lastId: rows[0]?.last_id ?? null };
  }

  /** Deletes up to `limit` finished jobs older than `olderThanMs` (the background pruner); returns how many. */
  async pruneFinished(db: Executor, olderThanMs: number, limit: number): Promise<number> {
    const rows = await this.run<{ deleted: number }>(db, this.sql.pruneFinished, [olderThanMs, limit]);
    return Number(rows[0]?.deleted ?? 0);
  }

  async notify(db: Executor, payload: string): Promise<void> {
    await this.run(db, this.sql.notify, [this.channel, payload]);
  }

  async get(db: Executor, id: string): Promise<Job | null> {
    const rows = await this.run<JobRow>(db, this.sql.get, [id]);
    return rows[0] ? toJob(rows[0]) : null;
  }

  async findActive(db: Executor, dedupeKey: string): Promise<Job | null> {
    const rows = await this.run<JobRow>(db, this.sql.findActive, [dedupeKey]);
    return rows[0] ? toJob(rows[0]) : null;
  }

  async list(
    db: Executor,
    filter: { status: string | null; task: string | null; queue: string | null; after: string | null },
    limit: number,
  ): Promise<Job[]> {
    const rows = await this.run<JobRow>(db, this.sql.list, [
      filter.status,
      filter.task,
      filter.queue,
      filter.after,
      limit,
    ]);
    return rows.map(toJob);
  }

  /**
   * A bounded page, newest first (see the `listPage` statement): at most `window` rows examined
   * beyond the rows of a rare status. `scannedTo`: the lowest id examined when the page is not
   * full but older jobs may still match; null when the answer is complete.
   */
  async listPage(
    db: Executor,
    filter: { status: string | null; task: string | null; queue: string | null; after: string | null },
    limit: number,
    window = LIST_WINDOW,
  ): Promise<{ jobs: Job[]; scannedTo: string | null }> {
    const rows = await this.run<JobRow & { scanned_to: string | null }>(db, this.sql.listPage, [
      filter.status,
      filter.task,
      filter.queue,
      filter.after,
      limit,
      window,
    ]);
    return {
      jobs: rows.filter((row) => row.id !== null).map(toJob),
      scannedTo: rows[0]?.scanned_to ?? null,
    };
  }

  async counts(db: Executor): Promise<StatusCounts> {
    const rows = await this.run<Record<string, number | boolean>>(db, this.sql.counts, [
      EXACT_COUNT_LIMIT,
      this.schema,
    ]);
    const row = rows[0] ?? {};
    const counts = {
      pending: Number(row.pending ?? 0),
      running: Number(row.running ?? 0),
      // done rows, plus completions deleted at once and counted instead (§7)
      done: Math.round(Number(row.done ?? 0)) + Number(row.done_deleted ?? 0),
      dead: Math.round(Number(row.dead ?? 0)),
      cancelled: Math.round(Number(row.cancelled ?? 0)),
    };
    const estimated: JobStatus[] = [];
    if (row.done_estimated) estimated.push('done');
    if (row.dead_estimated) estimated.push('dead');
    if (row.cancelled_estimated) estimated.push('cancelled');
    return { counts, estimated };
  }

  async opsExtras(
    db: Executor,
    stuckAfterMs: number,
  ): Promise<{ dead1h: number; stuckRunning: number; oldestPendingSec: number; deadline1h: number }> {
    const rows = await this.run<Record<string, number>>(db, this.sql.opsExtras, [stuckAfterMs]);
    const row = rows[0] ?? {};
    return {
      dead1h: Number(row.dead1h ?? 0),
      stuckRunning: Number(row.stuck_running ?? 0),
      oldestPendingSec: Number(row.oldest_pending_sec ?? 0),
      deadline1h: Number(row.deadline1h ?? 0),
    };
  }

  /** The primary's WAL position now (`pg_lsn` as text): step 1 of the replica lag. */
  async walPosition(db: Executor): Promise<string> {
    const rows = await this.run<{ lsn: string }>(db, this.sql.walPosition, []);
    return String(rows[0]?.lsn);
  }

  /**
   * Step 2 of the replica lag, on the replica: ms behind the primary's position `primaryLsn`
   * (0 when replayed up to it; null when it cannot tell), and whether it is a replica at all.
   */
  async replicaLag(db: Executor, primaryLsn: string): Promise<{ inRecovery: boolean; lagMs: number | null }> {
    const rows = await this.run<{ in_recovery: boolean; lag_ms: number | null }>(db, this.sql.replicaLag, [
      primaryLsn,
    ]);
    const lag = rows[0]?.lag_ms;
    return {
      inRecovery: rows[0]?.in_recovery === true,
      lagMs: lag === null || lag === undefined ? null : Math.ceil(Number(lag)), // 0 only when caught up
    };
  }

  /** Runs one statement, mapping driver errors to Skiplock errors that keep the SQLSTATE. */
  private async run<R = Record<string, unknown>>(
    db: Executor,
    text: string,
    values: unknown[],
  ): Promise<R[]> {
    const name = db === this.preparedOn ? this.names.get(text) : undefined;
    try {
      const result = name
        ? await (db as unknown as NamedQuery).query({ name, text, values })
        : await db.query(text, values);
      return result.rows as R[];
    } catch (error) {
      const mapped = toDatabaseError(error, this.schema);
      throw name ? preparedStatementLost(mapped, error) : mapped;
    }
  }
}

/**
 * A copy sorted by numeric job id, so concurrent batch statements lock rows in one order. Ids
 * are decimal strings of positive bigints without leading zeros: a shorter one is smaller, and
 * equal lengths compare as text (no BigInt per comparison).
 */
function byId<T>(items: readonly T[], id: (item: T) => string): T[] {
  return [...items].sort((a, b) => {
    const x = id(a);
    const y = id(b);
    return x.length - y.length || (x < y ? -1 : x > y ? 1 : 0);
  });
}

/**
 * SQLSTATEs of a named prepared statement that a connection "already" has (42P05) or "does not"
 * have (26000) although the driver thinks otherwise: the mark of a transaction-pooling proxy
 * (PgBouncer in transaction mode) handing each transaction another server connection.
 */
const PREPARED_LOST = new Set(['42P05', '26000']);

/** A named statement's 42P05/26000 becomes an error that names the proxy and the fix. */
function preparedStatementLost(mapped: SkiplockError, cause: unknown): SkiplockError {
  if (!(mapped instanceof DatabaseError) || !PREPARED_LOST.has(mapped.sqlState ?? '')) return mapped;
  return new DatabaseError(
    `${mapped.message}. Skiplock's prepared statements do not survive a transaction-pooling proxy: ` +
      'behind PgBouncer in transaction mode, turn them off (`new Queue({ preparedStatements: false })`, ' +
      '`new Worker({ listen: false, … })`, or `--no-prepared-statements` on the command line), ' +
      'or use PgBouncer ≥ 1.21 with `max_prepared_statements` set. See docs/pgbouncer.md',
    mapped,
    { cause },
  );
}

/** pg's query with a QueryConfig (a named prepared statement). */
interface NamedQuery {
  query(config: { name: string; text: string; values: unknown[] }): Promise<{ rows: unknown[] }>;
}

function leaseValues(lease: Lease): [string, string, number, string] {
  return [lease.id, lease.workerId, lease.attempt, lease.token];
}

/** One claim of one job: id and token (the token alone is unique per job, not across jobs). */
function leaseKey(lease: Lease): string {
  return `${lease.id}/${lease.token}`;
}

/** What a heartbeat learned about one lease. */
export interface LeaseRenewal {
  state: 'renewed' | 'busy' | 'lost';
  /** `queue.cancel(id)` was called while it ran (known only when renewed). */
  cancelRequested: boolean;
}
