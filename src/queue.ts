import pg from 'pg';
import { computeBackoff, DEFAULT_BACKOFF_BASE_MS, DEFAULT_BACKOFF_CAP_MS } from './core/backoff.js';
import { Batcher, type Settled } from './core/batcher.js';
import { errorText } from './core/error-text.js';
import { enqueueOptions, type NewJob, toNewJob, toNewJobs } from './core/job-spec.js';
import {
  optionalNameList,
  optionsObject,
  rejectUnknownKeys,
  requireInt,
  requireJobId,
  requireLease,
  requireMs,
  requireName,
  requireStatus,
  toJsonText,
} from './core/validate.js';
import { isConnectionError } from './db/database-error.js';
import { type Executor, inTransaction, isExecutor, type PoolExecutor } from './db/executor.js';
import { requireSchemaName } from './db/identifier.js';
import { endClient } from './db/listener.js';
import { ManagedPool } from './db/managed-pool.js';
import { fromReadReplica } from './db/replica-error.js';
import {
  ConflictError,
  DatabaseError,
  DedupeConflictError,
  NotFoundError,
  QueueClosedError,
  ValidationError,
} from './errors.js';
import { type MigrateResult, migrate } from './migrations/migrate.js';
import { JobStore, type LeaseRenewal } from './store/job-store.js';
import type {
  BackoffOptions,
  CancelOutcome,
  ClaimedJob,
  ClaimOptions,
  EnqueueCallOptions,
  EnqueueOptions,
  EnqueueResult,
  Job,
  JobPage,
  JobSpec,
  JobStatus,
  Lease,
  ListOptions,
  Logger,
  OpsSnapshot,
  PruneOptions,
  Queryable,
  RequeueOutcome,
} from './types.js';

/** Options of {@link Queue}. */
export interface QueueOptions {
  /** PostgreSQL URL. Defaults to `process.env.DATABASE_URL` when neither this nor `pool` is given. */
  connectionString?: string;
  /** Your own pool (Skiplock then never ends it). */
  pool?: pg.Pool;
  /** Schema holding Skiplock's tables (default `skiplock`). Any name works; it is always quoted. */
  schema?: string;
  /**
   * Optional streaming replica for the observability reads: `get`, `list`, `counts`, `ops`,
   * `liveByQueue`, `throughput`. Every write, claim and `findActive` stays on the primary. The
   * replica lags (`ops().replicaLagMs`): a job just enqueued may not be there yet. Its pool has
   * the same timeouts as the primary's; its errors begin "Read replica (readConnectionString)".
   */
  readConnectionString?: string;
  /** Retry delays of `fail()`: base, cap and jitter of {@link computeBackoff}. */
  backoff?: BackoffOptions;
  /** Default lease of `claim` and `renewLease`, in ms (default 120 000). */
  leaseMs?: number;
  /** A running job older than this counts as stuck in `ops()` (default 10 min). */
  stuckAfterMs?: number;
  /** Size of the pool Skiplock creates from `connectionString` (default 10). */
  poolSize?: number;
  /** Receives warnings such as a pooled connection that died. Nothing is printed without one. */
  logger?: Logger;
  /**
   * Automatic batching of concurrent `enqueue` calls made without `client` (default on): calls
   * that arrive together share one INSERT and one commit, each caller still getting its own
   * id/created and its own error, and every call is durable when it resolves. `false` turns it
   * off; `{ maxBatch, maxConcurrent }` tunes it (default 1,000 jobs, 2 batches in flight).
   */
  batchEnqueue?: boolean | { maxBatch?: number; maxConcurrent?: number };
  /**
   * Run statements on the pool as named prepared statements (default true). Turn off behind a
   * transaction-pooling proxy (PgBouncer in transaction mode) that does not support them; left
   * on there, a call fails with a DatabaseError (42P05/26000) that says so. See docs/pgbouncer.md.
   */
  preparedStatements?: boolean;
  /**
   * Longest run of any one statement on Skiplock's pools, in ms (default 30 000). The server
   * cancels a statement that runs longer (`statement_timeout`: rolled back, so a failed call did
   * not happen), and the client gives up a second later whatever the network does, discarding
   * the connection — so a silent network (a partition) can never hang a caller, a worker or
   * `close()` (then the statement's fate is unknown, as with any lost connection). It also
   * bounds the statements you run on the client of `queue.transaction` and `ctx.transaction`.
   * With `preparedStatements: false` (a pooler refuses startup parameters) only the client-side
   * bound applies. Migrations run without it. Does not apply to a `pool` you pass in.
   */
  statementTimeoutMs?: number;
  /** Longest wait for a new connection, in ms (default 10 000). Does not apply to a `pool` you pass in. */
  connectTimeoutMs?: number;
  /**
   * What becomes of finished jobs (SPEC §7). `completed: 'delete'` removes a job in the very
   * statement that completes it (`complete`, `completeMany`, a worker's completions and
   * ctx.transaction): no `done` row is kept and its result is discarded, `get(id)` then returns
   * null, and `counts().done` / `ops().done` count it from a maintained counter — the fastest
   * way to run a queue, and graphile-worker's own semantics. Failed jobs are kept either way.
   * `keepFinishedMs`: the workers of this queue delete finished jobs (done, dead, cancelled)
   * last updated longer ago than this, in batches of 1,000 that skip locked rows, at least once
   * a minute. Default `{ completed: 'keep' }` and no pruning (`queue.prune()` by hand).
   */
  retention?: { completed?: 'keep' | 'delete'; keepFinishedMs?: number };
}

