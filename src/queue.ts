import type pg from 'pg';
import { errorText } from './core/error-text.js';
import {
  claimArgs,
  clientOption,
  completeItems,
  dependencySummaryLimit,
  flowGraphLimit,
  listArgs,
  pruneArgs,
  queueConfigArgs,
  renewLeaseMs,
  retryInMsArg,
  schedulePageArgs,
  sequencesArgs,
  taskFilterArg,
  throughputArgs,
  waitForArgs,
} from './core/queue-args.js';
import { toScheduleSpec } from './core/schedule-spec.js';
import {
  optionsObject,
  requireFlowId,
  requireJobId,
  requireLease,
  requireName,
  toJsonText,
} from './core/validate.js';
import { cancelOrThrow, prune, requeueDead, requeueOrThrow } from './engine/bulk-ops.js';
import { attachEngine, Engine } from './engine/engine.js';
import * as queues from './engine/queues.js';
import * as reads from './engine/reads.js';
import * as schedules from './engine/scheduler.js';
import type { QueueOptions } from './engine/settings.js';
import { emitEvent, emitEventArgs, listSteps, resetStepsArg } from './engine/step-admin.js';
import { isPermanent } from './errors.js';
import type { MigrateResult } from './migrations/migrate.js';
import { enqueueArgs, enqueueFlowArgs, enqueueManyArgs } from './task/enqueue-args.js';
import type { Task, TaskJobSpec } from './task-types.js';
import type {
  CancelOutcome,
  ClaimedJob,
  ClaimOptions,
  EmitEventOptions,
  EnqueueCallOptions,
  EnqueueOptions,
  EnqueueResult,
  FlowGraph,
  FlowNode,
  FlowResult,
  Job,
  JobDependencies,
  JobDependencySummary,
  JobPage,
  JobSpec,
  JobStatus,
  JobStep,
  Lease,
  ListOptions,
  LiveStatus,
  OpsSnapshot,
  PruneOptions,
  Queryable,
  QueueConfig,
  QueueConfigOptions,
  QueueInfo,
  RequeueOptions,
  RequeueOutcome,
  Schedule,
  ScheduleOptions,
  SequenceInfo,
  SequencesOptions,
} from './types.js';

