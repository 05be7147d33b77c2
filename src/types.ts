/**
 * Public types of Skiplock's API (SPEC §2–3). The ground floor: this file imports nothing (the
 * types of tasks and handlers, which name these, are in src/task-types.ts).
 */

/**
 * Where a job is in its life. `pending` and `running` are active; `waiting` is a job whose
 * dependencies are not all done yet (SPEC §10), or one queued behind its sequence's head
 * (SPEC §11): not claimable, not backlog; the others are finished.
 */
export type JobStatus = 'waiting' | 'pending' | 'running' | 'done' | 'dead' | 'cancelled';

/** The statuses of jobs that are not finished: counted per queue by `queues()` and `/metrics`. */
export type LiveStatus = 'waiting' | 'pending' | 'running';

/** Every status, in lifecycle order. */
export const JOB_STATUSES: readonly JobStatus[] = [
  'waiting',
  'pending',
  'running',
  'done',
  'dead',
  'cancelled',
];

/** A JSON value as stored in `payload` and `result`. */
export type JsonValue = string | number | boolean | null | JsonValue[] | { [key: string]: JsonValue };

/** A job as the API shows it. Timestamps come from the database clock. */
export interface Job<P = unknown> {
  /** Decimal string of a positive 64-bit integer. */
  id: string;
  queue: string;
  task: string;
  status: JobStatus;
  /** Lower runs first. */
  priority: number;
  payload: P;
  result: unknown;
  dedupeKey: string | null;
  /** The group key given at enqueue (a tenant, say), or null (SPEC §8). */
  group: string | null;
  /** Claims so far (a claim spends an attempt; `release` gives it back; `requeue` resets it). */
  attempts: number;
  maxAttempts: number;
  runAfter: Date;
  /** Set only while the job is running. */
  leaseUntil: Date | null;
  /** The worker running it; set only while the job is running (see `attemptedBy`). */
  workerId: string | null;
  runStartedAt: Date | null;
  timeoutMs: number | null;
  lastError: string | null;
  /** Set when cancellation of a running job was requested; the worker aborts it. */
  cancelRequestedAt: Date | null;
  createdAt: Date;
  updatedAt: Date;
  /** The worker ids of its claims, oldest first (the last 25). */
  attemptedBy: string[];
  /**
   * What its handler last reported with `ctx.progress(value)` (JSON), or null; kept after the
   * job finishes and across attempts until the next report (SPEC §9).
   */
  progress: unknown;
  /** The flow it belongs to (`enqueueFlow`, SPEC §10), or null. */
  flowId: string | null;
  /** Its `ref` in that flow, or null. */
  flowRef: string | null;
}

/**
 * Proof of ownership of one claim of one job (SPEC §1.3). complete, fail, renewLease, release and
 * their batch forms match all four fields, so a lease from any other claim of the same job —
 * earlier, or given back by `release`, or from before a `requeue` — changes nothing.
 */
export interface Lease {
  id: string;
  workerId: string;
  /** The job's `attempts` right after this claim. */
  attempt: number;
  /** Opaque; no other claim of this job ever gets the same token. Pass it back unchanged. */
  token: string;
}

/** A job returned by `claim`: the job, plus the lease that owns it. */
export type ClaimedJob<P = unknown> = Job<P> & Lease;

/** Options of one job at enqueue time. */
export interface EnqueueOptions {
  /** Queue name (default `'default'`). Workers may restrict themselves to some queues. */
  queue?: string;
  /** Integer; lower runs first (default 100). */
  priority?: number;
  /** At most one active (pending or running) job holds a given key. */
  dedupeKey?: string | null;
  /** Claims allowed before the job goes `dead` (default 3, at least 1). */
  maxAttempts?: number;
  /** Earliest start, as an absolute time. Exclusive with `delayMs`. */
  runAt?: Date;
  /** Earliest start, in milliseconds after the database's `now()`. Exclusive with `runAt`. */
  delayMs?: number;
  /** Deadline of one attempt, in milliseconds (the worker aborts and fails it past this). */
  timeoutMs?: number | null;
  /** How `dedupeKey` dedupes beyond "one active job per key" (SPEC §8). Needs `dedupeKey`. */
  dedupe?: DedupeOptions | null;
  /**
   * A group key (a tenant, a customer; SPEC §8): within one priority, jobs of different groups
   * are claimed round-robin, and the queue's groupConcurrency / groupRateLimit apply per group.
   */
  group?: string | null;
  /**
   * Jobs this one waits for (SPEC §10): it stays `waiting` until all of them are done, then
   * becomes pending in the transaction that finished the last one. Already done: pending at
   * once. Not with dedupe options.
   */
  dependsOn?: readonly string[];
  /**
   * What a dependency that ends dead or cancelled does to this job: 'cancel' (default) cancels
   * it (and what depends on it; requeueing the dependency brings them back), 'run' lets it run
   * once the others are done.
   */
  onDependencyFailure?: 'cancel' | 'run';
  /**
   * A sequence key (SPEC §11): jobs that share it run one at a time, in id order, across every
   * worker. A job behind its sequence's head is `waiting`; a head that is dead blocks the key
   * until it is requeued (it runs again, first) or cancelled. Not with dedupe options or
   * `dependsOn`.
   */
  sequence?: string | null;
}

