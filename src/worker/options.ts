import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import { computeBackoff } from '../core/backoff.js';
import {
  optionalNameList,
  optionsObject,
  rejectUnknownKeys,
  requireInt,
  requireMs,
  requireName,
} from '../core/validate.js';
import { ValidationError } from '../errors.js';
import { Queue, type QueueOptions } from '../queue.js';
import { batchOptions, isTask, payloadRejected, validatePayload } from '../task/task.js';
import type { BatchHandler, BatchItem, BatchOptions, BatchTask, Handler, Task } from '../task-types.js';
import type { BackoffOptions, Logger } from '../types.js';

/** The handler types live on the ground floor (src/task-types.ts); the Worker's options name them. */
export type { Handler, JobContext } from '../task-types.js';

/** A handler with per-task settings. */
export interface TaskDefinition<P = unknown> {
  handler: Handler<P>;
  /**
   * §11 makes it a batch task: `handler` then gets the items of up to `maxSize` jobs at once
   * (see {@link BatchTaskDefinition}, the same entry with the batch handler's types).
   */
  batch?: BatchOptions;
  /** Default deadline of this task's jobs (a job's own `timeoutMs` wins). */
  timeoutMs?: number;
}

/**
 * §11 a batch task on the Worker's map: `tasks: { 'email.send': { batch: { maxSize: 100 }, handler } }`.
 * `timeoutMs` bounds each call of the handler. (A {@link TaskDefinition} with `batch`, typed for
 * the batch handler: annotate an entry with it, or its handler's `items`, to have them typed.)
 */
export interface BatchTaskDefinition<P = unknown> {
  batch: BatchOptions;
  handler: BatchHandler<P>;
  timeoutMs?: number;
}

/**
 * §11 how the worker runs a batch task: the handler gets the items of the jobs whose payloads
 * passed the task's schema; `rejected` holds, by position, the PermanentError of each job whose
 * payload did not (it goes dead at once, never given to the handler).
 */
export interface BatchEntry {
  maxSize: number;
  maxWaitMs: number;
  /** The items' payloads, checked against the task's schema (a defined task), or as stored. */
  prepare(jobs: readonly import('../types.js').ClaimedJob[]): Promise<{
    items: BatchItem[];
    rejected: Map<number, Error>;
  }>;
  handler: BatchHandler;
}

/** How the worker runs one task. */
export interface TaskEntry {
  handler: Handler;
  /** §11 set for a batch task (its jobs run through `batch.handler`, never `handler`). */
  batch: BatchEntry | null;
  /** Default deadline of the task's jobs. */
  timeoutMs: number | null;
  /** The task's own backoff (§9), else the worker's, else the queue's. */
  backoff: BackoffOptions | null;
  /** §9 `false`: the error is not worth another attempt (the job goes dead at once). */
  retryIf: ((error: unknown) => boolean) | null;
}

/** Task name → handler (or definition). */
// biome-ignore lint/suspicious/noExplicitAny: each task has its own payload type.
export type TaskMap = Record<string, Handler<any> | TaskDefinition<any>>;

