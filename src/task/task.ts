/**
 * Typed tasks (SPEC §9): `defineTask` ties a task name to a payload schema — any validator that
 * implements the Standard Schema interface (zod, valibot, arktype, …) — a handler, and the
 * task's defaults. `queue.enqueue(task, payload)` is then checked at compile time (the payload
 * type is the schema's input) and validated at run time before anything is written; a Worker
 * given the task validates again before its handler runs (a payload written by an older
 * producer sends the job dead at once, with the schema's issues as its lastError).
 */
import { computeBackoff } from '../core/backoff.js';
import { toNewJob } from '../core/job-spec.js';
import { optionsObject, rejectUnknownKeys, requireName } from '../core/validate.js';
import { PermanentError, ValidationError } from '../errors.js';
import type {
  BatchHandler,
  BatchOptions,
  BatchTask,
  InferInput,
  InferOutput,
  JobContext,
  SchemaIssue,
  SchemaResult,
  StandardSchemaV1,
  Task,
  TaskSettings,
} from '../task-types.js';

/** What {@link defineTask} takes. */
export interface TaskConfig<S extends StandardSchemaV1, R> extends TaskSettings {
  /** The task's name: what the jobs table stores and workers claim. */
  name: string;
  /** The payload's schema (any Standard Schema). */
  schema: S;
  /**
   * Runs one attempt with the schema's output; its return value becomes the job's result (JSON).
   * (`ctx.job.payload` is the payload as stored: the schema's input.)
   */
  handler: (payload: InferOutput<S>, ctx: JobContext<InferInput<S>>) => R | Promise<R>;
}

/**
 * What {@link defineTask} takes for a batch task (SPEC §11): `batch` and a handler that gets the
 * jobs' items (payloads typed from the schema) all at once.
 */
export interface BatchTaskConfig<S extends StandardSchemaV1> extends TaskSettings {
  name: string;
  schema: S;
  /** At most `maxSize` jobs per call (1–1,000); `maxWaitMs` (default 0) to let a trickle gather. */
  batch: BatchOptions;
  handler: BatchHandler<InferOutput<S>, InferInput<S>>;
}

/** Most jobs in one batch: one claim statement takes at most this many. */
export const MAX_BATCH_SIZE = 1_000;
/** Longest `batch.maxWaitMs`: a batch's first job waits at most this long for company. */
export const MAX_BATCH_WAIT_MS = 60_000;

const CONFIG_KEYS = [
  'batch',
  'name',
  'schema',
  'handler',
  'queue',
  'priority',
  'maxAttempts',
  'timeoutMs',
  'backoff',
  'retryIf',
];

/**
 * Defines a task: its name, payload schema, handler and defaults, checked now (a
 * ValidationError names the field).
 *
 * @example
 * const sendEmail = defineTask({
 *   name: 'email.send',
 *   schema: z.object({ to: z.email() }),
 *   handler: async ({ to }) => ({ messageId: await mailer.send(to) }),
 *   maxAttempts: 5,
 * });
 * await queue.enqueue(sendEmail, { to: 'ada@example.com' });
 * new Worker({ queue, tasks: [sendEmail] });
 */
