/**
 * The engine behind a Queue (internal; not exported from the package): it owns the database
 * handles (the primary's pool, the read replica's, dedicated connections), the statements (the
 * store), the settings, and the three parts that write — the enqueuer, the completer and the
 * bulk operations. `Queue` is a façade that validates its arguments and calls in here; the
 * Worker reaches the database only through the engine of its queue (`engineOf(queue)`).
 *
 *   Queue ─┐                 ┌─ Enqueuer   (enqueue batching, dedupe rounds, the wake-up hint)
 *          ├─▶ Engine ───────┼─ Completer  (every outcome: done, retry, dead, cancelled, released)
 *   Worker ┘   (pools, store) └─ bulk ops   (requeueDead, prune: keyset batches)
 */
import pg from 'pg';
import { computeBackoff } from '../core/backoff.js';
import { requireInt, requireName } from '../core/validate.js';
import { type Executor, isExecutor } from '../db/executor.js';
import { endClient } from '../db/listener.js';
import { ManagedPool } from '../db/managed-pool.js';
import { fromReadReplica } from '../db/replica-error.js';
import { QueueClosedError, ValidationError } from '../errors.js';
import { type MigrateResult, migrate } from '../migrations/migrate.js';
import { JobStore, type LeaseRenewal } from '../store/job-store.js';
import { type Tracing, tracing } from '../telemetry/tracing.js';
import type { ClaimedJob, Job, Lease } from '../types.js';
import { Completer } from './completer.js';
import { Enqueuer } from './enqueuer.js';
import { Flows } from './flows.js';
import { LimitedQueues } from './queues.js';
import { type EngineSettings, engineSettings, type QueueOptions } from './settings.js';
import { FinishWaiter } from './waiter.js';

export class Engine {
  readonly settings: EngineSettings;
  readonly store: JobStore;
  readonly pool: ManagedPool;
  readonly readPool: ManagedPool | null;
  readonly enqueuer: Enqueuer;
  readonly completer: Completer;
  readonly flows: Flows;
  /** The limited queues as this process last read them (the worker's limited claims). */
  readonly limits: LimitedQueues;
  /** §9 OpenTelemetry spans, or null with `telemetry: false`. */
  readonly tracing: Tracing | null;
  private readonly ownsPool: boolean;
  /** Settings for a dedicated connection (migrations, the worker's LISTEN) to the same database. */
  readonly clientConfig: pg.ClientConfig;
  private closed = false;
  /** Warned once that readConnectionString is not a replica (§7: a misconfiguration is said). */
  private warnedNotReplica = false;

  constructor(opts: QueueOptions) {
    this.settings = engineSettings(opts);
    const { schema, retention, timeouts } = this.settings;
    this.store = new JobStore(schema, { deleteCompleted: retention.completed === 'delete' });
    // Every option is checked before anything is created: a bad one leaves no pool or listener behind.
    const poolSize = opts.poolSize === undefined ? 10 : requireInt(opts.poolSize, 'poolSize', 1, 1000);
    const readConnectionString =
      opts.readConnectionString === undefined
        ? null
        : requireName(opts.readConnectionString, 'readConnectionString');
    if (opts.pool !== undefined) {
      if (!isExecutor(opts.pool) || typeof (opts.pool as { connect?: unknown }).connect !== 'function') {
        throw new ValidationError('pool', 'must be a pg.Pool (an object with query() and connect())');
      }
      this.ownsPool = false;
      this.clientConfig = { ...((opts.pool as unknown as { options?: pg.ClientConfig }).options ?? {}) };
      this.watchPool(opts.pool);
      this.pool = new ManagedPool(opts.pool, false);
    } else {
      const connectionString = opts.connectionString ?? process.env.DATABASE_URL;
      if (!connectionString) {
        throw new ValidationError(
          'connectionString',
          'give connectionString or pool (or set DATABASE_URL), e.g. postgres://user@localhost:5432/db',
        );
      }
      requireName(connectionString, 'connectionString');
      this.ownsPool = true;
      this.clientConfig = { connectionString, connectionTimeoutMillis: timeouts.connectMs };
      this.pool = this.createPool(connectionString, poolSize);
    }
    this.readPool = readConnectionString === null ? null : this.createPool(readConnectionString, poolSize);
    if (!this.settings.poolerMode) this.store.prepareOn(this.pool);
    this.tracing = this.settings.telemetry ? tracing() : null;
    this.enqueuer = new Enqueuer(this);
    this.completer = new Completer(this);
    this.flows = new Flows(this);
    this.limits = new LimitedQueues(this);
  }

  get schema(): string {
    return this.settings.schema;
  }

