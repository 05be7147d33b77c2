/**
 * Public types of tasks (SPEC §9), on the ground floor beside src/types.ts: the Standard Schema a
 * task's payload is checked with, a task's settings, the task itself, its handler and the
 * context the handler receives. Types only, so that every layer can name them; what gives them
 * behaviour sits above — `defineTask` in src/task/task.ts, the Worker that calls handlers in
 * src/worker/.
 */
import type { BackoffOptions, ClaimedJob, DependencyState, EnqueueOptions } from './types.js';

/** One problem a schema found (the Standard Schema issue shape). */
export interface SchemaIssue {
  readonly message: string;
  readonly path?: ReadonlyArray<PropertyKey | { readonly key: PropertyKey }> | undefined;
}

/** A validation's outcome: the (possibly transformed) value, or the issues. */
export type SchemaResult<Output> =
  | { readonly value: Output; readonly issues?: undefined }
  | { readonly issues: ReadonlyArray<SchemaIssue> };

/**
 * The Standard Schema interface (version 1), as Skiplock reads it: zod ≥ 3.24, valibot ≥ 1 and
 * arktype ≥ 2 implement it, and so can any validator.
 */
export interface StandardSchemaV1<Input = unknown, Output = Input> {
  readonly '~standard': {
    readonly version: 1;
    readonly vendor: string;
    readonly validate: (value: unknown) => SchemaResult<Output> | Promise<SchemaResult<Output>>;
    readonly types?: { readonly input: Input; readonly output: Output } | undefined;
  };
}

/** What a schema accepts (the payload type of `enqueue`). */
export type InferInput<S extends StandardSchemaV1> = NonNullable<S['~standard']['types']>['input'];
/** What a schema gives (the payload type of the handler). */
export type InferOutput<S extends StandardSchemaV1> = NonNullable<S['~standard']['types']>['output'];

/** The settings a task carries besides its name, schema and handler. */
export interface TaskSettings {
  /** Queue of its jobs (default 'default'); an enqueue's own `queue` wins. */
  queue?: string;
  /** Priority of its jobs (lower runs first; default 100); an enqueue's own wins. */
  priority?: number;
  /** Attempts before its jobs go dead (default 3); an enqueue's own wins. */
  maxAttempts?: number;
  /** Deadline of one attempt; an enqueue's own `timeoutMs` wins. */
  timeoutMs?: number;
  /** Backoff between its attempts (instead of the worker's and the queue's). */
  backoff?: BackoffOptions;
  /** `false`: this error is not worth another attempt — the job goes dead at once. */
  retryIf?: (error: unknown) => boolean;
}

/**
 * A defined task: pass it to `enqueue`/`enqueueMany` and to a Worker's `tasks`. `Input` is the
 * payload an enqueue takes, `Output` what the handler receives, `Result` what it returns.
 */
export interface Task<Input = unknown, Output = Input, Result = unknown> extends Readonly<TaskSettings> {
  readonly name: string;
  readonly schema: StandardSchemaV1<Input, Output>;
  readonly handler: (payload: Output, ctx: JobContext<Input>) => Result | Promise<Result>;
  /** Marks a defined task (as opposed to a task name). */
  readonly kind: 'skiplock.task';
  /** §11 set on a batch task ({@link BatchTask}): its handler gets many jobs at once. */
  readonly batch?: BatchOptions;
}

/**
 * SPEC §11 how a batch task's jobs are gathered: at most `maxSize` jobs (1–1,000) claimed in one
 * statement; `maxWaitMs` (default 0) is how long the worker may wait, after a claim that came
 * back short, for a trickle of jobs to gather before it claims the next batch.
 */
export interface BatchOptions {
  readonly maxSize: number;
  readonly maxWaitMs?: number;
}

/** One job of a batch: its payload (the schema's output for a defined task) and the claimed job. */
export interface BatchItem<P = unknown, Stored = P> {
  readonly payload: P;
  readonly job: ClaimedJob<Stored>;
}

/**
 * What a batch handler receives besides its items. Per-job tools (`progress`, `transaction`,
 * `dependencies`) belong to single-job handlers and are not offered here.
 */
export interface BatchContext {
  /**
   * Aborted when the batch must stop: its deadline passed (`JobDeadlineExceeded`), the worker lost
   * the lease of any of its jobs (`LeaseLostError`), or the worker is stopping past its timeout.
   * A cancelled job does not abort the batch: it ends `cancelled` whatever the handler returns.
   */
  readonly signal: AbortSignal;
}

/**
 * SPEC §11 a batch task's handler: up to `maxSize` jobs of its task at once, in claim order.
 * Return nothing to complete them all (result null), or an array of the same length: per job an
 * `Error` fails it alone (retry, backoff, dead-letter by its own attempts; a `PermanentError`
 * sends it dead), any other value is its result. A throw, or an array of another length, fails
 * every job of the batch with that error.
 */
export type BatchHandler<P = unknown, Stored = P> = (
  items: BatchItem<P, Stored>[],
  ctx: BatchContext,
) => BatchResult;