/**
 * One node of `enqueueFlow` (SPEC §10): an `enqueueMany` spec plus its `ref` in the flow;
 * `dependsOn` names other nodes by ref, or existing jobs by id.
 */
export interface FlowNode extends Omit<EnqueueOptions, 'dedupeKey' | 'dedupe'> {
  ref: string;
  task: string;
  payload?: unknown;
}

/** What `enqueueFlow` wrote: the flow's id, and each node's job id by ref. */
export interface FlowResult {
  flowId: string;
  jobs: Record<string, string>;
}

/** One dependency as `ctx.dependencies()` shows it (keyed by its ref in the flow, else its id). */
export interface DependencyState {
  id: string;
  status: JobStatus;
  /** Its handler's result once done, else null. */
  result: unknown;
}

/** A job's place in a dependency graph (SPEC §10): the ids it depends on and the ids depending on it. */
export interface JobDependencies {
  /** Jobs this one waits for, ascending. */
  dependsOn: string[];
  /** Jobs that wait for this one, ascending. */
  dependents: string[];
}

/**
 * A bounded view of a job's place in a dependency graph (SPEC §10, §5): the first ids on each
 * side, ascending, and how many there are — a flow may give one job a million dependents.
 * Counts are exact up to 10,000; past that the count is 10,000 and its `…Exact` flag false.
 */
export interface JobDependencySummary {
  /** The first jobs this one waits for, ascending (at most the `limit` asked for). */
  dependsOn: string[];
  /** How many jobs this one waits for (10,000 at most: see `dependsOnCountExact`). */
  dependsOnCount: number;
  /** False when there are more than `dependsOnCount` (the count stopped at 10,000). */
  dependsOnCountExact: boolean;
  /** The first jobs that wait for this one, ascending (at most the `limit` asked for). */
  dependents: string[];
  /** How many jobs wait for this one (10,000 at most: see `dependentsCountExact`). */
  dependentsCount: number;
  /** False when there are more than `dependentsCount` (the count stopped at 10,000). */
  dependentsCountExact: boolean;
}

/** A flow (SPEC §10): its jobs, oldest first, and the edges between them. */
export interface FlowGraph {
  flowId: string;
  jobs: Job[];
  /** `job` depends on `dependsOn` (ids); dependencies outside the flow are included. */
  edges: { job: string; dependsOn: string }[];
  /** The flow has more jobs than the `limit` asked for: the newest are left out (with their edges). */
  truncated: boolean;
}

/** Dedupe modes (SPEC §8), each enforced by the database. */
export interface DedupeOptions {
  /**
   * 'active' (default): one pending or running job per key. 'pending': one queued and one
   * running job per key — an enqueue while the key's job runs queues one more, which starts
   * when the running one has ended. Not with `windowMs` or `replace`.
   */
  scope?: 'active' | 'pending';
  /**
   * Throttle: the key stays taken this long after its holder was created, finished or not; an
   * enqueue meanwhile returns the holder (`created: false`).
   */
  windowMs?: number;
  /**
   * Debounce: a hit on a *pending* holder replaces its payload, priority and run time
   * (`replaced: true`); a running holder is never changed.
   */
  replace?: boolean;
  /** With `replace`: a holder's run time is never pushed past its createdAt + maxWaitMs. */
  maxWaitMs?: number;
}

/**
 * Anything with pg's `query(text, values)`: a `pg.Client`, `pg.PoolClient` or `pg.Pool`, or an
 * ORM's or driver's transaction through `skiplock/adapters` (`fromKysely(trx)`, …).
 */
export interface Queryable {
  query(text: string, values?: unknown[]): Promise<{ rows: unknown[] }>;
}

/** Per-call options of `enqueue` and `enqueueMany`. */
export interface EnqueueCallOptions {
  /**
   * A client inside the caller's open transaction: the job then exists if and only if that
   * transaction commits (SPEC §1.6), and the wake-up notification is delivered at its commit.
   */
  client?: Queryable;
}

/** One entry of `enqueueMany`. */
export interface JobSpec extends EnqueueOptions {
  task: string;
  payload?: unknown;
}

/** Result of one enqueue. `created: false` is a dedupe hit; `id` is then the active holder's. */
export interface EnqueueResult {
  id: string;
  created: boolean;
  /** `dedupe.replace`: the pending holder took this call's payload, priority and run time. */
  replaced?: boolean;
}