  /** The NOTIFY channel of this schema (workers LISTEN on it). */
  get channel(): string {
    return this.store.channel;
  }

  get isClosed(): boolean {
    return this.closed;
  }

  assertOpen(): void {
    if (this.closed) throw new QueueClosedError();
  }

  /** The retry delay after attempt `attempt`, with this queue's backoff settings. */
  retryDelay(attempt: number): number {
    const { baseMs, capMs, jitter } = this.settings.backoff;
    return computeBackoff(attempt, baseMs, capMs, jitter);
  }

  // The worker protocol: what a Worker asks of its queue's engine besides the completer.

  /** Claims up to `limit` jobs for `workerId` (SPEC §1.1). */
  async claim(
    workerId: string,
    limit: number,
    leaseMs: number,
    tasks: string[] | null,
    queues: string[] | null,
  ): Promise<ClaimedJob[]> {
    this.assertOpen();
    const jobs = await this.store.claim.claim(
      this.pool,
      workerId,
      limit,
      leaseMs,
      tasks,
      queues,
      this.lastGroups,
    );
    this.served(jobs);
    return jobs;
  }

  /**
   * §8 per queue, the group of the last grouped job this engine claimed there: the next claim's
   * round-robin in that queue starts after it, so that claims of one job at a time rotate
   * between groups too (one cursor per queue: another queue's groups must not move it).
   */
  readonly lastGroups = new Map<string, string>();

  /** Remembers where the round-robin between groups stopped in each queue (jobs in pick order). */
  served(jobs: readonly ClaimedJob[]): void {
    for (const job of jobs) if (job.group) this.lastGroups.set(job.queue, job.group);
  }

  /** The heartbeat: renews `workerId`'s leases in one statement; one answer per lease. */
  renewLeases(workerId: string, leases: readonly Lease[], leaseMs: number): Promise<LeaseRenewal[]> {
    this.assertOpen();
    return this.store.lease.renewLeases(this.pool, workerId, leases, leaseMs);
  }

  /**
   * Milliseconds (database time) until the next pending job of these tasks/queues is due; null if
   * none. Jobs that became due within the last `sinceMs` give 0 (see ClaimLoop.armDueTimer).
   */
  nextDueInMs(tasks: string[] | null, queues: string[] | null, sinceMs = 0): Promise<number | null> {
    this.assertOpen();
    return this.store.claim.nextDueInMs(this.pool, tasks, queues, sinceMs);
  }

  /** Reclaims running jobs whose lease expired (SPEC §1.5); returns their ids. */
  reap(): Promise<string[]> {
    this.assertOpen();
    return this.store.lease.reap(this.pool);
  }

  /** dead → pending (SPEC §1.8): the transition, or null for an unknown id. */
  requeue(id: string) {
    return this.store.admin.requeue(this.pool, id);
  }

  /** pending → cancelled, or a cancel request for a running job: the transition, or null. */
  cancel(id: string) {
    return this.store.admin.cancel(this.pool, id);
  }

  /** §9 queue.waitFor's machinery, made on the first wait. */
  private waiter: FinishWaiter | null = null;
  /** §9 waitFor's re-read intervals (set by tests before the first wait; undefined: the defaults). */
  waitTuning: { pollMs: number; safetyPollMs: number } | undefined;

  /** §9 waits for job `id` to be done, dead or cancelled (see FinishWaiter). */
  waitFor(id: string, timeoutMs: number | null, signal: AbortSignal | undefined): Promise<Job> {
    this.assertOpen();
    this.waiter ??= new FinishWaiter(this, this.settings.listen, this.waitTuning);
    return this.waiter.wait(id, timeoutMs, signal);
  }

  /** Logs a failure that is retried on its own (`what` says what failed and what happens next). */
  report(error: unknown, what: string): void {
    this.settings.logger?.warn?.({ err: error, schema: this.schema }, `skiplock: ${what}`);
  }

  /**
   * Sends a hint after a committed change (`what` names it in the log): a failure is logged,
   * never thrown — the change holds, and workers see it by their next poll.
   */
  async hint(payload: string, what: string): Promise<void> {
    try {
      await this.store.observe.notify(this.pool, payload);
    } catch (error) {
      this.settings.logger?.warn?.(
        { err: error, schema: this.schema },
        `skiplock: sending the ${what} hint failed`,
      );
    }
  }

  /** Sends `payload` on the schema's channel (a worker's LISTEN self-check). */
  notify(payload: string): Promise<void> {
    this.assertOpen();
    return this.store.observe.notify(this.pool, payload);
  }

