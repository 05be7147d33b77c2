/**
 * The only layer that talks SQL to Skiplock's tables: one module per operation family, each
 * defining its statements next to the methods that bind their parameters, map their rows and
 * turn driver errors into Skiplock errors. Every method takes the executor to run on (a pool,
 * or the caller's transaction client).
 *
 *   store.enqueue   insertOne, insertMany, activeIdsByKey              (enqueue.ts)
 *   store.claim     claim, nextDueInMs                                (claim.ts)
 *   store.outcome   complete, completeMany, fail, cancelRunning, release, releaseMany (outcome.ts)
 *   store.lease     renewLease, renewLeases, lockLease, reap          (lease.ts)
 *   store.admin     requeue, requeueDeadBatch, deadIds, cancel, pruneBatch, pruneFinished (admin.ts)
 *   store.observe   get, findActive, list, listPage, counts, opsExtras, liveByQueue, … (observe.ts)
 *   store.queues    configure, list, restricted, lock, claimLimited, rateWait        (queues.ts)
 *   store.flows     lockDependencies, insertGraph, dependencies, flowJobs, flowEdges (flows.ts)
 *   store.sequences list: sequence keys, their heads and queues (§11)        (sequences.ts)
 *   store.neighbours summary: a job's first dependencies and dependents, counted (neighbours.ts)
 *   store.schedule  upsert, remove, list, pause, resume, lockDue, lastActive, fire, nextDueInMs (schedule.ts)
 *   store.steps     load, write, sleep, wait, emit, list, reset, wakeTimedOut, pruneEvents  (steps.ts)
 */

import type { Executor } from '../db/executor.js';
import { quoteIdent } from '../db/identifier.js';
import { AdminStatements, adminSql } from './admin.js';
import { ClaimStatements, claimSql } from './claim.js';
import { EnqueueStatements, enqueueSql } from './enqueue.js';
import { FlowStatements, flowSql } from './flows.js';
import { LeaseStatements, leaseSql } from './lease.js';
import { NeighbourStatements, neighbourSql } from './neighbours.js';
import { ObserveStatements, observeSql } from './observe.js';
import { OutcomeStatements, outcomeSql } from './outcome.js';
import { QueueStatements, queueSql } from './queues.js';
import { Runner } from './runner.js';
import { ScheduleStatements, scheduleSql } from './schedule.js';
import { SequenceStatements, sequenceSql } from './sequences.js';
import { StepStatements, stepSql } from './steps.js';

export type { Transition } from './admin.js';
export type { LeaseRenewal } from './lease.js';
export { NEIGHBOUR_COUNT_LIMIT } from './neighbours.js';
export { EXACT_COUNT_LIMIT, LIST_WINDOW, type StatusCounts } from './observe.js';
export type { QueueRow } from './queues.js';
export type { ScheduleWrite } from './schedule.js';
export {
  NOT_WRITTEN,
  type SleepState,
  type StepRow,
  type StepWrite,
  type StepWritten,
  type WaitState,
  WRITTEN,
  WRITTEN_RENEWED,
} from './steps.js';

export class JobStore {
  readonly schema: string;
  readonly channel: string;
  private readonly runner: Runner;
  readonly enqueue: EnqueueStatements;
  readonly claim: ClaimStatements;
  readonly outcome: OutcomeStatements;
  readonly lease: LeaseStatements;
  readonly admin: AdminStatements;
  readonly observe: ObserveStatements;
  readonly schedule: ScheduleStatements;
  readonly queues: QueueStatements;
  readonly flows: FlowStatements;
  readonly neighbours: NeighbourStatements;
  readonly steps: StepStatements;
  readonly sequences: SequenceStatements;

  /** `deleteCompleted`: `retention: { completed: 'delete' }` (completions delete the row and count it, §7). */
  constructor(schema: string, options: { deleteCompleted?: boolean } = {}) {
    const s = quoteIdent(schema);
    this.schema = schema;
    this.runner = new Runner(schema);
    this.channel = this.runner.channel;
    this.enqueue = new EnqueueStatements(this.runner, enqueueSql(s));
    this.claim = new ClaimStatements(this.runner, claimSql(s));
    this.outcome = new OutcomeStatements(this.runner, outcomeSql(s), options.deleteCompleted === true);
    this.lease = new LeaseStatements(this.runner, leaseSql(s));
    this.admin = new AdminStatements(this.runner, adminSql(s));
    this.observe = new ObserveStatements(this.runner, observeSql(s));
    this.schedule = new ScheduleStatements(this.runner, scheduleSql(s));
    this.queues = new QueueStatements(this.runner, queueSql(s));
    this.flows = new FlowStatements(this.runner, flowSql(s));
    this.neighbours = new NeighbourStatements(this.runner, neighbourSql(s));
    this.steps = new StepStatements(this.runner, stepSql(s));
    this.sequences = new SequenceStatements(this.runner, sequenceSql(s));
  }

  /** Runs every statement on `pool` as a named prepared statement (see Runner.prepareOn). */
  prepareOn(pool: Executor | null): void {
    this.runner.prepareOn(pool);
  }
}
