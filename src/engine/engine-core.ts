/**
 * What every service of the engine is given (internal): the database handles — the primary's
 * pool, the read replica's, the settings for a dedicated connection — the statements (the
 * store), the settings and the tracer, with the small helpers they share: the open check, the
 * retry delay, the logged hint, the caller's transaction or the pool, a read on the replica.
 *
 * The services (enqueuer, completer, flows, the limited queues, the finish waiter) import this
 * class, never `Engine`, which builds them on top of it (engine.ts): the engine's files form no
 * import cycle.
 */
import pg from 'pg';
import { computeBackoff } from '../core/backoff.js';
import { requireInt, requireName } from '../core/validate.js';
import { atomically } from '../db/atomically.js';
import { type Executor, inTransaction, isExecutor } from '../db/executor.js';
import { endClient } from '../db/listener.js';
import { ManagedPool } from '../db/managed-pool.js';
import { fromReadReplica } from '../db/replica-error.js';
import { QueueClosedError, ValidationError } from '../errors.js';
import { type MigrateResult, migrate } from '../migrations/migrate.js';
import { JobStore } from '../store/job-store.js';
import { type Tracing, tracing } from '../telemetry/tracing.js';
import { catchUpLag } from './replica-lag.js';
import { type EngineSettings, engineSettings, type QueueOptions } from './settings.js';

export class EngineCore {
  readonly settings: EngineSettings;
  readonly store: JobStore;
  readonly pool: ManagedPool;
  readonly readPool: ManagedPool | null;
  /** §9 OpenTelemetry spans, or null with `telemetry: false`. */
  readonly tracing: Tracing | null;
  private readonly ownsPool: boolean;
  /** Settings for a dedicated connection (migrations, the worker's LISTEN) to the same database. */
  readonly clientConfig: pg.ClientConfig;
  protected closed = false;
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

  /** The caller's transaction client, checked; undefined without one (our pool, and batching). */
  callerWriter(client: unknown): Executor | undefined {
    return client === undefined ? undefined : this.writer(client);
  }

  /** Runs `fn` in one transaction on a session of the pool, rolled back if it throws (`queue.transaction`). */
  transaction<T>(fn: (session: Executor) => Promise<T>): Promise<T> {
    return inTransaction(this.pool, fn);
  }

  /**
   * Runs `fn` so that its statements hold their locks together until they are all done (see
   * db/atomically.ts): on our pool when `db` is undefined, else on the caller's pool or client.
   */
  atomically<T>(db: Executor | undefined, fn: (tx: Executor) => Promise<T>): Promise<T> {
    return atomically(db, this.pool, this.schema, fn);
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
   * replayed that far — if not, how long it takes to get there, waiting at most a second
   * (replica-lag.ts).
   */
  async replicaLag(): Promise<number | null> {
    if (this.readPool === null) return null;
    const startedAt = performance.now();
    const primaryLsn = await this.store.observe.walPosition(this.pool);
    const look = () => this.read((db) => this.store.observe.replicaLag(db, primaryLsn));
    const first = await look();
    if (!first.inRecovery && !this.warnedNotReplica) {
      this.warnedNotReplica = true;
      this.settings.logger?.warn?.(
        { schema: this.schema },
        'skiplock: readConnectionString points at a server that is not a replica (not in recovery); replicaLagMs reports 0 for it',
      );
    }
    return catchUpLag(first, look, startedAt);
  }

  /** Ends the pools Skiplock created (the pool a caller passed is theirs to end). */
  protected closePools(): Promise<unknown> {
    return Promise.all([this.pool.close(), this.readPool?.close()]);
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