/** Options of `claim`. */
export interface ClaimOptions {
  /** Most jobs to claim in this one statement (default 1, at most 1000). */
  limit?: number;
  /** Lease length in milliseconds (default 120 000). */
  leaseMs?: number;
  /** Only these queues. */
  queues?: readonly string[];
  /** Only these tasks. */
  tasks?: readonly string[];
}

/** Options of `list`. Results are newest first; pass the last id you saw as `after`. */
export interface ListOptions {
  status?: JobStatus;
  task?: string;
  queue?: string;
  /** 1–1000, default 50. */
  limit?: number;
  /** Keyset cursor: only jobs with an id lower than this one. */
  after?: string;
}

/**
 * One bounded page of `listPage`, newest first. `next` is the cursor to pass as `after` for
 * the following page: the last job's id when the page is full; the lowest id examined when the
 * page is not full because its window of rows ran out (older jobs may still match); `null`
 * when nothing older matches.
 */
export interface JobPage {
  jobs: Job[];
  next: string | null;
}

/** What `cancelOrThrow` did. */
export interface CancelOutcome {
  id: string;
  /** `cancelled` (it was pending), or `running` with cancellation requested (its worker aborts it). */
  status: 'cancelled' | 'running';
  /** True when the job was running: cancellation was requested, its worker aborts it. */
  wasRunning: boolean;
}

/**
 * What `requeueOrThrow` did: the dead job is pending again, attempts reset — or waiting, when a
 * job it depends on is not done (SPEC §10: one was requeued meanwhile).
 */
export interface RequeueOutcome {
  id: string;
  status: 'pending' | 'waiting';
}

/**
 * One durable step of a job (SPEC §12, `queue.steps(id)`): a `step`'s value; a `sleep`'s
 * `{ until }` (an ISO instant); an `event` wait's `{ payload }`, or null after its timeout —
 * `pending` while the wait is not answered yet (then `value` is null and `completedAt` when it
 * began).
 */
export interface JobStep {
  name: string;
  kind: 'step' | 'sleep' | 'event';
  value: unknown;
  completedAt: Date;
  /** An event wait not answered yet. */
  pending?: boolean;
  /** The event waited for (kind 'event'). */
  event?: string;
  /** A sleep's instant, or an event wait's timeout. */
  wakeAt?: Date | null;
}

/** Options of `requeue`. */
export interface RequeueOptions {
  /** §12 delete the job's stored steps: it runs from scratch (default false: completed steps are kept). */
  resetSteps?: boolean;
}

/** Options of `emitEvent`. */
export interface EmitEventOptions {
  /** Emit inside your open transaction (READ COMMITTED): set, and its waiters woken, iff it commits. */
  client?: Queryable;
}

/** Options of `prune`. */
export interface PruneOptions {
  /** Delete finished jobs last updated at least this long ago. */
  olderThanMs: number;
  /** Finished statuses to delete (default all three: done, dead, cancelled). */
  statuses?: readonly ('done' | 'dead' | 'cancelled')[];
}

/**
 * The operational snapshot (SPEC §3). Live states (pending, running) are exact; finished states
 * are exact up to 10,000 rows each (a bounded index read) and estimated from table statistics above that (done is then not read at all), so the snapshot stays cheap on a table of millions of finished jobs (SPEC §7).
 */
export interface OpsSnapshot {
  /** Jobs whose dependencies are not all done yet (SPEC §10): not backlog. */
  waiting: number;
  pending: number;
  running: number;
  done: number;
  dead: number;
  cancelled: number;
  /** Jobs that went dead in the last hour. */
  dead1h: number;
  /** Running with an expired lease, or running longer than the stuck threshold (default 10 min). */
  stuckRunning: number;
  /** Age in seconds of the oldest pending job that is due (run_after passed); 0 when none. */
  oldestPendingSec: number;
  /** Jobs whose last error, in the last hour, was a `JobDeadlineExceeded`. */
  deadline1h: number;
  /** Statuses whose count above is an estimate. Empty when every count is exact. */
  estimated: JobStatus[];
  /**
   * With a read replica (`readConnectionString`): how far behind the primary it was when
   * `ops()` began, in ms. 0 when it had replayed everything the primary had written by then.
   * Otherwise `ops()` waits for it to get there, at most a second: the figure is how long that
   * took (an idle primary does not inflate it: a replica one commit behind shows a few ms),
   * and past a second it is the age of the last transaction the replica replayed (an upper
   * bound that grows while replay is stopped). `null` without a read replica (every figure is
   * then the primary's), or when a replica stuck for a second has replayed no transaction since
   * it started and cannot tell. See docs/replica.md.
   */
  replicaLagMs: number | null;
}

