import type pg from 'pg';
import { errorText } from './core/error-text.js';
import { enqueueOptions, toNewJob, toNewJobs } from './core/job-spec.js';
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
import { inTransaction } from './db/executor.js';
import { prune, requeueDead } from './engine/bulk-ops.js';
import { attachEngine, Engine } from './engine/engine.js';
import type { QueueOptions } from './engine/settings.js';
import { ConflictError, NotFoundError, ValidationError } from './errors.js';
import type { MigrateResult } from './migrations/migrate.js';
import type {
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
  OpsSnapshot,
  PruneOptions,
  Queryable,
  RequeueOutcome,
} from './types.js';

export type { QueueOptions, Retention } from './engine/settings.js';

const CLAIM_KEYS = ['limit', 'leaseMs', 'queues', 'tasks'];
const LIST_KEYS = ['status', 'task', 'queue', 'limit', 'after'];
const FINISHED = ['done', 'dead', 'cancelled'] as const;
/** Most jobs one claim may take. */
export const MAX_CLAIM_LIMIT = 10_000;

/**
 * A Skiplock queue on one PostgreSQL schema: enqueue, claim, and every transition of a job's
 * life, each one statement that keeps the invariants of SPEC §1. A façade: it validates its
 * arguments (a ValidationError, nothing written) and hands the call to its engine.
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
  private readonly engine: Engine;

  constructor(options: QueueOptions = {}) {
    this.engine = new Engine(optionsObject(options, 'options'));
    this.schema = this.engine.schema;
    attachEngine(this, this.engine);
  }

  /** True after `close()`. */
  get isClosed(): boolean {
    return this.engine.isClosed;
  }

  /** Creates or upgrades this queue's schema (safe from many processes at once; SPEC §2). */
  async migrate(): Promise<MigrateResult> {
    return this.open().migrate();
  }

  /**
   * Adds one job. Returns `{ id, created: true }`, or on a dedupe hit `{ id, created: false }`
   * with the id of the active job that holds the key (SPEC §1.7). With `client`, the job joins
   * the caller's open transaction and exists only if it commits (SPEC §1.6). Without it, calls
   * that arrive together share one INSERT and one commit (`batchEnqueue`), each settling with
   * its own job's fate.
   */
  async enqueue(
    task: string,
    payload?: unknown,
    options?: EnqueueOptions & EnqueueCallOptions,
  ): Promise<EnqueueResult> {
    const engine = this.open();
    const { client, ...jobOptions } = enqueueOptions(options);
    const job = toNewJob(task, payload, jobOptions);
    return engine.enqueuer.enqueue(job, client === undefined ? undefined : engine.writer(client));
  }

  /**
   * Adds many jobs in one INSERT and one NOTIFY. Results are in input order. One invalid spec
   * rejects the whole batch with nothing written. A dedupe key repeated in the batch yields
   * `created: false` with the first entry's id.
   */
  async enqueueMany(specs: readonly JobSpec[], options?: EnqueueCallOptions): Promise<EnqueueResult[]> {
    const engine = this.open();
    const opts = optionsObject(options, 'options');
    rejectUnknownKeys(opts, ['client'], 'options');
    const jobs = toNewJobs(specs);
    if (jobs.length === 0) return [];
    return engine.enqueuer.enqueueMany(
      jobs,
      opts.client === undefined ? undefined : engine.writer(opts.client),
    );
  }

  /**
   * Claims up to `limit` due jobs for `workerId` in one statement (SPEC §1.1), in claim order
   * (priority, run_after, id). Each returned job carries its lease.
   */
  async claim(workerId: string, options?: ClaimOptions): Promise<ClaimedJob[]> {
    const engine = this.open();
    const opts = optionsObject(options, 'options');
    rejectUnknownKeys(opts, CLAIM_KEYS, 'options');
    return engine.store.claim.claim(
      engine.pool,
      requireName(workerId, 'workerId'),
      opts.limit === undefined ? 1 : requireInt(opts.limit, 'limit', 1, MAX_CLAIM_LIMIT),
      opts.leaseMs === undefined ? engine.settings.leaseMs : requireInt(opts.leaseMs, 'leaseMs', 1),
      optionalNameList(opts.tasks, 'tasks'),
      optionalNameList(opts.queues, 'queues'),
    );
  }

  /**
   * running → done with `result` (or deleted, with `retention: { completed: 'delete' }`). `false`
   * when the lease no longer owns the job (SPEC §1.3). With `client` (inside your open
   * transaction) the completion commits or rolls back with your own writes.
   */
  async complete(lease: Lease, result?: unknown, options?: { client?: Queryable }): Promise<boolean> {
    const engine = this.open();
    const owner = requireLease(lease);
    const resultJson = toJsonText(result, 'result');
    const opts = optionsObject(options, 'options');
    rejectUnknownKeys(opts, ['client'], 'options');
    return engine.completer.complete(owner, resultJson, engine.writer(opts.client));
  }

  /**
   * Completes many jobs in one statement, each guarded by its own lease (SPEC §1.3). Returns, in
   * input order, whether each one completed (`false`: that lease no longer owns its job).
   */
  async completeMany(items: readonly { lease: Lease; result?: unknown }[]): Promise<boolean[]> {
    const engine = this.open();
    if (!Array.isArray(items)) throw new ValidationError('items', 'must be an array of { lease, result }');
    const checked = items.map((item, i) => ({
      lease: requireLease(item?.lease, `items[${i}].lease`),
      resultJson: toJsonText(item?.result, `items[${i}].result`),
    }));
    return checked.length === 0 ? [] : engine.completer.completeMany(checked);
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
    const engine = this.open();
    const owner = requireLease(lease);
    const opts = optionsObject(options, 'options');
    rejectUnknownKeys(opts, ['retryInMs'], 'options');
    const retryInMs =
      opts.retryInMs === undefined
        ? engine.retryDelay(owner.attempt)
        : requireMs(opts.retryInMs, 'retryInMs');
    return engine.completer.fail(owner, errorText(error), retryInMs);
  }

  /** Extends the lease to now + `leaseMs` (database time). `false` when no longer the owner. */
  async renewLease(lease: Lease, leaseMs?: number): Promise<boolean> {
    const engine = this.open();
    const ms = leaseMs === undefined ? engine.settings.leaseMs : requireInt(leaseMs, 'leaseMs', 1);
    return engine.store.lease.renewLease(engine.pool, requireLease(lease), ms);
  }

  /** running → pending without spending the attempt (for shutdown). `false` when not the owner. */
  async release(lease: Lease): Promise<boolean> {
    return this.open().completer.release(requireLease(lease));
  }

  /** Reclaims running jobs whose lease expired (SPEC §1.5); returns their ids. Safe to run anywhere. */
  async reap(): Promise<string[]> {
    const engine = this.open();
    return engine.store.lease.reap(engine.pool);
  }

  /**
   * Runs `fn` inside one transaction on a pooled connection: BEGIN, then COMMIT, or ROLLBACK
   * if it throws. Pass the client to `enqueue`/`complete` to make them part of it.
   */
  async transaction<T>(fn: (client: pg.PoolClient) => Promise<T>): Promise<T> {
    return inTransaction(this.open().pool, (session) => fn(session as pg.PoolClient));
  }

  /** One job, or `null` when no job has this id. A malformed id throws a ValidationError. */
  async get(id: string): Promise<Job | null> {
    const engine = this.open();
    const jobId = requireJobId(id);
    return engine.read((db) => engine.store.observe.get(db, jobId));
  }

  /** The active (pending or running) job holding `dedupeKey`, or `null` (read on the primary). */
  async findActive(dedupeKey: string): Promise<Job | null> {
    const engine = this.open();
    return engine.store.observe.findActive(engine.pool, requireName(dedupeKey, 'dedupeKey'));
  }

  /** Jobs newest first, filtered; page with `after: lastJob.id`. */
  async list(options?: ListOptions): Promise<Job[]> {
    const engine = this.open();
    const { filter, limit } = listFilter(options);
    return engine.read((db) => engine.store.observe.list(db, filter, limit));
  }

  /**
   * One bounded page of jobs, newest first: unlike {@link Queue.list}, no filter makes it read
   * the whole table. It examines at most 10,000 rows below the cursor (or a rare status's own
   * rows), so a filter that matches nothing recent returns fewer jobs than `limit` with `next`
   * set to where it stopped looking: pass it as `after` to look further back.
   */
  async listPage(options?: ListOptions): Promise<JobPage> {
    const engine = this.open();
    const { filter, limit } = listFilter(options);
    const { jobs, scannedTo } = await engine.read((db) => engine.store.observe.listPage(db, filter, limit));
    return { jobs, next: jobs.length === limit ? (jobs.at(-1)?.id ?? null) : scannedTo };
  }

  /**
   * Jobs by status. Cheap on any table size (SPEC §7): finished statuses beyond 10,000 rows are
   * estimated from statistics (see `ops().estimated`); `done` adds the completions that
   * `retention: { completed: 'delete' }` deleted and counted.
   */
  async counts(): Promise<Record<JobStatus, number>> {
    const engine = this.open();
    return (await engine.read((db) => engine.store.observe.counts(db))).counts;
  }

  /**
   * The operational snapshot of SPEC §3: counts, lag, dead and stuck jobs — and, with a read
   * replica, how far behind the primary it was (`replicaLagMs`), measured before the counts.
   */
  async ops(): Promise<OpsSnapshot> {
    const engine = this.open();
    const replicaLagMs = await engine.replicaLag();
    const { stuckAfterMs } = engine.settings;
    const [{ counts, estimated }, extras] = await engine.read((db) =>
      Promise.all([engine.store.observe.counts(db), engine.store.observe.opsExtras(db, stuckAfterMs)]),
    );
    return { ...counts, ...extras, estimated, replicaLagMs };
  }

  /** dead → pending with attempts reset (SPEC §1.8). `false` when the job is not dead or unknown. */
  async requeue(id: string): Promise<boolean> {
    const engine = this.open();
    return (await engine.store.admin.requeue(engine.pool, requireJobId(id)))?.after === 'pending';
  }

  /**
   * Like {@link Queue.requeue}, but says why nothing happened, from one statement on the primary.
   * @throws {NotFoundError} no job has this id. {ConflictError} it is not dead (`error.status`).
   *   {DedupeConflictError} another active job holds its dedupe key.
   */
  async requeueOrThrow(id: string): Promise<RequeueOutcome> {
    const engine = this.open();
    const jobId = requireJobId(id);
    const transition = await engine.store.admin.requeue(engine.pool, jobId);
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
   */
  async requeueDead(
    options: { task?: string } = {},
    onProgress?: (progress: { requeued: number; skipped: number }) => void,
  ): Promise<{ requeued: number; skipped: number }> {
    const engine = this.open();
    const opts = optionsObject(options, 'options');
    rejectUnknownKeys(opts, ['task'], 'options');
    return requeueDead(engine, opts.task === undefined ? null : requireName(opts.task, 'task'), onProgress);
  }

  /** Live (pending, running) jobs by queue: cheap, for metrics and dashboards. */
  async liveByQueue(): Promise<{ queue: string; status: 'pending' | 'running'; count: number }[]> {
    const engine = this.open();
    return engine.read((db) => engine.store.observe.liveByQueue(db));
  }

  /** Finished jobs per `bucketMs` over the last `windowMs` (default: per minute, last hour), by status. */
  async throughput(
    options: { bucketMs?: number; windowMs?: number } = {},
  ): Promise<{ bucket: number; status: 'done' | 'dead' | 'cancelled'; count: number }[]> {
    const engine = this.open();
    const opts = optionsObject(options, 'options');
    rejectUnknownKeys(opts, ['bucketMs', 'windowMs'], 'options');
    const bucketMs = opts.bucketMs === undefined ? 60_000 : requireInt(opts.bucketMs, 'bucketMs', 1_000);
    const windowMs = opts.windowMs === undefined ? 3_600_000 : requireInt(opts.windowMs, 'windowMs', 1_000);
    return engine.read((db) => engine.store.observe.finishedPerBucket(db, bucketMs, windowMs));
  }

  /**
   * Cancels a job: pending → cancelled at once; running → cancellation requested, and its worker
   * aborts it. `false` when the job is already finished or unknown.
   */
  async cancel(id: string): Promise<boolean> {
    const engine = this.open();
    return (await engine.store.admin.cancel(engine.pool, requireJobId(id)))?.after != null;
  }

  /**
   * Like {@link Queue.cancel}, but says what happened, from one statement on the primary:
   * `{ status: 'cancelled', wasRunning: false }` or `{ status: 'running', wasRunning: true }`.
   * @throws {NotFoundError} no job has this id. {ConflictError} it is already finished.
   */
  async cancelOrThrow(id: string): Promise<CancelOutcome> {
    const engine = this.open();
    const jobId = requireJobId(id);
    const transition = await engine.store.admin.cancel(engine.pool, jobId);
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
    const engine = this.open();
    const opts = optionsObject(options, 'options');
    rejectUnknownKeys(opts, ['olderThanMs', 'statuses'], 'options');
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
    return prune(engine, statuses, olderThanMs, onProgress);
  }

  /**
   * Lets statements in flight finish (each is bounded by `statementTimeoutMs`), gives sessions
   * still held by transactions a few seconds, then ends the pools Skiplock created — also when
   * the server or the network went away under them. A pool passed in by you is left open.
   * Idempotent.
   */
  async close(): Promise<void> {
    await this.engine.close();
  }

  /** The engine, after checking that the queue is open (a closed queue throws QueueClosedError). */
  private open(): Engine {
    this.engine.assertOpen();
    return this.engine;
  }
}

function listFilter(options: ListOptions | undefined) {
  const opts = optionsObject(options, 'options');
  rejectUnknownKeys(opts, LIST_KEYS, 'options');
  return {
    filter: {
      status: opts.status === undefined ? null : requireStatus(opts.status, 'status'),
      task: opts.task === undefined ? null : requireName(opts.task, 'task'),
      queue: opts.queue === undefined ? null : requireName(opts.queue, 'queue'),
      after: opts.after === undefined ? null : requireJobId(opts.after, 'after'),
    },
    limit: opts.limit === undefined ? 50 : requireInt(opts.limit, 'limit', 1, 1000),
  };
}