/** Options of {@link Worker}. */
export interface WorkerOptions {
  /** The queue to work on; or give `connectionString` (and `schema`) and the worker makes its own. */
  queue?: Queue;
  connectionString?: string;
  schema?: string;
  /**
   * Handlers by task name, or tasks made by `defineTask` (SPEC §9: their payloads are checked
   * against their schemas before the handler runs). The worker claims only these tasks.
   */
  // biome-ignore lint/suspicious/noExplicitAny: each task has its own payload type.
  tasks: TaskMap | readonly (Task<any, any, any> | BatchTask<any, any>)[];
  /** Most jobs running at once (default 10). */
  concurrency?: number;
  /** Lease length (default 120 000 ms); renewed about every third of it. */
  leaseMs?: number;
  /**
   * Fallback poll interval (default 30 000 ms with LISTEN, 1 000 ms with `listen: false`); each
   * delay is drawn within ±25 % of it, so workers started together do not poll in step. With
   * LISTEN it only guards against lost notifications: wake-up does not wait for it.
   */
  pollIntervalMs?: number;
  /** Only jobs of these queues (default: every queue). */
  queues?: string[];
  /** Default: `<hostname>-<pid>-<random>`, unique per Worker. */
  workerId?: string;
  /** Retry delays after a failure (default: the queue's). */
  backoff?: BackoffOptions;
  /** LISTEN for wake-ups (default true). `false` for transaction-pooling proxies (PgBouncer): poll instead. */
  listen?: boolean;
  /**
   * Run the worker's statements as named prepared statements. Only with `connectionString`: a
   * `queue` you pass keeps its own setting (giving both is a ValidationError). Default: the
   * value of `listen` — `listen: false` is how you run behind PgBouncer in transaction mode,
   * where prepared statements fail (42P05/26000), so it turns them off too unless you set
   * `preparedStatements: true` (PgBouncer ≥ 1.21 with `max_prepared_statements`). See
   * docs/pgbouncer.md.
   *
   * @example
   * new Worker({ connectionString, listen: false, tasks }); // behind PgBouncer: polls, no prepared statements
   */
  preparedStatements?: boolean;
  /** How often this worker reaps expired leases (default 30 000 ms, ±20 % jitter). */
  reapIntervalMs?: number;
  /** How long a handler may ignore its aborted signal before its slot is freed (default 5 000 ms). */
  abortGraceMs?: number;
  /** pino-compatible logger; the worker never prints without one. */
  logger?: Logger;
  /**
   * Write completions that finish together in one statement, each row still guarded by its
   * own lease (default true). A completion is written within one turn of the event loop.
   */
  batchCompletions?: boolean;
  /**
   * How many jobs the worker may claim ahead of its free slots, held in claim order until a slot
   * frees (default: `concurrency`, at least 50; at most 10 000). Claiming then overlaps running,
   * in larger batches. Jobs whose outcome is being written do not count, up to
   * `concurrency + prefetch` of them: the next claim overlaps their write (a crash loses those
   * outcomes too). Held jobs keep their leases (renewed like running ones) and are given back
   * at once on stop(), without spending an attempt. `0` claims only for free slots, and only once
   * every outcome is written: a worker then never holds a job it cannot start, which suits few,
   * long jobs shared by many workers.
   */
  prefetch?: number;
  /**
   * The retention of the worker's own Queue (see QueueOptions.retention): only with
   * `connectionString`; a `queue` you pass keeps its own.
   */
  retention?: QueueOptions['retention'];
  /**
   * OpenTelemetry (SPEC §9): each attempt runs in a CONSUMER span linked to its job's producer
   * span. Default: the queue's `telemetry` (true unless set off); `false` records no spans for
   * this worker's jobs. With `connectionString`, it is also the setting of the worker's own Queue.
   */
  telemetry?: boolean;
}

/** Settings after validation and defaults. */
export interface WorkerSettings {
  workerId: string;
  tasks: Map<string, TaskEntry>;
  /** The tasks of single-job handlers: what the worker's main claim loop claims. */
  taskNames: string[];
  /** §11 the batch tasks: each has a claim loop of its own. */
  batchTaskNames: string[];
  queues: string[] | null;
  concurrency: number;
  leaseMs: number;
  pollIntervalMs: number;
  listen: boolean;
  /** For the worker's own Queue; null when the caller passed `queue`. */
  preparedStatements: boolean | null;
  reapIntervalMs: number;
  abortGraceMs: number;
  backoff: BackoffOptions | null;
  logger: Logger | undefined;
  batchCompletions: boolean;
  prefetch: number;
  /** §9 consumer spans: on, off, or null for the queue's setting. */
  telemetry: boolean | null;
}

const KEYS = [
  'queue',
  'connectionString',
  'schema',
  'tasks',
  'concurrency',
  'leaseMs',
  'pollIntervalMs',
  'queues',
  'workerId',
  'backoff',
  'listen',
  'preparedStatements',
  'reapIntervalMs',
  'abortGraceMs',
  'logger',
  'batchCompletions',
  'prefetch',
  'retention',
  'telemetry',
];

