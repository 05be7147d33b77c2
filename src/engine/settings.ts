/**
 * The options of a Queue and their validation: everything the engine needs to know before it
 * opens a connection. A bad option throws a ValidationError with nothing created.
 */
import type pg from 'pg';
import { computeBackoff, DEFAULT_BACKOFF_BASE_MS, DEFAULT_BACKOFF_CAP_MS } from '../core/backoff.js';
import { optionsObject, rejectUnknownKeys, requireInt, requireMs } from '../core/validate.js';
import { requireSchemaName } from '../db/identifier.js';
import { ValidationError } from '../errors.js';
import type { BackoffOptions, Logger } from '../types.js';

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
   * `queue.waitFor` learns of completions over LISTEN on a dedicated connection, opened while a
   * wait is on (default true, false with `preparedStatements: false`). `false`: it re-reads the
   * job every 500 ms instead — behind PgBouncer in transaction mode, which cannot deliver
   * notifications.
   */
  listen?: boolean;
  /**
   * Longest run of any one statement on Skiplock's pools, in ms (default 30 000). The server
   * cancels a statement that runs longer (`statement_timeout`: rolled back, so a failed call did
   * not happen), and the client gives up max(1 s, 10 %) later whatever the network does (33 s
   * with the default), discarding the connection — so a silent network (a partition) can never hang a caller, a worker or
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
  /**
   * OpenTelemetry (SPEC §9, default true): with `@opentelemetry/api` installed and a tracer
   * provider registered, each enqueue call records a PRODUCER span and stores its trace context
   * with its jobs, and a Worker on this queue runs each attempt in a CONSUMER span linked to it.
   * `false`: no spans, and no trace context stored. Without the API (an optional peer
   * dependency) or a registered provider this costs nothing either way. See docs/integrations.md.
   */
  telemetry?: boolean;
}

/** The retention settings of a Queue, validated. */
export interface Retention {
  completed: 'keep' | 'delete';
  keepFinishedMs: number | null;
}

/** Default bound of one statement on Skiplock's own pools. */
export const DEFAULT_STATEMENT_TIMEOUT_MS = 30_000;
/** Default bound of opening one connection. */
export const DEFAULT_CONNECT_TIMEOUT_MS = 10_000;

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
  'listen',
  'statementTimeoutMs',
  'connectTimeoutMs',
  'retention',
  'telemetry',
];

/** A Queue's options after validation and defaults (connections are made by the engine). */
export interface EngineSettings {
  schema: string;
  retention: Retention;
  backoff: Required<BackoffOptions>;
  leaseMs: number;
  stuckAfterMs: number;
  logger: Logger | undefined;
  /**
   * `preparedStatements: false`: behind a connection pooler (PgBouncer), which also refuses
   * startup parameters such as `statement_timeout`, so the server-side bound is left out.
   */
  poolerMode: boolean;
  /** §9 waitFor listens for completion hints (else it polls). */
  listen: boolean;
  /** Timeouts of the pools Skiplock creates (SPEC §3: every statement has a timeout). */
  timeouts: { statementMs: number; connectMs: number };
  batchEnqueue: { maxBatch: number; maxConcurrent: number } | null;
  /** §9 OpenTelemetry spans on (the default) or off. */
  telemetry: boolean;
}

/** Validates a Queue's options (all but the connection ones, which the engine checks as it uses them). */
export function engineSettings(opts: QueueOptions): EngineSettings {
  rejectUnknownKeys(opts, QUEUE_OPTION_KEYS, 'options');
  const backoff = optionsObject(opts.backoff, 'backoff');
  const settings: EngineSettings = {
    schema: requireSchemaName(opts.schema ?? 'skiplock'),
    retention: retentionSettings(opts.retention),
    backoff: {
      baseMs:
        backoff.baseMs === undefined ? DEFAULT_BACKOFF_BASE_MS : requireMs(backoff.baseMs, 'backoff.baseMs'),
      capMs: backoff.capMs === undefined ? DEFAULT_BACKOFF_CAP_MS : requireMs(backoff.capMs, 'backoff.capMs'),
      jitter: backoff.jitter ?? 'none',
    },
    leaseMs: opts.leaseMs === undefined ? 120_000 : requireInt(opts.leaseMs, 'leaseMs', 1),
    stuckAfterMs:
      opts.stuckAfterMs === undefined ? 600_000 : requireInt(opts.stuckAfterMs, 'stuckAfterMs', 1),
    logger: opts.logger,
    poolerMode: false,
    listen: true,
    timeouts: {
      statementMs:
        opts.statementTimeoutMs === undefined
          ? DEFAULT_STATEMENT_TIMEOUT_MS
          : requireInt(opts.statementTimeoutMs, 'statementTimeoutMs', 1),
      connectMs:
        opts.connectTimeoutMs === undefined
          ? DEFAULT_CONNECT_TIMEOUT_MS
          : requireInt(opts.connectTimeoutMs, 'connectTimeoutMs', 1),
    },
    batchEnqueue: batchEnqueueSettings(opts.batchEnqueue),
    telemetry: opts.telemetry ?? true,
  };
  const { baseMs, capMs, jitter } = settings.backoff;
  computeBackoff(1, baseMs, capMs, jitter); // validates jitter
  if (opts.preparedStatements !== undefined && typeof opts.preparedStatements !== 'boolean') {
    throw new ValidationError('preparedStatements', 'must be true or false');
  }
  settings.poolerMode = opts.preparedStatements === false;
  if (opts.listen !== undefined && typeof opts.listen !== 'boolean') {
    throw new ValidationError('listen', 'must be true or false');
  }
  settings.listen = opts.listen ?? !settings.poolerMode;
  if (typeof settings.telemetry !== 'boolean')
    throw new ValidationError('telemetry', 'must be true or false');
  return settings;
}

function batchEnqueueSettings(setting: QueueOptions['batchEnqueue']): EngineSettings['batchEnqueue'] {
  if (setting === false) return null;
  if (setting !== undefined && setting !== true && (typeof setting !== 'object' || setting === null)) {
    throw new ValidationError('batchEnqueue', 'must be true, false or { maxBatch, maxConcurrent }');
  }
  const tuning = typeof setting === 'object' ? setting : {};
  rejectUnknownKeys(tuning, ['maxBatch', 'maxConcurrent'], 'batchEnqueue');
  return {
    maxBatch:
      tuning.maxBatch === undefined ? 1_000 : requireInt(tuning.maxBatch, 'batchEnqueue.maxBatch', 1, 10_000),
    maxConcurrent:
      tuning.maxConcurrent === undefined
        ? 2
        : requireInt(tuning.maxConcurrent, 'batchEnqueue.maxConcurrent', 1, 100),
  };
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