/** Backoff settings: delay before retry n is `min(capMs, baseMs·2^(n-1))`, then jittered. */
export interface BackoffOptions {
  baseMs?: number;
  capMs?: number;
  /** `none` (default): exact; `full`: uniform in [0, d]; `equal`: uniform in [d/2, d]. */
  jitter?: BackoffJitter;
}

export type BackoffJitter = 'none' | 'full' | 'equal';

/**
 * A pino-compatible logger (pino, or anything with these methods taking `(object, message)`).
 * Skiplock never prints: without a logger it stays silent and reports through return values,
 * errors and events.
 */
export interface Logger {
  debug?(fields: object, message?: string): void;
  info?(fields: object, message?: string): void;
  warn?(fields: object, message?: string): void;
  error?(fields: object, message?: string): void;
}

/** How many ticks missed while no worker ran are enqueued when one runs again (SPEC §8). */
export type CatchUp = 'latest' | 'none' | number;

/** `queue.schedule(name, options)` (SPEC §8). */
export interface ScheduleOptions {
  /** 5 fields (minute hour day-of-month month day-of-week), 6 (seconds first), or `@daily` etc. */
  cron: string;
  /** IANA time zone the cron fields are read in. Default 'UTC'. */
  tz?: string;
  task: string;
  payload?: unknown;
  queue?: string;
  priority?: number;
  maxAttempts?: number;
  timeoutMs?: number | null;
  /** Default false: a tick is skipped while the job of the previous tick is pending or running. */
  overlap?: boolean;
  /**
   * Ticks missed while no worker ran: 'latest' (default) enqueues only the latest, 'none' none
   * (a tick runs only when it is at most a minute late), a number N the latest N (N > 1 needs
   * `overlap: true`).
   */
  catchUp?: CatchUp;
}

/** A stored schedule (SPEC §8). */
export interface Schedule {
  name: string;
  cron: string;
  tz: string;
  task: string;
  payload: unknown;
  queue: string;
  priority: number;
  maxAttempts: number;
  timeoutMs: number | null;
  overlap: boolean;
  catchUp: CatchUp;
  paused: boolean;
  /** The next tick to fire (while paused: the one due when it was paused). */
  nextRunAt: Date;
  /** The latest tick that enqueued a job, or null. */
  lastRunAt: Date | null;
  /** The job of that tick, or null. */
  lastJobId: string | null;
  createdAt: Date;
  updatedAt: Date;
}

/** One sequence key as `queue.sequences()` lists it (SPEC §11). */
export interface SequenceInfo {
  key: string;
  /** The job that holds the key (pending, running, waiting for its retry, or dead), else the next one. */
  headId: string;
  headStatus: JobStatus;
  /** Jobs queued behind the head. */
  queued: number;
}

/** `queue.sequences(options)`: which keys, how many, after which key (keyset, key order). */
export interface SequencesOptions {
  /** Only keys whose head is dead (blocked until it is requeued or cancelled). */
  blocked?: boolean;
  /** At most this many keys (default 100, at most 1,000). */
  limit?: number;
  /** Keys after this one (the last key of the previous page). */
  after?: string;
}

/** Priority aging of a queue (SPEC §11): a waiting job's effective priority drops with time. */
export interface PriorityAging {
  /** Every this many milliseconds a due job waits… */
  everyMs: number;
  /** …its effective priority number drops by this much (default 1)… */
  step?: number;
  /** …but never below this (default 0). */
  floor?: number;
}

/** A queue's configuration (SPEC §8). */
export interface QueueConfig {
  name: string;
  paused: boolean;
  /** Most jobs of this queue running at once, across every worker; null: no limit. */
  concurrency: number | null;
  /** Most starts per `periodMs`, across every worker; null: no limit. */
  rateLimit: { limit: number; periodMs: number } | null;
  /** Not supported yet: always null. */
  groupConcurrency: number | null;
  /** Not supported yet: always null. */
  groupRateLimit: { limit: number; periodMs: number } | null;
  /** Priority aging (SPEC §11), or null. */
  priorityAging: Required<PriorityAging> | null;
}

/** `configureQueue(name, options)`: a setting left out stays as it is; `null` clears a limit. */
export interface QueueConfigOptions {
  paused?: boolean;
  concurrency?: number | null;
  rateLimit?: { limit: number; periodMs: number } | null;
  groupConcurrency?: number | null;
  groupRateLimit?: { limit: number; periodMs: number } | null;
  /** Priority aging (SPEC §11); `null` turns it off. */
  priorityAging?: PriorityAging | null;
}

/** A queue's configuration and its live counts (SPEC §8). */
export interface QueueInfo extends QueueConfig {
  /** Jobs whose dependencies are not all done yet (SPEC §10). */
  waiting: number;
  pending: number;
  running: number;
}