/** The retention settings of a Queue, validated. */
export interface Retention {
  completed: 'keep' | 'delete';
  keepFinishedMs: number | null;
}

const QUEUE_OPTION_KEYS = [
  'connectionString',
  'pool',
  'schema',
  'readConnectionString',
  'backoff',
  'leaseMs',
  'stuckAfterMs',
  'poolSize',
  'logger',
  'batchEnqueue',
  'preparedStatements',
  'statementTimeoutMs',
  'connectTimeoutMs',
  'retention',
];
const CLAIM_KEYS = ['limit', 'leaseMs', 'queues', 'tasks'];
const LIST_KEYS = ['status', 'task', 'queue', 'limit', 'after'];
const PRUNE_KEYS = ['olderThanMs', 'statuses'];
const FINISHED = ['done', 'dead', 'cancelled'] as const;
/** A dedupe hit whose holder finishes between the insert and the lookup retries the insert. */
const MAX_DEDUPE_ROUNDS = 10;
/** Most jobs one claim may take. */
export const MAX_CLAIM_LIMIT = 10_000;
const PRUNE_BATCH = 5_000;
/** Default bound of one statement on Skiplock's own pools. */
export const DEFAULT_STATEMENT_TIMEOUT_MS = 30_000;
/** Default bound of opening one connection. */
export const DEFAULT_CONNECT_TIMEOUT_MS = 10_000;
const REQUEUE_BATCH = 1_000;

/** What the Worker reaches inside a Queue besides its public API (not exported from the package). */
export interface QueueInternals {
  store: JobStore;
  pool: PoolExecutor;
  retention: Retention;
}

const internals = new WeakMap<Queue, QueueInternals>();

/** The store and pool of `queue`, for the Worker's ctx.transaction. */
export function queueInternals(queue: Queue): QueueInternals {
  const found = internals.get(queue);
  if (!found) throw new Error('not a skiplock Queue');
  if (queue.isClosed) throw new QueueClosedError();
  return found;
}

/**
 * A Skiplock queue on one PostgreSQL schema: enqueue, claim, and every transition of a job's
 * life, each one statement that keeps the invariants of SPEC §1.
 *
 * @example
 * const queue = new Queue({ connectionString: process.env.DATABASE_URL });
 * await queue.migrate();
 * const { id } = await queue.enqueue('email.send', { to: 'a@example.com' }, { dedupeKey: 'welcome:42' });
 * const [job] = await queue.claim('worker-1', { tasks: ['email.send'] });
 * if (job) await queue.complete(job, { sent: true });
 */
export class Queue {
  /** The schema holding this queue's tables. */
  readonly schema: string;
  private readonly retention: Retention;
  private readonly store: JobStore;
  private readonly pool: ManagedPool;
  private readonly readPool: ManagedPool | null;
  private readonly ownsPool: boolean;
  private readonly backoff: Required<BackoffOptions>;
  private readonly leaseMs: number;
  private readonly stuckAfterMs: number;
  private readonly logger: Logger | undefined;
  private readonly clientConfig: pg.ClientConfig;
  /** Timeouts of the pools Skiplock creates (SPEC §3: every statement has a timeout). */
  private readonly timeouts: { statementMs: number; connectMs: number };
  /**
   * `preparedStatements: false`: behind a connection pooler (PgBouncer), which also refuses
   * startup parameters such as `statement_timeout`, so the server-side bound is left out.
   */
  private readonly poolerMode: boolean;
  private readonly enqueueBatcher: Batcher<NewJob, EnqueueResult> | null;
  private hinting: Promise<void> | null = null;
  private hintAgain = false;
  private closed = false;
  /** Warned once that readConnectionString is not a replica (§7: a misconfiguration is said). */
  private warnedNotReplica = false;