export { MAX_CLAIM_LIMIT } from './core/queue-args.js';
export type { QueueOptions, Retention } from './engine/settings.js';

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
   * Adds one job: `{ id, created: true }`, or on a dedupe hit the active holder's `{ id, created:
   * false }` (SPEC §1.7). With `client` it joins your open transaction (SPEC §1.6); without, calls
   * that arrive together share one INSERT and one commit (`batchEnqueue`), each with its own fate.
   */
  enqueue(
    task: string,
    payload?: unknown,
    options?: EnqueueOptions & EnqueueCallOptions,
  ): Promise<EnqueueResult>;
  enqueue<Input>(
    // biome-ignore lint/suspicious/noExplicitAny: the handler's payload and result types do not matter here.
    task: Task<Input, any, any>,
    payload: NoInfer<Input>,
    options?: EnqueueOptions & EnqueueCallOptions,
  ): Promise<EnqueueResult>;
  async enqueue(
    task: string | Task<unknown, unknown, unknown>,
    payload?: unknown,
    options?: EnqueueOptions & EnqueueCallOptions,
  ): Promise<EnqueueResult> {
    const engine = this.open();
    // §9 a defined task: its name and defaults, its payload checked against its schema
    const { job, client } = await enqueueArgs(task, payload, options);
    return engine.enqueuer.enqueue(job, engine.callerWriter(client));
  }

  /**
   * Adds many jobs in one INSERT and one NOTIFY; results in input order. One invalid spec rejects
   * the batch, nothing written; a dedupe key repeated in it yields the first entry's id.
   */
  async enqueueMany(
    specs: readonly (JobSpec | TaskJobSpec)[],
    options?: EnqueueCallOptions,
  ): Promise<EnqueueResult[]> {
    const engine = this.open();
    const { jobs, client } = await enqueueManyArgs(specs, options);
    return jobs.length === 0 ? [] : engine.enqueuer.enqueueMany(jobs, engine.callerWriter(client));
  }

  /**
   * Adds a flow (SPEC §10): jobs that depend on each other by `ref` (or on existing jobs by id),
   * all written or none — inside your transaction with `client`. A node whose dependencies are
   * not all done is `waiting`; the transaction that finishes its last one makes it pending. A
   * cycle, an unknown ref, a dependency on a job that does not exist or a dedupe option is a
   * ValidationError, nothing written. Returns the flow's id and each node's job id by ref.
   *
   * @example
   * const { flowId, jobs } = await queue.enqueueFlow([
   *   { ref: 'a', task: 'fetch', payload: { url: urlA } },
   *   { ref: 'b', task: 'fetch', payload: { url: urlB } },
   *   { ref: 'merge', task: 'merge', payload: {}, dependsOn: ['a', 'b'] },
   * ]);
   */
  async enqueueFlow(
    nodes: readonly (FlowNode | (Omit<FlowNode, 'task'> & { task: Task<unknown, unknown, unknown> }))[],
    options?: EnqueueCallOptions,
  ): Promise<FlowResult> {
    const engine = this.open();
    const { plan, client } = await enqueueFlowArgs(nodes, options);
    return engine.flows.enqueueFlow(plan, engine.callerWriter(client));
  }

  /** The jobs of a flow, oldest first (SPEC §10); empty when there is no such flow. */
  async flow(flowId: string): Promise<Job[]> {
    return this.open().flows.jobs(requireFlowId(flowId));
  }

  /**
   * A flow's jobs and the edges between them (what the dashboard draws); with `limit`, its
   * oldest `limit` jobs and their edges, `truncated` telling whether there were more.
   */
  async flowGraph(flowId: string, options?: { limit?: number }): Promise<FlowGraph> {
    return this.open().flows.graph(requireFlowId(flowId), flowGraphLimit(options));
  }

  /**
   * The ids job `id` depends on and the ids of the jobs that depend on it (SPEC §10), each list
   * ascending; both empty for a job outside any dependency graph, or an unknown id (read from the
   * read replica when there is one). The edges of a job go with it when retention deletes it.
   * Both lists are complete, however long: for a job that may have many dependents (a flow's
   * root can have a million), use {@link dependencySummary}.
   *
   * @example
   * const { dependsOn, dependents } = await queue.dependenciesOf(jobs.merge);
   */
  async dependenciesOf(id: string): Promise<JobDependencies> {
    return this.open().flows.neighbours(requireJobId(id));
  }

  /**
   * A bounded {@link dependenciesOf} (SPEC §10, §5): the first `limit` (default 100, at most
   * 10,000) ids on each side, ascending, and how many there are on each side — exact up to
   * 10,000, past that 10,000 with `dependentsCountExact` (or `dependsOnCountExact`) false. Two
   * index ranges of at most 10,001 entries each, whatever the flow's size. What
   * `GET /api/jobs/:id` and the dashboard show. All empty for an unknown id.
   *
   * @example
   * const { dependents, dependentsCount } = await queue.dependencySummary(flow.jobs.root);
   * console.log(`${dependents.length} of ${dependentsCount} dependents`);
   */
  async dependencySummary(id: string, options?: { limit?: number }): Promise<JobDependencySummary> {
    const limit = dependencySummaryLimit(options);
    return reads.dependencySummary(this.open(), requireJobId(id), limit);
  }

  /**
   * Claims up to `limit` due jobs for `workerId` in one statement (SPEC §1.1), in claim order
   * (priority, run_after, id). Each returned job carries its lease. Jobs of paused or limited
   * queues (§8) are left out: Workers claim those.
   */
  async claim(workerId: string, options?: ClaimOptions): Promise<ClaimedJob[]> {
    const engine = this.open();
    const args = claimArgs(workerId, options, engine.settings.leaseMs);
    return engine.claim(args.workerId, args.limit, args.leaseMs, args.tasks, args.queues);
  }

  /**
   * running → done with `result` (deleted, with `retention: { completed: 'delete' }`); `false` when
   * the lease no longer owns the job (SPEC §1.3). With `client` it commits with your transaction.
   * A result JSON cannot carry (BigInt, a cycle, NaN or ±Infinity anywhere in it…) is a
   * `ValidationError` naming its path (`result.total`), thrown before anything is written: the
   * job stays running under the lease, which can still complete or fail it (SPEC §1.11).
   */
  async complete(lease: Lease, result?: unknown, options?: { client?: Queryable }): Promise<boolean> {
    const engine = this.open();
    const owner = requireLease(lease);
    const resultJson = toJsonText(result, 'result');
    return engine.completer.complete(owner, resultJson, engine.writer(clientOption(options)));
  }

  /**
   * Completes many jobs in one statement, each guarded by its own lease (SPEC §1.3); one answer
   * per item, in input order. Every item is checked before anything is written: one bad lease or
   * result (`items[3].result.total` is NaN) is a `ValidationError` naming it, and no job of the
   * batch is completed — each stays running under its lease (SPEC §1.11).
   */
  async completeMany(items: readonly { lease: Lease; result?: unknown }[]): Promise<boolean[]> {
    const engine = this.open();
    const checked = completeItems(items);
    return checked.length === 0 ? [] : engine.completer.completeMany(checked);
  }

  /**
   * Records a failed attempt: back to `pending` after the backoff (or `retryInMs`), or `dead`
   * when attempts are spent — or `cancelled` when `cancel(id)` was called while it ran, or when
   * its key (`dedupe: { scope: 'pending' }`) already has a queued job, which then takes the retry
   * over (superseded). `null` when the lease no longer owns the job (SPEC §1.3).
   */
  async fail(
    lease: Lease,
    error: unknown,
    options?: { retryInMs?: number },
  ): Promise<'pending' | 'dead' | 'cancelled' | null> {
    const engine = this.open();
    const owner = requireLease(lease);
    const retryInMs = retryInMsArg(options) ?? engine.retryDelay(owner.attempt);
    return engine.completer.fail(owner, errorText(error), retryInMs, isPermanent(error));
  }

  /** Extends the lease to now + `leaseMs` (database time). `false` when no longer the owner. */
  async renewLease(lease: Lease, leaseMs?: number): Promise<boolean> {
    const engine = this.open();
    return engine.renewLease(requireLease(lease), renewLeaseMs(leaseMs, engine.settings.leaseMs));
  }

  /**
   * running → pending without spending the attempt (for shutdown); `cancelled` instead when
   * cancellation was requested, or when its key (`dedupe: { scope: 'pending' }`) already has a
   * queued job (superseded). `false` when not the owner.
   */
  async release(lease: Lease): Promise<boolean> {
    return this.open().completer.release(requireLease(lease));
  }

  /** Reclaims running jobs whose lease expired (SPEC §1.5); returns their ids. Safe to run anywhere. */
  async reap(): Promise<string[]> {
    return this.open().reap();
  }

  /** Runs `fn` in one transaction (ROLLBACK if it throws); pass its client to `enqueue`/`complete`. */
  async transaction<T>(fn: (client: pg.PoolClient) => Promise<T>): Promise<T> {
    return this.open().transaction((session) => fn(session as pg.PoolClient));
  }

  /**
   * Waits until the job (an id, or anything with an `id`) is done, dead or cancelled, and
   * resolves with it as it finished (SPEC §9). It never misses the moment: a completion hint over
   * LISTEN, and the row read again on every (re)connection, every 500 ms while LISTEN is
   * unavailable (or `listen: false`), every 5 s otherwise, and once more on timeout. Rejects with
   * a `WaitTimeoutError` after `timeoutMs` (none by default), with the signal's reason when
   * `signal` aborts, with a `NotFoundError` if there is no such job (or it was deleted before it
   * was seen finished), with the error itself when the job cannot be read for a reason no retry
   * fixes (a schema not migrated, a missing database), and with a `QueueClosedError` when the
   * queue closes meanwhile. While the database is away it keeps waiting (and retrying).
   *
   * `R` types `result` (the handler's return value, set when the job is `done`; it is not checked).
   *
   * @example
   * const { id } = await queue.enqueue(resizeImage, { url });
   * const job = await queue.waitFor<{ thumbnail: string }>(id, { timeoutMs: 60_000 });
   * if (job.status === 'done') console.log(job.result?.thumbnail);
   */
  async waitFor<R = unknown>(
    job: string | { id: string },
    options?: { timeoutMs?: number; signal?: AbortSignal },
  ): Promise<Job & { result: R | null }> {
    const { id, timeoutMs, signal } = waitForArgs(job, options);
    return (await this.open().waitFor(id, timeoutMs, signal)) as Job & { result: R | null };
  }

  /**
   * §12 a job's durable steps, in the order they completed (empty for a job without any, or an
   * unknown id): each step's stored value, each sleep's instant, each event wait's payload.
   */
  async steps(id: string): Promise<JobStep[]> {
    return listSteps(this.open(), requireJobId(id));
  }

  /**
   * §12 sets event `eventName` — a latch, set once: the first call stores `payload` (JSON,
   * §1.11) and returns true, making every job waiting for it pending (with the wake-up hint);
   * later calls return false and change nothing. A wait that starts after it was set gets it at
   * once. With `client`, inside your transaction (READ COMMITTED): nothing is set and nobody is
   * woken unless it commits.
   *
   * @example
   * await queue.emitEvent(`order.paid:${orderId}`, { amount });
   */
  async emitEvent(eventName: string, payload?: unknown, options?: EmitEventOptions): Promise<boolean> {
    const { name, payloadJson } = emitEventArgs(eventName, payload);
    return emitEvent(this.open(), name, payloadJson, options?.client);
  }

  /** One job, or `null` when no job has this id. A malformed id throws a ValidationError. */
  async get(id: string): Promise<Job | null> {
    return reads.getJob(this.open(), requireJobId(id));
  }

  /**
   * The active (pending or running) job holding `dedupeKey`, or `null` (read on the primary). A
   * key of scope 'pending' may have two: the queued one is returned, else the running one.
   */
  async findActive(dedupeKey: string): Promise<Job | null> {
    return reads.findActive(this.open(), requireName(dedupeKey, 'dedupeKey'));
  }

  /** Jobs newest first, filtered; page with `after: lastJob.id`. */
  async list(options?: ListOptions): Promise<Job[]> {
    return reads.listJobs(this.open(), listArgs(options));
  }

  /**
   * A bounded page, newest first: it examines at most 10,000 rows below the cursor (or a rare
   * status's own rows), so a filter matching nothing recent returns a short page whose `next`
   * says where it stopped looking: pass it as `after` to look further back.
   */
  async listPage(options?: ListOptions): Promise<JobPage> {
    return reads.listPage(this.open(), listArgs(options));
  }

  /**
   * Jobs by status, cheap at any size (SPEC §7): finished statuses past 10,000 rows are estimated
   * (`ops().estimated`); `done` includes completions deleted by `retention.completed`.
   */
  async counts(): Promise<Record<JobStatus, number>> {
    return reads.counts(this.open());
  }

  /** The snapshot of SPEC §3: counts, lag, dead and stuck jobs, and the read replica's lag. */
  async ops(): Promise<OpsSnapshot> {
    return reads.ops(this.open());
  }

  /**
   * dead → pending with attempts reset (SPEC §1.8) — or waiting, when a job it depends on is not
   * done (§10). `false` when the job is not dead or unknown.
   */
  async requeue(id: string, options?: RequeueOptions): Promise<boolean> {
    const after = (await this.open().requeue(requireJobId(id), resetStepsArg(options)))?.after;
    return after !== null && after !== undefined;
  }

  /**
   * Like {@link Queue.requeue}, but says why nothing happened, from one statement on the primary.
   * @throws {NotFoundError} no job has this id. {ConflictError} it is not dead (`error.status`).
   *   {DedupeConflictError} another job holds its dedupe key (an active one; for a key of scope
   *   'pending', a queued one).
   */
  async requeueOrThrow(id: string, options?: RequeueOptions): Promise<RequeueOutcome> {
    return requeueOrThrow(this.open(), requireJobId(id), resetStepsArg(options));
  }

  /** Requeues every dead job (of `task`) in short batches; one whose dedupe key is taken is skipped. */
  async requeueDead(
    options: { task?: string } = {},
    onProgress?: (progress: { requeued: number; skipped: number }) => void,
  ): Promise<{ requeued: number; skipped: number }> {
    return requeueDead(this.open(), taskFilterArg(options), onProgress);
  }

  /** Live (waiting, pending, running) jobs by queue: cheap, for metrics and dashboards. */
  async liveByQueue(): Promise<{ queue: string; status: LiveStatus; count: number }[]> {
    return reads.liveByQueue(this.open());
  }

  /** Finished jobs per `bucketMs` over the last `windowMs` (default: per minute, last hour), by status. */
  async throughput(
    options: { bucketMs?: number; windowMs?: number } = {},
  ): Promise<{ bucket: number; status: 'done' | 'dead' | 'cancelled'; count: number }[]> {
    return reads.throughput(this.open(), throughputArgs(options));
  }

  /**
   * pending → cancelled; running → its worker aborts it; the dead head of a sequence → cancelled
   * (SPEC §11: its key moves on). `false` when finished or unknown.
   */
  async cancel(id: string): Promise<boolean> {
    return (await this.open().cancel(requireJobId(id)))?.after != null;
  }

  /**
   * Like {@link Queue.cancel}, but says what happened, from one statement on the primary:
   * `{ status: 'cancelled', wasRunning: false }` or `{ status: 'running', wasRunning: true }`.
   * @throws {NotFoundError} no job has this id. {ConflictError} it is already finished.
   */
  async cancelOrThrow(id: string): Promise<CancelOutcome> {
    return cancelOrThrow(this.open(), requireJobId(id));
  }

  /** Deletes finished jobs older than `olderThanMs` in short batches; returns (and reports) the total. */
  async prune(options: PruneOptions, onProgress?: (deleted: number) => void): Promise<number> {
    const engine = this.open();
    const { statuses, olderThanMs } = pruneArgs(options);
    return prune(engine, statuses, olderThanMs, onProgress);
  }

  /**
   * Creates or updates the schedule `name` (SPEC §8): idempotent, for every process to call at
   * each deploy; an unchanged cron keeps its next run. Each tick enqueues exactly one job, fired
   * by whichever worker locks the schedule first.
   */
  async schedule(name: string, options: ScheduleOptions): Promise<Schedule> {
    return schedules.upsertSchedule(this.open(), toScheduleSpec(name, options));
  }

  /** Removes a schedule (jobs it enqueued stay). `false` when there was none. */
  async unschedule(name: string): Promise<boolean> {
    return schedules.removeSchedule(this.open(), requireName(name, 'name'));
  }

  /** Schedules by name with their next and last run: every one, or a page (`after`, `limit`). */
  async schedules(options?: { after?: string; limit?: number }): Promise<Schedule[]> {
    const { after, limit } = schedulePageArgs(options);
    return schedules.listSchedules(this.open(), after, limit);
  }

  /** Stops firing a schedule until it is resumed. `false` when there is none. */
  async pauseSchedule(name: string): Promise<boolean> {
    return schedules.pauseSchedule(this.open(), requireName(name, 'name'));
  }

  /** Fires a paused schedule again from its next tick after now (none missed meanwhile runs). */
  async resumeSchedule(name: string): Promise<boolean> {
    return schedules.resumeSchedule(this.open(), requireName(name, 'name'));
  }

  /**
   * Configures queue `name` (SPEC §8): `paused`, `concurrency` (most jobs running at once across
   * every worker), `rateLimit` (most starts per period). Left out: unchanged; `null`: no limit.
   * Running workers hear of it at once. Claims that begin after it resolves obey it.
   */
  async configureQueue(name: string, options: QueueConfigOptions): Promise<QueueConfig> {
    const change = queueConfigArgs(options);
    return queues.configureQueue(this.open(), requireName(name, 'name'), change);
  }

  /** No job of this queue starts until it is resumed; running ones finish. */
  async pauseQueue(name: string): Promise<void> {
    await queues.configureQueue(this.open(), requireName(name, 'name'), { paused: true });
  }

  /** Lets a paused queue's jobs start again; workers claim them at once. */
  async resumeQueue(name: string): Promise<void> {
    await queues.configureQueue(this.open(), requireName(name, 'name'), { paused: false });
  }

  /** Every configured queue and every queue with live jobs: settings and live counts. */
  async queues(): Promise<QueueInfo[]> {
    return queues.listQueues(this.open());
  }

  /**
   * Sequence keys with unfinished jobs (SPEC §11), in key order: each key's head (the job that
   * holds it — pending, running, waiting for its retry, or dead — else its next job) and how
   * many jobs wait behind it. `blocked: true` lists only keys whose head is dead (they run again
   * once it is requeued or cancelled); `after` and `limit` page through them.
   *
   * @example
   * for (const s of await queue.sequences({ blocked: true })) await queue.requeue(s.headId);
   */
  async sequences(options?: SequencesOptions): Promise<SequenceInfo[]> {
    return reads.sequences(this.open(), sequencesArgs(options));
  }

  /**
   * Lets statements in flight finish, gives open transactions a few seconds, then ends the pools
   * Skiplock created (also when the server is gone); a pool you passed in stays open. Idempotent.
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