/** Validates the options of a Worker (everything but queue/connection). */
export function workerSettings(options: WorkerOptions): WorkerSettings {
  const opts = optionsObject(options, 'options');
  rejectUnknownKeys(opts, KEYS, 'options');
  const listen = requireBoolean(opts.listen ?? true, 'listen');
  const backoff = opts.backoff === undefined ? null : optionsObject(opts.backoff, 'backoff');
  if (backoff) computeBackoff(1, backoff.baseMs, backoff.capMs, backoff.jitter); // validates
  const tasks = taskMap(opts.tasks);
  const concurrency =
    opts.concurrency === undefined ? 10 : requireInt(opts.concurrency, 'concurrency', 1, 10_000);
  const leaseMs = opts.leaseMs === undefined ? 120_000 : requireInt(opts.leaseMs, 'leaseMs', 100);
  // §11 a batch task's wait for company must leave most of the lease to the batch itself
  for (const [name, entry] of tasks) {
    if (entry.batch && entry.batch.maxWaitMs * 3 >= leaseMs)
      throw new ValidationError(
        `tasks[${JSON.stringify(name)}].batch.maxWaitMs`,
        `must be less than a third of leaseMs (${leaseMs} ms): got ${entry.batch.maxWaitMs} ms`,
      );
  }
  return {
    workerId:
      opts.workerId === undefined
        ? `${hostname()}-${process.pid}-${randomBytes(3).toString('hex')}`
        : requireName(opts.workerId, 'workerId'),
    tasks,
    taskNames: [...tasks.keys()].filter((name) => tasks.get(name)?.batch === null),
    batchTaskNames: [...tasks.keys()].filter((name) => tasks.get(name)?.batch !== null),
    queues: optionalNameList(opts.queues, 'queues'),
    concurrency,
    leaseMs,
    pollIntervalMs:
      opts.pollIntervalMs === undefined
        ? listen
          ? 30_000
          : 1_000
        : requireInt(opts.pollIntervalMs, 'pollIntervalMs', 10),
    listen,
    preparedStatements: preparedStatements(opts, listen),
    reapIntervalMs:
      opts.reapIntervalMs === undefined ? 30_000 : requireInt(opts.reapIntervalMs, 'reapIntervalMs', 10),
    abortGraceMs: opts.abortGraceMs === undefined ? 5_000 : requireMs(opts.abortGraceMs, 'abortGraceMs'),
    backoff,
    logger: opts.logger,
    batchCompletions: requireBoolean(opts.batchCompletions ?? true, 'batchCompletions'),
    prefetch:
      opts.prefetch === undefined
        ? Math.min(10_000, Math.max(50, concurrency))
        : requireInt(opts.prefetch, 'prefetch', 0, 10_000),
    telemetry: opts.telemetry === undefined ? null : requireBoolean(opts.telemetry, 'telemetry'),
  };
}

function taskMap(tasks: unknown): WorkerSettings['tasks'] {
  if (Array.isArray(tasks)) return taskList(tasks);
  if (typeof tasks !== 'object' || tasks === null) {
    throw new ValidationError(
      'tasks',
      'must be an object mapping task names to handler functions, or an array of tasks made by defineTask',
    );
  }
  const map: WorkerSettings['tasks'] = new Map();
  for (const [name, value] of Object.entries(tasks)) {
    requireName(name, 'tasks');
    const field = `tasks[${JSON.stringify(name)}]`;
    if (isTask(value)) {
      if (value.name !== name) {
        throw new ValidationError(
          field,
          `is the task ${JSON.stringify(value.name)}: its key must be its name`,
        );
      }
      map.set(name, taskEntry(value));
    } else if (typeof value === 'function') {
      map.set(name, {
        handler: value as Handler,
        batch: null,
        timeoutMs: null,
        backoff: null,
        retryIf: null,
      });
    } else if (typeof value === 'object' && value !== null && typeof value.handler === 'function') {
      rejectUnknownKeys(value, ['handler', 'timeoutMs', 'batch'], field);
      const timeoutMs =
        value.timeoutMs === undefined ? null : requireInt(value.timeoutMs, `${field}.timeoutMs`, 1);
      const batch =
        'batch' in value && value.batch !== undefined
          ? batchEntry(batchOptions(value.batch, `${field}.batch`), value.handler as BatchHandler, null)
          : null;
      map.set(name, { handler: value.handler as Handler, batch, timeoutMs, backoff: null, retryIf: null });
    } else {
      throw new ValidationError(
        field,
        'must be a handler function, { handler, timeoutMs } or { batch, handler }',
      );
    }
  }
  if (map.size === 0) throw new ValidationError('tasks', 'must name at least one task with its handler');
  return map;
}

/** `tasks: [sendEmail, resizeImage]`: tasks made by defineTask, each name once. */
function taskList(tasks: readonly unknown[]): WorkerSettings['tasks'] {
  const map: WorkerSettings['tasks'] = new Map();
  tasks.forEach((task, i) => {
    if (!isTask(task)) {
      throw new ValidationError(
        `tasks[${i}]`,
        'must be a task made by defineTask (or pass an object of handlers)',
      );
    }
    if (map.has(task.name))
      throw new ValidationError(`tasks[${i}]`, `repeats the task ${JSON.stringify(task.name)}`);
    map.set(task.name, taskEntry(task));
  });
  if (map.size === 0) throw new ValidationError('tasks', 'must name at least one task');
  return map;
}