  constructor(options: QueueOptions = {}) {
    const opts = optionsObject(options, 'options');
    rejectUnknownKeys(opts, QUEUE_OPTION_KEYS, 'options');
    this.schema = requireSchemaName(opts.schema ?? 'skiplock');
    this.retention = retentionSettings(opts.retention);
    this.store = new JobStore(this.schema, { deleteCompleted: this.retention.completed === 'delete' });
    this.logger = opts.logger;
    const backoff = optionsObject(opts.backoff, 'backoff');
    this.backoff = {
      baseMs:
        backoff.baseMs === undefined ? DEFAULT_BACKOFF_BASE_MS : requireMs(backoff.baseMs, 'backoff.baseMs'),
      capMs: backoff.capMs === undefined ? DEFAULT_BACKOFF_CAP_MS : requireMs(backoff.capMs, 'backoff.capMs'),
      jitter: backoff.jitter ?? 'none',
    };
    computeBackoff(1, this.backoff.baseMs, this.backoff.capMs, this.backoff.jitter); // validates jitter
    this.leaseMs = opts.leaseMs === undefined ? 120_000 : requireInt(opts.leaseMs, 'leaseMs', 1);
    this.stuckAfterMs =
      opts.stuckAfterMs === undefined ? 600_000 : requireInt(opts.stuckAfterMs, 'stuckAfterMs', 1);

    if (opts.preparedStatements !== undefined && typeof opts.preparedStatements !== 'boolean') {
      throw new ValidationError('preparedStatements', 'must be true or false');
    }
    this.poolerMode = opts.preparedStatements === false;
    this.timeouts = {
      statementMs:
        opts.statementTimeoutMs === undefined
          ? DEFAULT_STATEMENT_TIMEOUT_MS
          : requireInt(opts.statementTimeoutMs, 'statementTimeoutMs', 1),
      connectMs:
        opts.connectTimeoutMs === undefined
          ? DEFAULT_CONNECT_TIMEOUT_MS
          : requireInt(opts.connectTimeoutMs, 'connectTimeoutMs', 1),
    };
    if (opts.pool !== undefined) {
      if (!isExecutor(opts.pool) || typeof (opts.pool as { connect?: unknown }).connect !== 'function') {
        throw new ValidationError('pool', 'must be a pg.Pool (an object with query() and connect())');
      }
      this.pool = new ManagedPool(opts.pool as pg.Pool, false);
      this.ownsPool = false;
      this.clientConfig = { ...((opts.pool as unknown as { options?: pg.ClientConfig }).options ?? {}) };
    } else {
      const connectionString = opts.connectionString ?? process.env.DATABASE_URL;
      if (!connectionString) {
        throw new ValidationError(
          'connectionString',
          'give connectionString or pool (or set DATABASE_URL), e.g. postgres://user@localhost:5432/db',
        );
      }
      this.pool = this.createPool(requireName(connectionString, 'connectionString'), opts.poolSize);
      this.ownsPool = true;
      this.clientConfig = { connectionString, connectionTimeoutMillis: this.timeouts.connectMs };
    }
    this.readPool = opts.readConnectionString
      ? this.createPool(requireName(opts.readConnectionString, 'readConnectionString'), opts.poolSize)
      : null;
    if (!this.ownsPool) this.watchPool(opts.pool as pg.Pool);
    this.enqueueBatcher = this.createEnqueueBatcher(opts.batchEnqueue);
    if (!this.poolerMode) this.store.prepareOn(this.pool);
    internals.set(this, { store: this.store, pool: this.pool, retention: this.retention });
  }

  /** True after `close()`. */
  get isClosed(): boolean {
    return this.closed;
  }

  private createEnqueueBatcher(setting: QueueOptions['batchEnqueue']): Batcher<NewJob, EnqueueResult> | null {
    if (setting === false) return null;
    if (setting !== undefined && setting !== true && (typeof setting !== 'object' || setting === null)) {
      throw new ValidationError('batchEnqueue', 'must be true, false or { maxBatch, maxConcurrent }');
    }
    const tuning = typeof setting === 'object' ? setting : {};
    rejectUnknownKeys(tuning, ['maxBatch', 'maxConcurrent'], 'batchEnqueue');
    return new Batcher((jobs) => this.flushEnqueues(jobs), {
      maxBatch:
        tuning.maxBatch === undefined
          ? 1_000
          : requireInt(tuning.maxBatch, 'batchEnqueue.maxBatch', 1, 10_000),
      maxConcurrent:
        tuning.maxConcurrent === undefined
          ? 2
          : requireInt(tuning.maxConcurrent, 'batchEnqueue.maxConcurrent', 1, 100),
    });
  }

  /**
   * Creates or upgrades this queue's schema (safe from many processes at once; SPEC §2). On the
   * pool Skiplock made, migrations run on a connection of their own without the statement
   * timeout (building an index on a large table may take longer).
   */
  async migrate(): Promise<MigrateResult> {
    this.assertOpen();
    if (!this.ownsPool) return migrate(this.pool, this.schema);
    const client = new pg.Client({ ...this.clientConfig, application_name: 'skiplock-migrate' });
    client.on('error', () => undefined); // a dead connection fails the statement in flight
    await client.connect();
    try {
      return await migrate(
        {
          query: (text, values) => client.query(text, values),
          connect: async () => ({
            query: (text, values) => client.query(text, values),
            release: () => undefined,
          }),
        },
        this.schema,
      );
    } finally {
      await endClient(client);
    }
  }

  /**
   * Adds one job. Returns `{ id, created: true }`, or on a dedupe hit `{ id, created: false }`
   * with the id of the active job that holds the key (SPEC §1.7). With `client`, the job joins
   * the caller's open transaction and exists only if it commits (SPEC §1.6).
   */
  async enqueue(
    task: string,
    payload?: unknown,
    options?: EnqueueOptions & EnqueueCallOptions,
  ): Promise<EnqueueResult> {
    this.assertOpen();
    const { client, ...jobOptions } = enqueueOptions(options);
    const job = toNewJob(task, payload, jobOptions);
    if (client === undefined && this.enqueueBatcher) return this.enqueueBatcher.add(job);
    return this.insertOne(this.writer(client), job);
  }