export function defineTask<S extends StandardSchemaV1>(
  config: BatchTaskConfig<S>,
): BatchTask<InferInput<S>, InferOutput<S>>;
export function defineTask<S extends StandardSchemaV1, R>(
  config: TaskConfig<S, R>,
): Task<InferInput<S>, InferOutput<S>, Awaited<R>>;
export function defineTask<S extends StandardSchemaV1, R>(
  config: TaskConfig<S, R> | BatchTaskConfig<S>,
): Task<InferInput<S>, InferOutput<S>, Awaited<R>> | BatchTask<InferInput<S>, InferOutput<S>> {
  const opts = optionsObject(config, 'task');
  rejectUnknownKeys(opts, CONFIG_KEYS, 'task');
  const name = requireName(opts.name, 'task.name');
  const at = (field: string) => `task ${JSON.stringify(name)}: ${field}`;
  const standard = (opts.schema as Partial<StandardSchemaV1> | undefined)?.['~standard'];
  if (typeof standard?.validate !== 'function' || standard.version !== 1) {
    throw new ValidationError(
      at('schema'),
      'must be a Standard Schema (version 1) — a zod, valibot or arktype schema, for example',
    );
  }
  if (typeof opts.handler !== 'function') throw new ValidationError(at('handler'), 'must be a function');
  if (opts.retryIf !== undefined && typeof opts.retryIf !== 'function') {
    throw new ValidationError(at('retryIf'), 'must be a function (error) => boolean');
  }
  // the same checks an enqueue makes of these options, named after the task
  toNewJob(
    name,
    null,
    taskDefaults(opts as unknown as Task<unknown, unknown, unknown>),
    `task ${JSON.stringify(name)}: `,
  );
  if (opts.backoff !== undefined) {
    const backoff = optionsObject(opts.backoff, at('backoff'));
    rejectUnknownKeys(backoff, ['baseMs', 'capMs', 'jitter'], at('backoff'));
    try {
      computeBackoff(1, backoff.baseMs, backoff.capMs, backoff.jitter); // validates
    } catch (error) {
      if (!(error instanceof ValidationError)) throw error;
      throw new ValidationError(at(`backoff.${error.field}`), error.message.slice(error.field.length + 2));
    }
  }
  const batch =
    'batch' in opts && opts.batch !== undefined ? { batch: batchOptions(opts.batch, at('batch')) } : {};
  return Object.freeze({ ...opts, ...batch, name, kind: 'skiplock.task' }) as unknown as Task<
    InferInput<S>,
    InferOutput<S>,
    Awaited<R>
  >;
}

/**
 * §11 a task's `batch` option checked (a ValidationError names `field`), frozen, with its
 * default `maxWaitMs` (0).
 */
export function batchOptions(value: unknown, field: string): Required<BatchOptions> {
  const opts = optionsObject(value as Record<string, unknown> | undefined, field);
  rejectUnknownKeys(opts, ['maxSize', 'maxWaitMs'], field);
  const maxSize = opts.maxSize;
  if (typeof maxSize !== 'number' || !Number.isInteger(maxSize) || maxSize < 1 || maxSize > MAX_BATCH_SIZE)
    throw new ValidationError(`${field}.maxSize`, `must be an integer from 1 to ${MAX_BATCH_SIZE}`);
  const maxWaitMs = opts.maxWaitMs ?? 0;
  if (
    typeof maxWaitMs !== 'number' ||
    !Number.isFinite(maxWaitMs) ||
    maxWaitMs < 0 ||
    maxWaitMs > MAX_BATCH_WAIT_MS
  )
    throw new ValidationError(
      `${field}.maxWaitMs`,
      `must be a number of milliseconds from 0 to ${MAX_BATCH_WAIT_MS}`,
    );
  return Object.freeze({ maxSize, maxWaitMs });
}

/** Whether `value` is a task made by {@link defineTask}. */
export function isTask(value: unknown): value is Task<unknown, unknown, unknown> {
  return (
    typeof value === 'object' && value !== null && (value as { kind?: unknown }).kind === 'skiplock.task'
  );
}

/** Runs the task's schema on `payload`. */
export async function validatePayload<O>(
  task: Task<unknown, O, unknown>,
  payload: unknown,
): Promise<SchemaResult<O>> {
  return task.schema['~standard'].validate(payload);
}

/**
 * Checks a payload before an enqueue writes anything — as it will be stored (`payloadJson`, the
 * JSON the worker will read back and validate again), so a value JSON cannot carry (a Date, a
 * Map, undefined) fails here and not at the worker. A ValidationError names the path of the
 * first issue (`payload.to`, or `specs[2].payload.items[0]`) and lists them all; a schema that
 * throws is a ValidationError too, naming the task.
 */