/**
 * A defined task as the worker runs it (§9): its payload checked against its schema first — a
 * payload that fails sends the job dead at once (a PermanentError), its handler never runs — and
 * the handler given the schema's output.
 */
function taskEntry(task: Task<unknown, unknown, unknown>): TaskEntry {
  return {
    batch:
      task.batch === undefined
        ? null
        : batchEntry(
            batchOptions(task.batch, `task ${JSON.stringify(task.name)}: batch`),
            task.handler as unknown as BatchHandler,
            task,
          ),
    handler: async (payload, ctx) => {
      const result = await validatePayload(task, payload);
      if (result.issues !== undefined) throw payloadRejected(task, result.issues);
      return task.handler(result.value, ctx);
    },
    timeoutMs: task.timeoutMs ?? null,
    backoff: task.backoff ?? null,
    retryIf: task.retryIf ?? null,
  };
}

/**
 * §11 a batch task as the worker runs it. With a defined task each payload is checked against
 * its schema first: a job whose payload fails goes dead at once (PermanentError), and the handler
 * gets the others, each with the schema's output.
 */
function batchEntry(
  options: Required<BatchOptions>,
  handler: BatchHandler,
  task: Task<unknown, unknown, unknown> | null,
): BatchEntry {
  return {
    maxSize: options.maxSize,
    maxWaitMs: options.maxWaitMs,
    handler,
    prepare: async (jobs) => {
      const items: BatchItem[] = [];
      const rejected = new Map<number, Error>();
      for (let i = 0; i < jobs.length; i++) {
        const job = jobs[i] as (typeof jobs)[number];
        if (task === null) {
          items.push({ payload: job.payload, job });
          continue;
        }
        try {
          const result = await validatePayload(task, job.payload);
          if (result.issues !== undefined) rejected.set(i, payloadRejected(task, result.issues));
          else items.push({ payload: result.value, job });
        } catch (error) {
          rejected.set(i, error instanceof Error ? error : new Error(String(error)));
        }
      }
      return { items, rejected };
    },
  };
}

/** The worker's own Queue uses prepared statements unless told otherwise or `listen: false`. */
function preparedStatements(opts: WorkerOptions, listen: boolean): boolean | null {
  if (opts.queue !== undefined) {
    if (opts.preparedStatements !== undefined) {
      throw new ValidationError(
        'preparedStatements',
        'set it on the Queue you pass as `queue` (new Queue({ preparedStatements: false })), not on the Worker',
      );
    }
    return null;
  }
  return opts.preparedStatements === undefined
    ? listen
    : requireBoolean(opts.preparedStatements, 'preparedStatements');
}

function requireBoolean(value: unknown, field: string): boolean {
  if (typeof value !== 'boolean') throw new ValidationError(field, 'must be true or false');
  return value;
}

/** The queue a worker works on: the one it was given, or one of its own made from its options. */
export function workerQueue(
  options: WorkerOptions,
  settings: WorkerSettings,
): { queue: Queue; owns: boolean } {
  if (options.queue !== undefined) {
    if (!(options.queue instanceof Queue)) throw new ValidationError('queue', 'must be a skiplock Queue');
    if (options.connectionString !== undefined || options.schema !== undefined) {
      throw new ValidationError('queue', 'give either queue or connectionString/schema, not both');
    }
    if (options.retention !== undefined) {
      throw new ValidationError(
        'retention',
        'set it on the Queue you pass as `queue` (new Queue({ retention })), not on the Worker',
      );
    }
    return { queue: options.queue, owns: false };
  }
  const queue = new Queue({
    ...(options.connectionString === undefined ? {} : { connectionString: options.connectionString }),
    ...(options.schema === undefined ? {} : { schema: options.schema }),
    leaseMs: settings.leaseMs,
    poolSize: Math.min(settings.concurrency + 2, 20),
    preparedStatements: settings.preparedStatements ?? true,
    ...(options.retention === undefined ? {} : { retention: options.retention }),
    ...(settings.telemetry === null ? {} : { telemetry: settings.telemetry }),
    ...(settings.logger ? { logger: settings.logger } : {}),
  });
  return { queue, owns: true };
}
