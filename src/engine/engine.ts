/**
 * The engine behind a Queue (internal; not exported from the package): on top of its core (the
 * database handles, the statements, the settings: engine-core.ts) it holds the parts that write —
 * the enqueuer, the completer, the flows — and the worker protocol. `Queue` is a façade that
 * validates its arguments and calls in here; the Worker reaches the database only through the
 * engine of its queue (`engineOf(queue)`).
 *
 *   Queue ─┐                 ┌─ Enqueuer   (enqueue batching, dedupe rounds, the wake-up hint)
 *          ├─▶ Engine ───────┼─ Completer  (every outcome: done, retry, dead, cancelled, released)
 *   Worker ┘   (pools, store) └─ bulk ops   (requeueDead, prune: keyset batches)
 */
import type { Executor } from '../db/executor.js';
import { QueueClosedError } from '../errors.js';
import type { LeaseRenewal } from '../store/job-store.js';
import type { ClaimedJob, Job, Lease } from '../types.js';
import { Completer } from './completer.js';
import { EngineCore } from './engine-core.js';
import { Enqueuer } from './enqueuer.js';
import { Flows } from './flows.js';
import { LimitedQueues } from './limited-queues.js';
import type { SequenceGate } from './sequence-gate.js';
import type { QueueOptions } from './settings.js';
import { Steps } from './steps.js';
import { FinishWaiter } from './waiter.js';

/** The heartbeat's answer per lease: the worker reaches the store only through the engine. */
export type { LeaseRenewal } from '../store/job-store.js';

export class Engine extends EngineCore {
  readonly enqueuer: Enqueuer;
  readonly completer: Completer;
  readonly flows: Flows;
  /** The limited queues as this process last read them (the worker's limited claims). */
  readonly limits: LimitedQueues;
  /** §12 durable steps: batched loads and checkpoints, sleeps, event waits. */
  readonly steps: Steps;

  constructor(opts: QueueOptions) {
    super(opts);
    this.flows = new Flows(this);
    this.enqueuer = new Enqueuer(this, this.flows);
    this.completer = new Completer(this);
    this.limits = new LimitedQueues(this);
    this.steps = new Steps(this);
  }

  // The worker protocol: what a Worker asks of its queue's engine besides the completer.

  /**
   * Claims up to `limit` jobs for `workerId` (SPEC §1.1), after the sequence pass (§11) — which a
   * worker's `gate` may leave out.
   */
  async claim(
    workerId: string,
    limit: number,
    leaseMs: number,
    tasks: string[] | null,
    queues: string[] | null,
    gate?: SequenceGate,
  ): Promise<ClaimedJob[]> {
    this.assertOpen();
    await this.sequencePass(this.pool, gate);
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
   * §11 the sequence pass, on `db` before a claim on it: always, or as a worker's `gate` says
   * (engine/sequence-gate.ts).
   */
  async sequencePass(db: Executor, gate?: SequenceGate): Promise<void> {
    const ticket = gate === undefined ? null : gate.ticket();
    if (gate !== undefined && ticket === null) return;
    const noted = await this.store.claim.sequencePass(db);
    if (!noted && ticket !== null) gate?.clean(ticket);
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

  /** Extends one lease to now + `leaseMs` (`queue.renewLease`); false when it no longer owns its job. */
  renewLease(lease: Lease, leaseMs: number): Promise<boolean> {
    this.assertOpen();
    return this.store.lease.renewLease(this.pool, lease, leaseMs);
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

  /**
   * dead → pending (SPEC §1.8): the transition, or null for an unknown id. §12 `resetSteps`: the
   * job's stored steps are deleted in the same transaction (it runs from scratch).
   */
  requeue(id: string, resetSteps = false) {
    if (!resetSteps) return this.store.admin.requeue(this.pool, id);
    return this.transaction(async (db) => {
      const transition = await this.store.admin.requeue(db, id);
      if (transition?.after) await this.store.steps.reset(db, id);
      return transition;
    });
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
   * Lets statements in flight finish, waits for enqueue batches and the wake-up hint, then ends
   * the pools Skiplock created. Idempotent.
   */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.waiter?.close(new QueueClosedError());
    await this.enqueuer.idle();
    await this.completer.idle();
    await this.steps.idle();
    await this.closePools();
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