/** What a batch handler returns: nothing, or one outcome per item (see {@link BatchHandler}). */
// biome-ignore lint/suspicious/noConfusingVoidType: an async handler that returns nothing is typed Promise<void>.
export type BatchResult = Promise<unknown[] | undefined | void> | unknown[] | undefined | void;

/**
 * A task defined with `batch` (SPEC §11): enqueued like any task (one job per payload), run by
 * its {@link BatchHandler} many jobs at a time.
 */
export interface BatchTask<Input = unknown, Output = Input>
  extends Omit<Task<Input, Output, unknown>, 'handler' | 'batch'> {
  readonly batch: BatchOptions;
  readonly handler: BatchHandler<Output, Input>;
}

/** What a handler receives besides the payload. */
export interface JobContext<P = unknown> {
  /** The claimed job, with its lease. */
  job: ClaimedJob<P>;
  /**
   * Aborted when the job must stop: its deadline passed (reason: a `JobDeadlineExceeded`), it
   * was cancelled, the worker lost its lease, or the worker is stopping past its timeout.
   */
  signal: AbortSignal;
  /**
   * Runs `fn` in one database transaction that also completes the job with `fn`'s return value:
   * the handler's own writes and the completion commit together or not at all, so they happen
   * exactly once even if the worker crashes at the worst moment. Call it at most once.
   */
  transaction<T>(fn: (client: import('pg').PoolClient) => Promise<T>): Promise<T>;
  /**
   * Reports progress (any JSON value): stored on the job, shown by `get`, the API and the
   * dashboard, kept after the job finishes (SPEC §9). The first report of an attempt is written
   * at once, later ones coalesced (at most four writes a second, the latest value wins); the
   * last one is written before the job's outcome (inside ctx.transaction: with the completion).
   * Each write renews the lease. Returns at once (nothing to await); a value JSON cannot hold
   * (BigInt, a cycle, NaN or ±Infinity anywhere in it) throws a ValidationError naming its path
   * (`progress.rate`) and writes nothing. A runaway's reports (abandoned, stopped, lease lost)
   * are dropped.
   */
  progress(value: unknown): void;
  /**
   * This job's dependencies (SPEC §10) with their status and result — keyed by ref for those of
   * its own flow, else by job id. Empty for a job without dependencies.
   */
  dependencies(): Promise<Record<string, DependencyState>>;
  /**
   * A durable step (SPEC §12): on the first run that reaches it, runs `fn` and checkpoints its
   * value (JSON, §1.11) under the job's lease, resolving only after that committed; on every
   * later run of the job (a retry, after a crash, a sleep) it returns the stored value at once
   * without running `fn`. With `{ transaction: true }` `fn` gets a client inside one transaction
   * that also records the step, so its database writes happen exactly once. If `fn` throws,
   * nothing is stored and the error propagates. Names are unique within a run.
   *
   * @example
   * const charge = await ctx.step('charge', () => payments.charge(order));
   * await ctx.step('ledger', (client) => client.query('INSERT …'), { transaction: true });
   */
  step<T>(name: string, fn: () => Promise<T> | T): Promise<T>;
  step<T>(
    name: string,
    fn: (client: import('pg').PoolClient) => Promise<T> | T,
    options: { transaction: true },
  ): Promise<T>;
  step<T>(
    name: string,
    fn: (client: import('pg').PoolClient) => Promise<T> | T,
    options?: { transaction?: boolean },
  ): Promise<T>;
  /**
   * Suspends the job for `ms` (or until `until`), durably: the job goes back to `pending` at
   * that instant (database time), its lease and slot freed, the attempt not spent; rejects with
   * `JobSuspended` — let it propagate. On a later run past the instant it resolves at once.
   */
  sleep(name: string, duration: number | { until: Date }): Promise<void>;
  /**
   * The payload of event `eventName` (`queue.emitEvent`): at once when it is set; else the job
   * waits (`waiting`, no lease, no slot; rejects with `JobSuspended`) until it is emitted or
   * `timeoutMs` passes, and the next run gets `{ payload }`, or null after the timeout.
   */
  waitForEvent(
    name: string,
    eventName: string,
    options?: { timeoutMs?: number },
  ): Promise<{ payload: unknown } | null>;
}

/**
 * A task's handler. Its return value becomes the job's `result`. It must be JSON-serialisable:
 * one that is not (BigInt, a cycle, NaN or ±Infinity anywhere in it) fails the attempt — retried
 * like a thrown error — with a `lastError` naming the task and the value's path (SPEC §1.11).
 */
export type Handler<P = unknown> = (payload: P, ctx: JobContext<P>) => Promise<unknown> | unknown;

/**
 * One job of `enqueueMany` for a task made by `defineTask` (SPEC §9): its payload is checked
 * against the task's schema at run time (before anything is written), its defaults used.
 */
export interface TaskJobSpec extends EnqueueOptions {
  // biome-ignore lint/suspicious/noExplicitAny: a batch mixes tasks of any payload type.
  task: Task<any, any, any>;
  payload: unknown;
}