  /** Deletes up to `limit` finished jobs past `retention.keepFinishedMs` (the pruner); returns how many. */
  pruneFinished(limit: number): Promise<number> {
    this.assertOpen();
    const { keepFinishedMs } = this.settings.retention;
    return keepFinishedMs === null
      ? Promise.resolve(0)
      : this.store.admin.pruneFinished(this.pool, keepFinishedMs, limit);
  }

  /**
   * Creates or upgrades the schema. On the pool Skiplock made, migrations run on a connection
   * of their own without the statement timeout (building an index on a large table may take
   * longer).
   */
  async migrate(): Promise<MigrateResult> {
    if (!this.ownsPool) return migrate(this.pool, this.schema);
    const client = new pg.Client({ ...this.clientConfig, application_name: 'skiplock-migrate' });
    client.on('error', () => undefined); // a dead connection fails the statement in flight
    await client.connect();
    try {
      const query = (text: string, values?: unknown[]) => client.query(text, values);
      return await migrate(
        { query, connect: async () => ({ query, release: () => undefined }) },
        this.schema,
      );
    } finally {
      await endClient(client);
    }
  }

  /** The caller's transaction client, or the pool. */
  writer(client: unknown): Executor {
    if (client === undefined) return this.pool;
    if (!isExecutor(client)) {
      throw new ValidationError(
        'client',
        "must be a pg Client or PoolClient inside your open transaction, or an ORM's transaction through skiplock/adapters (fromKysely(trx), fromDrizzle(tx), …)",
      );
    }
    return client;
  }

  /**
   * Runs an observability read on the read replica when there is one — its errors then say
   * they came from there (§7) — else on the primary.
   */
  async read<T>(fn: (db: Executor) => Promise<T>): Promise<T> {
    if (this.readPool === null) return fn(this.pool);
    try {
      return await fn(this.readPool);
    } catch (error) {
      throw fromReadReplica(error);
    }
  }

  /**
   * §7 the replica's lag behind the primary's WAL position at this call (null without a
   * replica): the position is read on the primary first, then the replica says whether it has
   * replayed that far.
   */
  async replicaLag(): Promise<number | null> {
    if (this.readPool === null) return null;
    const primaryLsn = await this.store.observe.walPosition(this.pool);
    const { inRecovery, lagMs } = await this.read((db) => this.store.observe.replicaLag(db, primaryLsn));
    if (!inRecovery && !this.warnedNotReplica) {
      this.warnedNotReplica = true;
      this.settings.logger?.warn?.(
        { schema: this.schema },
        'skiplock: readConnectionString points at a server that is not a replica (not in recovery); replicaLagMs reports 0 for it',
      );
    }
    return lagMs;
  }

  /**
   * Lets statements in flight finish, waits for enqueue batches and the wake-up hint, then ends
   * the pools Skiplock created. Idempotent.
   */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.waiter?.close(new QueueClosedError());
    await this.enqueuer.idle();
    await this.completer.idle();
    await Promise.all([this.pool.close(), this.readPool?.close()]);
  }

  private createPool(connectionString: string, max: number): ManagedPool {
    const { poolerMode, timeouts } = this.settings;
    const pool = new pg.Pool({
      connectionString,
      max,
      application_name: 'skiplock',
      // The server gives up on a statement first (statement_timeout: it is rolled back, so the
      // caller knows it did not happen); the client gives up a moment later whatever the network
      // does (query_timeout: a silent network never hangs a caller; the connection is then
      // destroyed, and the statement's fate is unknown). Behind a pooler only the client bound.
      ...(poolerMode ? {} : { statement_timeout: timeouts.statementMs }),
      query_timeout: timeouts.statementMs + Math.max(1_000, Math.round(timeouts.statementMs / 10)),
      connectionTimeoutMillis: timeouts.connectMs,
      keepAlive: true,
      keepAliveInitialDelayMillis: 10_000,
    });
    this.watchPool(pool);
    return new ManagedPool(pool, true);
  }

  /** A pooled connection killed while idle emits 'error' on the pool; unheard, it would crash the process. */
  private watchPool(pool: pg.Pool): void {
    pool.on('error', (error: Error) => {
      this.settings.logger?.warn?.(
        { err: error, schema: this.schema },
        'skiplock: an idle database connection failed; the pool replaces it',
      );
    });
  }
}

const engines = new WeakMap<object, Engine>();

/** Links a Queue to its engine (called once by the Queue's constructor). */
export function attachEngine(queue: object, engine: Engine): void {
  engines.set(queue, engine);
}

/** The engine of `queue`, for the Worker; with `mustBeOpen`, a QueueClosedError once it is closed. */
export function engineOf(queue: object, mustBeOpen = true): Engine {
  const engine = engines.get(queue);
  if (!engine) throw new Error('not a skiplock Queue');
  if (mustBeOpen) engine.assertOpen();
  return engine;
}