export async function checkPayload(
  task: Task<unknown, unknown, unknown>,
  payloadJson: string,
  given: unknown,
  field: string,
): Promise<void> {
  const stored: unknown = JSON.parse(payloadJson);
  const result = await runSchema(task, stored, field);
  if (result.issues === undefined) return;
  const first = result.issues[0];
  // the value as given passes, the stored JSON does not: say why
  const json =
    (await runSchema(task, given, field)).issues === undefined
      ? ' (the payload is checked as it is stored, as JSON: a Date becomes a string, undefined becomes null — use a schema for the JSON form, e.g. an ISO date string or z.coerce.date())'
      : '';
  throw new ValidationError(
    `${field}${pathText(first?.path)}`,
    `does not match the schema of task ${JSON.stringify(task.name)}: ${issuesText(result.issues)}${json}`,
  );
}

async function runSchema(task: Task<unknown, unknown, unknown>, value: unknown, field: string) {
  try {
    return await validatePayload(task, value);
  } catch (error) {
    const reason = error instanceof Error ? error.message : String(error);
    throw new ValidationError(
      field,
      `the schema of task ${JSON.stringify(task.name)} threw instead of returning its issues: ${reason}`,
      { cause: error },
    );
  }
}

/**
 * The error of a job whose stored payload fails its task's schema at the worker (an older
 * producer, a hand-written row): permanent — no attempt can fix the payload.
 */
export function payloadRejected(task: Task<unknown, unknown, unknown>, issues: ReadonlyArray<SchemaIssue>) {
  return new PermanentError(
    `The payload does not match the schema of task ${JSON.stringify(task.name)}: ${issuesText(issues)}. ` +
      'Enqueue it again with a valid payload (the job went dead without running its handler)',
  );
}

/** The enqueue options a task supplies (an enqueue's own options win). */
export function taskDefaults(task: Task<unknown, unknown, unknown>): Record<string, unknown> {
  const defaults: Record<string, unknown> = {};
  for (const key of ['queue', 'priority', 'maxAttempts', 'timeoutMs'] as const) {
    if (task[key] !== undefined) defaults[key] = task[key];
  }
  return defaults;
}

/** `a.b[2]` for a path of keys and indexes ('' for none). */
function pathText(path: SchemaIssue['path']): string {
  let text = '';
  for (const segment of path ?? []) {
    const key = typeof segment === 'object' && segment !== null ? segment.key : segment;
    text += typeof key === 'number' ? `[${key}]` : `.${String(key)}`;
  }
  return text;
}

function issuesText(issues: ReadonlyArray<SchemaIssue>): string {
  return issues
    .slice(0, 10)
    .map((issue) => {
      const path = pathText(issue.path);
      return path === '' ? issue.message : `${path.replace(/^\./, '')}: ${issue.message}`;
    })
    .join('; ')
    .concat(issues.length > 10 ? ` (and ${issues.length - 10} more)` : '');
}

/**
 * An enqueue's task argument resolved: a defined task gives its name, and its defaults under the
 * call's options (an option the call sets, even to null, wins; one it leaves undefined does not).
 */
export function withTaskDefaults<T extends object>(task: unknown, options: T): { name: unknown; options: T } {
  if (!isTask(task)) return { name: task, options };
  const merged: Record<string, unknown> = taskDefaults(task);
  for (const [key, value] of Object.entries(options)) if (value !== undefined) merged[key] = value;
  return { name: task.name, options: merged as T };
}

/** enqueueMany's specs with each defined task resolved as {@link withTaskDefaults} does. */
export function specsWithTaskDefaults(specs: unknown): unknown {
  if (!Array.isArray(specs)) return specs;
  return specs.map((spec: unknown) => {
    if (typeof spec !== 'object' || spec === null || !isTask((spec as { task?: unknown }).task)) return spec;
    const { task, ...rest } = spec as { task: unknown };
    const { name, options } = withTaskDefaults(task, rest);
    return { ...options, task: name };
  });
}

/**
 * Checks the payload of every spec of a defined task, in order (the first bad spec is the one
 * reported), as stored (`jobs[i].payloadJson`; after the specs themselves were checked).
 */
export async function checkSpecPayloads(
  specs: readonly { task: unknown; payload?: unknown }[],
  jobs: readonly { payloadJson: string }[],
): Promise<void> {
  for (const [i, spec] of specs.entries()) {
    const job = jobs[i];
    if (isTask(spec.task) && job)
      await checkPayload(spec.task, job.payloadJson, spec.payload, `specs[${i}].payload`);
  }
}