  /** One INSERT with its NOTIFY in the same transaction; a dedupe hit reads the holder (§1.7). */
  private async insertOne(db: Executor, job: NewJob): Promise<EnqueueResult> {
    for (let round = 0; round < MAX_DEDUPE_ROUNDS; round++) {
      const id = await this.store.insertOne(db, job);
      if (id !== null) return { id, created: true };
      // A dedupe hit: look the holder up in a new statement, whose snapshot sees it (§1.7).
      const holders = await this.store.activeIdsByKey(db, [job.dedupeKey as string]);
      const holder = holders.get(job.dedupeKey as string);
      if (holder !== undefined) return { id: holder, created: false };
    }
    throw dedupeRace(job.dedupeKey);
  }

  /**
   * Adds many jobs in one INSERT and one NOTIFY. Results are in input order. One invalid spec
   * rejects the whole batch with nothing written. A dedupe key repeated in the batch yields
   * `created: false` with the first entry's id.
   */
  async enqueueMany(specs: readonly JobSpec[], options?: EnqueueCallOptions): Promise<EnqueueResult[]> {
    this.assertOpen();
    const opts = optionsObject(options, 'options');
    rejectUnknownKeys(opts, ['client'], 'options');
    const jobs = toNewJobs(specs);
    if (jobs.length === 0) return [];
    if (opts.client !== undefined)
      return settledOrThrow(await this.insertBatch(this.writer(opts.client), jobs, true));
    // One statement is atomic; a batch with dedupe keys may need follow-up statements (holder
    // lookups, a second INSERT), so it runs in a transaction of its own: all rows or none.
    if (jobs.every((job) => job.dedupeKey === null)) {
      return settledOrThrow(await this.insertBatch(this.pool, jobs, true));
    }
    return inTransaction(this.pool, async (db) => settledOrThrow(await this.insertBatch(db, jobs, true)));
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
    const results: Settled<EnqueueResult>[] = new Array(jobs.length);
    let todo = jobs.map((job, index) => ({ job, index }));
    for (let round = 0; todo.length > 0; round++) {
      try {
        if (round === MAX_DEDUPE_ROUNDS) throw dedupeRace(todo[0]?.job.dedupeKey ?? null);
        const inserted = await this.store.insertMany(
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
        const holders = await this.store.activeIdsByKey(
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
   * that arrived together, then one coalesced NOTIFY after the commit (§1.9: a hint, kept off
   * the commit path). Each caller settles with its own job's fate (SPEC §3). If the INSERT
   * itself fails for a reason other than the connection (nothing was written), each job is
   * retried alone so that each caller gets its own outcome.
   */
  private async flushEnqueues(jobs: NewJob[]): Promise<Settled<EnqueueResult>[]> {
    try {
      const results = await this.insertBatch(this.pool, jobs, false);
      if (results.some((r) => r.ok && r.value.created)) this.hint();
      return results;
    } catch (error) {
      if (jobs.length === 1 || isConnectionError(error)) throw error;
      return Promise.all(
        jobs.map((job) =>
          this.insertOne(this.pool, job).then(
            (value): Settled<EnqueueResult> => ({ ok: true, value }),
            (err: unknown): Settled<EnqueueResult> => ({ ok: false, error: err }),
          ),
        ),
      );
    }
  }

  /** Sends the wake-up hint after a batch committed; hints that meet one in flight coalesce. */
  private hint(): void {
    if (this.hinting !== null) {
      this.hintAgain = true;
      return;
    }
    this.hinting = this.store
      .notify(this.pool, 'jobs')
      .catch((error: unknown) => {
        this.logger?.warn?.(
          { err: error, schema: this.schema },
          'skiplock: sending the wake-up NOTIFY failed',
        );
      })
      .finally(() => {
        this.hinting = null;
        if (this.hintAgain) {
          this.hintAgain = false;
          this.hint();
        }
      });
  }

  /**
   * Claims up to `limit` due jobs for `workerId` in one statement (SPEC §1.1), in claim order
   * (priority, run_after, id). Each returned job carries its lease.
   */
  async claim(workerId: string, options?: ClaimOptions): Promise<ClaimedJob[]> {
    this.assertOpen();
    const opts = optionsObject(options, 'options');
    rejectUnknownKeys(opts, CLAIM_KEYS, 'options');
    const jobs = await this.store.claim(
      this.pool,
      requireName(workerId, 'workerId'),
      opts.limit === undefined ? 1 : requireInt(opts.limit, 'limit', 1, MAX_CLAIM_LIMIT),
      opts.leaseMs === undefined ? this.leaseMs : requireInt(opts.leaseMs, 'leaseMs', 1),
      optionalNameList(opts.tasks, 'tasks'),
      optionalNameList(opts.queues, 'queues'),
    );
    return jobs;
  }

  /**
   * running → done with `result`. `false` when the lease no longer owns the job (SPEC §1.3).
   * With `client` (inside your open transaction) the completion commits or rolls back with your
   * own writes: side effects in the database then happen exactly once.
   */
  async complete(lease: Lease, result?: unknown, options?: { client?: Queryable }): Promise<boolean> {
    this.assertOpen();
    const owner = requireLease(lease);
    const resultJson = toJsonText(result, 'result');
    const opts = optionsObject(options, 'options');
    rejectUnknownKeys(opts, ['client'], 'options');
    return this.store.complete(this.writer(opts.client), owner, resultJson);
  }

  /**
   * Completes many jobs in one statement, each guarded by its own lease (SPEC §1.3). Returns, in
   * input order, whether each one completed (`false`: that lease no longer owns its job).
   */
  async completeMany(items: readonly { lease: Lease; result?: unknown }[]): Promise<boolean[]> {
    this.assertOpen();
    if (!Array.isArray(items)) throw new ValidationError('items', 'must be an array of { lease, result }');
    const checked = items.map((item, i) => ({
      lease: requireLease(item?.lease, `items[${i}].lease`),
      resultJson: toJsonText(item?.result, `items[${i}].result`),
    }));
    if (checked.length === 0) return [];
    return this.store.completeMany(this.pool, checked);
  }

  /**
   * Records a failed attempt: back to `pending` after the backoff (or `retryInMs`), or `dead`
   * when attempts are spent — or `cancelled` when `cancel(id)` was called while it ran. `null`
   * when the lease no longer owns the job (SPEC §1.3).
   */
  async fail(
    lease: Lease,
    error: unknown,
    options?: { retryInMs?: number },
  ): Promise<'pending' | 'dead' | 'cancelled' | null> {
    this.assertOpen();
    const owner = requireLease(lease);
    const opts = optionsObject(options, 'options');
    rejectUnknownKeys(opts, ['retryInMs'], 'options');
    const retryInMs =
      opts.retryInMs === undefined ? this.retryDelay(owner.attempt) : requireMs(opts.retryInMs, 'retryInMs');
    return this.store.fail(this.pool, owner, errorText(error), retryInMs);
  }

  /** The retry delay `fail()` uses after attempt number `attempt`, with this queue's backoff settings. */
  retryDelay(attempt: number): number {
    return computeBackoff(attempt, this.backoff.baseMs, this.backoff.capMs, this.backoff.jitter);
  }

  /** Extends the lease to now + `leaseMs` (database time). `false` when no longer the owner. */
  async renewLease(lease: Lease, leaseMs?: number): Promise<boolean> {
    this.assertOpen();
    const ms = leaseMs === undefined ? this.leaseMs : requireInt(leaseMs, 'leaseMs', 1);
    return this.store.renewLease(this.pool, requireLease(lease), ms);
  }

  /** running → pending without spending the attempt (for shutdown). `false` when not the owner. */
  async release(lease: Lease): Promise<boolean> {
    this.assertOpen();
    return this.store.release(this.pool, requireLease(lease));
  }

  /**
   * Renews, in one statement, the leases of `workerId`'s running jobs (the worker's heartbeat).
   * Answers per lease, in input order: `renewed` (with whether its cancellation was requested),
   * `busy` (still owned, but its row is locked by another transaction, so it was skipped rather
   * than waited for) or `lost`.
   */
  async renewLeases(workerId: string, leases: readonly Lease[], leaseMs?: number): Promise<LeaseRenewal[]> {
    this.assertOpen();
    const owner = requireName(workerId, 'workerId');
    const checked = leases.map((lease, i) => requireLease(lease, `leases[${i}]`));
    const ms = leaseMs === undefined ? this.leaseMs : requireInt(leaseMs, 'leaseMs', 1);
    return this.store.renewLeases(this.pool, owner, checked, ms);
  }

  /**
   * running → cancelled, for the owner of a job whose cancellation was requested (`cancel(id)`),
   * once its handler has been aborted. `false` when not the owner or no cancel was requested.
   */
  async completeCancellation(
    lease: Lease,
    note = 'Cancelled: cancellation was requested while it ran',
  ): Promise<boolean> {
    this.assertOpen();
    return this.store.cancelRunning(this.pool, requireLease(lease), note);
  }

  /** Milliseconds (database time) until the next pending job of these tasks/queues is due; null if none waits. */
  async nextDueInMs(
    filter: { tasks?: readonly string[]; queues?: readonly string[] } = {},
  ): Promise<number | null> {
    this.assertOpen();
    return this.store.nextDueInMs(
      this.pool,
      optionalNameList(filter.tasks, 'tasks'),
      optionalNameList(filter.queues, 'queues'),
    );
  }

  /**
   * Runs `fn` inside one transaction on a pooled connection: BEGIN, then COMMIT, or ROLLBACK
   * if it throws. Pass the client to `enqueue`/`complete` to make them part of it.
   *
   * @example
   * await queue.transaction(async (client) => {
   *   await client.query('UPDATE accounts SET paid = true WHERE id = $1', [accountId]);
   *   await queue.enqueue('receipt.send', { accountId }, { client });
   * });
   */
  async transaction<T>(fn: (client: pg.PoolClient) => Promise<T>): Promise<T> {
    this.assertOpen();
    return inTransaction(this.pool, (session) => fn(session as pg.PoolClient));
  }

  /**
   * Sends `payload` on this schema's channel. Workers treat `jobs` as "new jobs may be waiting"
   * and ignore what they do not know; a worker uses it to check that its LISTEN receives.
   */
  async notify(payload = 'jobs'): Promise<void> {
    this.assertOpen();
    await this.store.notify(this.pool, requireName(payload, 'payload'));
  }

  /** The NOTIFY channel of this queue's schema (workers LISTEN on it). */
  get channel(): string {
    return this.store.channel;
  }

  /** Connection settings for a dedicated connection (the worker's LISTEN) to the same database. */
  connectionConfig(): pg.ClientConfig {
    return this.clientConfig;
  }

  /** Reclaims running jobs whose lease expired (SPEC §1.5); returns their ids. Safe to run anywhere. */
  async reap(): Promise<string[]> {
    this.assertOpen();
    return this.store.reap(this.pool);
  }

  /** One job, or `null` when no job has this id. A malformed id throws a ValidationError. */
  async get(id: string): Promise<Job | null> {
    this.assertOpen();
    const jobId = requireJobId(id);
    return this.read((db) => this.store.get(db, jobId));
  }

  /** The active (pending or running) job holding `dedupeKey`, or `null`. */
  async findActive(dedupeKey: string): Promise<Job | null> {
    this.assertOpen();
    return this.store.findActive(this.pool, requireName(dedupeKey, 'dedupeKey'));
  }

  /** Jobs newest first, filtered; page with `after: lastJob.id`. */
  async list(options?: ListOptions): Promise<Job[]> {
    this.assertOpen();
    const opts = optionsObject(options, 'options');
    rejectUnknownKeys(opts, LIST_KEYS, 'options');
    const filter = {
      status: opts.status === undefined ? null : requireStatus(opts.status, 'status'),
      task: opts.task === undefined ? null : requireName(opts.task, 'task'),
      queue: opts.queue === undefined ? null : requireName(opts.queue, 'queue'),
      after: opts.after === undefined ? null : requireJobId(opts.after, 'after'),
    };
    const limit = opts.limit === undefined ? 50 : requireInt(opts.limit, 'limit', 1, 1000);
    return this.read((db) => this.store.list(db, filter, limit));
  }

  /**
   * One bounded page of jobs, newest first: unlike {@link Queue.list}, no filter makes it read
   * the whole table. It examines at most 10,000 rows below the cursor by id (a pending, running,
   * dead or cancelled filter reads that status's own rows instead while it has no more than
   * 10,000), so a filter that matches nothing recent returns fewer jobs than `limit` with
   * `next` set to where it stopped looking: pass it as `after` to look further back.
   *
   * @example
   * let page = await queue.listPage({ status: 'done', task: 'email.send' });
   * while (page.next) page = await queue.listPage({ status: 'done', task: 'email.send', after: page.next });
   */
  async listPage(options?: ListOptions): Promise<JobPage> {
    this.assertOpen();
    const opts = optionsObject(options, 'options');
    rejectUnknownKeys(opts, LIST_KEYS, 'options');
    const limit = opts.limit === undefined ? 50 : requireInt(opts.limit, 'limit', 1, 1000);
    const { jobs, scannedTo } = await this.read((db) =>
      this.store.listPage(
        db,
        {
          status: opts.status === undefined ? null : requireStatus(opts.status, 'status'),
          task: opts.task === undefined ? null : requireName(opts.task, 'task'),
          queue: opts.queue === undefined ? null : requireName(opts.queue, 'queue'),
          after: opts.after === undefined ? null : requireJobId(opts.after, 'after'),
        },
        limit,
      ),
    );
    return { jobs, next: jobs.length === limit ? (jobs.at(-1)?.id ?? null) : scannedTo };
  }

  /**
   * Jobs by status. Cheap on any table size (SPEC §7): finished statuses beyond 10,000 rows are
   * estimated from statistics (see `ops().estimated`).
   */
  async counts(): Promise<Record<JobStatus, number>> {
    this.assertOpen();
    return (await this.read((db) => this.store.counts(db))).counts;
  }

  /**
   * The operational snapshot of SPEC §3: counts, lag, dead and stuck jobs — and, with a read
   * replica, how far behind the primary it was (`replicaLagMs`), measured before the counts
   * are read there, so they are at least that fresh.
   */
  async ops(): Promise<OpsSnapshot> {
    this.assertOpen();
    const replicaLagMs = this.readPool === null ? null : await this.replicaLag();
    const [{ counts, estimated }, extras] = await this.read((db) =>
      Promise.all([this.store.counts(db), this.store.opsExtras(db, this.stuckAfterMs)]),
    );
    return { ...counts, ...extras, estimated, replicaLagMs };
  }

  /**
   * §7 the replica's lag behind the primary's WAL position at this call: the position is read
   * on the primary first, then the replica says whether it has replayed that far.
   */
  private async replicaLag(): Promise<number | null> {
    const primaryLsn = await this.store.walPosition(this.pool);
    const { inRecovery, lagMs } = await this.read((db) => this.store.replicaLag(db, primaryLsn));
    if (!inRecovery && !this.warnedNotReplica) {
      this.warnedNotReplica = true;
      this.logger?.warn?.(
        { schema: this.schema },
        'skiplock: readConnectionString points at a server that is not a replica (not in recovery); replicaLagMs reports 0 for it',
      );
    }
    return lagMs;
  }

  /** dead → pending with attempts reset (SPEC §1.8). `false` when the job is not dead or unknown. */
  async requeue(id: string): Promise<boolean> {
    this.assertOpen();
    return (await this.store.requeue(this.pool, requireJobId(id)))?.after === 'pending';
  }

  /**
   * Like {@link Queue.requeue}, but says why nothing happened: one statement on the primary locks
   * the row and requeues it only if it is dead, so the answer is never from a stale read.
   *
   * @throws {NotFoundError} no job has this id.
   * @throws {ConflictError} the job is not dead (`error.status` says what it is).
   * @throws {DedupeConflictError} another active job holds its dedupe key.
   * @example
   * await queue.requeueOrThrow('42'); // { id: '42', status: 'pending' }
   */
  async requeueOrThrow(id: string): Promise<RequeueOutcome> {
    this.assertOpen();
    const jobId = requireJobId(id);
    const transition = await this.store.requeue(this.pool, jobId);
    if (transition === null) throw new NotFoundError(`No job with id ${jobId}`);
    if (transition.after === null) {
      throw new ConflictError(
        jobId,
        transition.before,
        `Job ${jobId} is ${transition.before}: only dead jobs can be requeued`,
      );
    }
    return { id: jobId, status: 'pending' };
  }

  /**
   * Requeues every dead job (of one `task`, if given) in keyset batches of 1,000, each its own
   * short transaction. A dead job whose dedupe key is held by an active job again is skipped.
   * `onProgress` hears the running totals.
   */
  async requeueDead(
    options: { task?: string } = {},
    onProgress?: (progress: { requeued: number; skipped: number }) => void,
  ): Promise<{ requeued: number; skipped: number }> {
    this.assertOpen();
    const opts = optionsObject(options, 'options');
    rejectUnknownKeys(opts, ['task'], 'options');
    const task = opts.task === undefined ? null : requireName(opts.task, 'task');
    const totals = { requeued: 0, skipped: 0 };
    let after = '0';
    for (;;) {
      let batch: { requeued: number; lastId: string | null };
      try {
        batch = await this.store.requeueDeadBatch(this.pool, task, after, REQUEUE_BATCH);
      } catch (error) {
        if (!(error instanceof DatabaseError && error.sqlState === '23505')) throw error;
        batch = await this.requeueOneByOne(task, after, totals);
      }
      if (batch.lastId === null) return totals;
      totals.requeued += batch.requeued;
      onProgress?.({ ...totals });
      after = batch.lastId;
    }
  }

  /** Fallback of requeueDead for a batch holding a taken dedupe key: one job at a time. */
  private async requeueOneByOne(
    task: string | null,
    after: string,
    totals: { skipped: number },
  ): Promise<{ requeued: number; lastId: string | null }> {
    const ids = await this.store.deadIds(this.pool, task, after, REQUEUE_BATCH);
    let requeued = 0;
    for (const id of ids) {
      try {
        if ((await this.store.requeue(this.pool, id))?.after === 'pending') requeued++;
      } catch (error) {
        if (!(error instanceof DedupeConflictError)) throw error;
        totals.skipped++;
      }
    }
    return { requeued, lastId: ids.at(-1) ?? null };
  }

  /** Live (pending, running) jobs by queue: cheap, for metrics and dashboards. */
  async liveByQueue(): Promise<{ queue: string; status: 'pending' | 'running'; count: number }[]> {
    this.assertOpen();
    return this.read((db) => this.store.liveByQueue(db));
  }

  /**
   * Finished jobs per `bucketMs` bucket over the last `windowMs` (default: per minute over the
   * last hour), by status: throughput over time. Bucket starts are epoch milliseconds.
   */
  async throughput(
    options: { bucketMs?: number; windowMs?: number } = {},
  ): Promise<{ bucket: number; status: 'done' | 'dead' | 'cancelled'; count: number }[]> {
    this.assertOpen();
    const opts = optionsObject(options, 'options');
    rejectUnknownKeys(opts, ['bucketMs', 'windowMs'], 'options');
    const bucketMs = opts.bucketMs === undefined ? 60_000 : requireInt(opts.bucketMs, 'bucketMs', 1_000);
    const windowMs = opts.windowMs === undefined ? 3_600_000 : requireInt(opts.windowMs, 'windowMs', 1_000);
    return this.read((db) => this.store.finishedPerBucket(db, bucketMs, windowMs));
  }

  /**
   * Cancels a job: pending → cancelled at once; running → cancellation requested, and its worker
   * aborts it. `false` when the job is already finished or unknown.
   */
  async cancel(id: string): Promise<boolean> {
    this.assertOpen();
    return (await this.store.cancel(this.pool, requireJobId(id)))?.after != null;
  }

  /**
   * Like {@link Queue.cancel}, but says what happened: one statement on the primary locks the
   * row and decides on its current status, so `wasRunning` is never from a stale read.
   *
   * @returns `{ status: 'cancelled', wasRunning: false }` for a pending job; `{ status:
   *   'running', wasRunning: true }` for a running one (cancellation requested: its worker aborts it).
   * @throws {NotFoundError} no job has this id.
   * @throws {ConflictError} the job is already done, dead or cancelled (`error.status`).
   * @example
   * const { wasRunning } = await queue.cancelOrThrow('42');
   */
  async cancelOrThrow(id: string): Promise<CancelOutcome> {
    this.assertOpen();
    const jobId = requireJobId(id);
    const transition = await this.store.cancel(this.pool, jobId);
    if (transition === null) throw new NotFoundError(`No job with id ${jobId}`);
    if (transition.after !== 'cancelled' && transition.after !== 'running') {
      throw new ConflictError(
        jobId,
        transition.before,
        `Job ${jobId} is ${transition.before}: only pending or running jobs can be cancelled`,
      );
    }
    return { id: jobId, status: transition.after, wasRunning: transition.before === 'running' };
  }

  /**
   * Deletes finished jobs last updated more than `olderThanMs` ago, in batches of 5,000 (short
   * transactions). Returns how many were deleted. `onProgress` hears the running total.
   */
  async prune(options: PruneOptions, onProgress?: (deleted: number) => void): Promise<number> {
    this.assertOpen();
    const opts = optionsObject(options, 'options');
    rejectUnknownKeys(opts, PRUNE_KEYS, 'options');
    if (opts.olderThanMs === undefined) throw new ValidationError('olderThanMs', 'is required');
    const olderThanMs = requireMs(opts.olderThanMs, 'olderThanMs');
    const statuses =
      opts.statuses === undefined ? [...FINISHED] : (optionalNameList(opts.statuses, 'statuses') ?? []);
    statuses.forEach((status, i) => {
      if (!(FINISHED as readonly string[]).includes(status)) {
        throw new ValidationError(
          `statuses[${i}]`,
          `must be a finished status (done, dead, cancelled), got "${status}"`,
        );
      }
    });
    let total = 0;
    let after = '0';
    for (;;) {
      const { deleted, lastId } = await this.store.pruneBatch(
        this.pool,
        statuses,
        olderThanMs,
        after,
        PRUNE_BATCH,
      );
      total += deleted;
      if (deleted > 0) onProgress?.(total);
      if (lastId === null) return total;
      after = lastId;
    }
  }

  /**
   * Lets statements in flight finish (each is bounded by `statementTimeoutMs`), gives sessions
   * still held by transactions a few seconds, then ends the pools Skiplock created — also when
   * the server or the network went away under them. A pool passed in by you is left open.
   * Idempotent.
   */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.enqueueBatcher?.idle();
    await this.hinting;
    await Promise.all([this.pool.close(), this.readPool?.close()]);
  }

  private createPool(connectionString: string, poolSize: number | undefined) {
    const pool = new pg.Pool({
      connectionString,
      max: poolSize === undefined ? 10 : requireInt(poolSize, 'poolSize', 1, 1000),
      application_name: 'skiplock',
      // The server gives up on a statement first (statement_timeout: it is rolled back, so the
      // caller knows it did not happen); the client gives up a moment later whatever the network
      // does (query_timeout: a silent network never hangs a caller; the connection is then
      // destroyed, and the statement's fate is unknown). Behind a pooler only the client bound.
      ...(this.poolerMode ? {} : { statement_timeout: this.timeouts.statementMs }),
      query_timeout: this.timeouts.statementMs + Math.max(1_000, Math.round(this.timeouts.statementMs / 10)),
      connectionTimeoutMillis: this.timeouts.connectMs,
      keepAlive: true,
      keepAliveInitialDelayMillis: 10_000,
    });
    this.watchPool(pool);
    return new ManagedPool(pool, true);
  }

  /** A pooled connection killed while idle emits 'error' on the pool; unheard, it would crash the process. */
  private watchPool(pool: pg.Pool): void {
    pool.on('error', (error: Error) => {
      this.logger?.warn?.(
        { err: error, schema: this.schema },
        'skiplock: an idle database connection failed; the pool replaces it',
      );
    });
  }

  private writer(client: unknown): Executor {
    if (client === undefined) return this.pool;
    if (!isExecutor(client)) {
      throw new ValidationError('client', 'must be a pg Client or PoolClient inside your open transaction');
    }
    return client;
  }

  /**
   * Runs an observability read on the read replica when there is one — its errors then say
   * they came from there (§7) — else on the primary.
   */
  private async read<T>(fn: (db: Executor) => Promise<T>): Promise<T> {
    if (this.readPool === null) return fn(this.pool);
    try {
      return await fn(this.readPool);
    } catch (error) {
      throw fromReadReplica(error);
    }
  }

  private assertOpen(): void {
    if (this.closed) throw new QueueClosedError();
  }
}

function retentionSettings(value: QueueOptions['retention']): Retention {
  const opts = optionsObject(value, 'retention');
  rejectUnknownKeys(opts, ['completed', 'keepFinishedMs'], 'retention');
  const completed = opts.completed ?? 'keep';
  if (completed !== 'keep' && completed !== 'delete') {
    throw new ValidationError(
      'retention.completed',
      `must be 'keep' or 'delete', got ${JSON.stringify(completed)}`,
    );
  }
  return {
    completed,
    keepFinishedMs:
      opts.keepFinishedMs === undefined
        ? null
        : requireInt(opts.keepFinishedMs, 'retention.keepFinishedMs', 1),
  };
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
