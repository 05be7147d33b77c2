/**
 * Every error Skiplock throws on purpose is a {@link SkiplockError} with a stable `code`.
 * Match on `code` (or `instanceof`), never on the message: messages are for people and
 * may gain detail between versions.
 */

import type { JobStatus } from './types.js';

/** Stable error codes. New codes may be added; existing ones never change meaning. */
export type SkiplockErrorCode =
  | 'ERR_VALIDATION'
  | 'ERR_NOT_FOUND'
  | 'ERR_DATABASE'
  | 'ERR_NOT_MIGRATED'
  | 'ERR_MIGRATION'
  | 'ERR_DEDUPE_CONFLICT'
  | 'ERR_CONFLICT'
  | 'ERR_QUEUE_CLOSED'
  | 'ERR_JOB_DEADLINE_EXCEEDED'
  | 'ERR_JOB_CANCELLED'
  | 'ERR_LEASE_LOST'
  | 'ERR_WORKER_STOPPING'
  | 'ERR_EMBEDDED_POSTGRES'
  | 'ERR_PERMANENT'
  | 'ERR_WAIT_TIMEOUT'
  | 'ERR_JOB_SUSPENDED';

/** Base class of every error Skiplock throws on purpose. */
export class SkiplockError extends Error {
  readonly code: SkiplockErrorCode;

  constructor(code: SkiplockErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
    this.code = code;
  }
}

/**
 * Thrown by a handler (or passed to `queue.fail`): this attempt failed for a reason no retry can
 * fix — the job goes dead at once, whatever attempts it has left, keeping the message as its
 * lastError (SPEC §9).
 *
 * @example
 * if (!user) throw new PermanentError(`unknown user ${id}`);
 */
export class PermanentError extends SkiplockError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('ERR_PERMANENT', message, options);
  }
}

/**
 * Whether `error` asks for no retry: a {@link PermanentError} — of this copy of Skiplock or
 * another one in the same process (its code says so).
 */
export function isPermanent(error: unknown): boolean {
  return (
    error instanceof PermanentError ||
    (error instanceof Error && (error as { code?: unknown }).code === 'ERR_PERMANENT')
  );
}

/**
 * Bad input: a field that is missing, of the wrong type or out of range. Thrown before anything
 * is sent to the database, so nothing was written.
 *
 * @example
 * try { await queue.enqueue('', {}) } catch (e) {
 *   if (e instanceof ValidationError) console.error(e.field, e.message) // 'task', 'task must be …'
 * }
 */
export class ValidationError extends SkiplockError {
  /** The offending input, as a path such as `priority` or `specs[3].payload`. */
  readonly field: string;

  constructor(field: string, message: string, options?: { cause?: unknown }) {
    super('ERR_VALIDATION', `${field}: ${message}`, options);
    this.field = field;
  }
}

/** Fields PostgreSQL sends with an error, kept as the server sent them. */
export interface PostgresErrorFields {
  /** SQLSTATE, e.g. `23505` for a unique violation, `57P01` when the server shut down. */
  sqlState?: string | undefined;
  detail?: string | undefined;
  hint?: string | undefined;
  constraint?: string | undefined;
  table?: string | undefined;
  schema?: string | undefined;
}

/**
 * The database refused or failed a statement (or could not be reached). `sqlState` keeps
 * PostgreSQL's SQLSTATE when the server sent one; `cause` is the driver's original error.
 */
export class DatabaseError extends SkiplockError {
  readonly sqlState: string | undefined;
  readonly detail: string | undefined;
  readonly hint: string | undefined;
  readonly constraint: string | undefined;

  constructor(message: string, fields: PostgresErrorFields, options?: { cause?: unknown }) {
    super('ERR_DATABASE', message, options);
    this.sqlState = fields.sqlState;
    this.detail = fields.detail;
    this.hint = fields.hint;
    this.constraint = fields.constraint;
  }
}

/** The schema or its tables do not exist yet: run `queue.migrate()` or `skiplock migrate`. */
export class NotMigratedError extends SkiplockError {
  readonly schema: string;

  constructor(schema: string, options?: { cause?: unknown }) {
    super(
      'ERR_NOT_MIGRATED',
      `Skiplock's tables in schema "${schema}" do not exist or are out of date: run \`await queue.migrate()\` or \`skiplock migrate\` first`,
      options,
    );
    this.schema = schema;
  }
}

/** Migrations could not be applied (for example: the database is newer than this package). */
export class MigrationError extends SkiplockError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('ERR_MIGRATION', message, options);
  }
}

/** A transition would give a dedupe key a second active job (e.g. requeue of a dead job). */
export class DedupeConflictError extends SkiplockError {
  readonly dedupeKey: string | null;

  constructor(message: string, dedupeKey: string | null, options?: { cause?: unknown }) {
    super('ERR_DEDUPE_CONFLICT', message, options);
    this.dedupeKey = dedupeKey;
  }
}

/** A method was called after `queue.close()`. */
export class QueueClosedError extends SkiplockError {
  constructor() {
    super('ERR_QUEUE_CLOSED', 'This Queue has been closed: create a new Queue to keep working');
  }
}

/**
 * A job ran past its deadline (`timeoutMs`). Its message starts with `JobDeadlineExceeded`, which
 * is what `ops().deadline1h` counts; the failure spends an attempt like any other.
 */
export class JobDeadlineExceeded extends SkiplockError {
  readonly timeoutMs: number;

  constructor(timeoutMs: number, detail = '') {
    super(
      'ERR_JOB_DEADLINE_EXCEEDED',
      `JobDeadlineExceeded: the job ran longer than its timeout of ${timeoutMs} ms${detail}`,
    );
    this.timeoutMs = timeoutMs;
    // The message already starts with the name (SPEC §1.10): say it once, not "Name: Name: …".
    if (this.stack) this.stack = this.stack.replace(/^[^\n]*/, this.message);
  }

  override toString(): string {
    return this.message;
  }
}

/** The reason of a handler's aborted signal when its job was cancelled while it ran. */
export class JobCancelledError extends SkiplockError {
  constructor(jobId: string) {
    super('ERR_JOB_CANCELLED', `Job ${jobId} was cancelled while it ran`);
  }
}

/**
 * The reason of a handler's aborted signal when its worker no longer owns the job: the lease
 * expired and the job was reclaimed (the worker was paused, or cut off from the database, for
 * longer than the lease). Whatever the handler does next is discarded.
 */
export class LeaseLostError extends SkiplockError {
  constructor(jobId: string) {
    super(
      'ERR_LEASE_LOST',
      `The lease on job ${jobId} was lost (it expired and the job was reclaimed); its outcome is discarded. Use a longer leaseMs if handlers block the event loop`,
    );
  }
}

/** The reason of a handler's aborted signal when the worker stops and its stop timeout passed. */
export class WorkerStoppingError extends SkiplockError {
  constructor() {
    super('ERR_WORKER_STOPPING', 'The worker is stopping: the job was released and will run again');
  }
}

/**
 * The asked transition does not apply to the job's current status: cancel of a job that is
 * already done, dead or cancelled; requeue of a job that is not dead. `status` is the job's
 * status when the transition was refused, read under the row lock of that same statement.
 *
 * @example
 * try { await queue.cancelOrThrow(id) } catch (e) {
 *   if (e instanceof ConflictError) console.log(`job ${e.jobId} is already ${e.status}`)
 * }
 */
export class ConflictError extends SkiplockError {
  readonly jobId: string;
  readonly status: JobStatus;

  constructor(jobId: string, status: JobStatus, message: string) {
    super('ERR_CONFLICT', message);
    this.jobId = jobId;
    this.status = status;
  }
}

/** The job does not exist. */
export class NotFoundError extends SkiplockError {
  constructor(message: string) {
    super('ERR_NOT_FOUND', message);
  }
}

/**
 * `queue.waitFor(id, { timeoutMs })`: the job was not seen finished when the time ran out (its
 * row was read once more first). `status` is what that last read found — null when the read
 * failed (its error is the `cause`). The job itself is not affected.
 */
export class WaitTimeoutError extends SkiplockError {
  readonly jobId: string;
  readonly status: JobStatus | null;

  constructor(jobId: string, status: JobStatus | null, timeoutMs: number, options?: { cause?: unknown }) {
    const reason = options?.cause instanceof Error ? options.cause.message : String(options?.cause);
    super(
      'ERR_WAIT_TIMEOUT',
      status === null
        ? `Job ${jobId} was not seen finished within ${timeoutMs} ms, and its last read failed (${reason})`
        : `Job ${jobId} was still ${status} after ${timeoutMs} ms: wait longer (timeoutMs), or check on it with queue.get('${jobId}')`,
      options,
    );
    this.jobId = jobId;
    this.status = status;
  }
}

/** The embedded PostgreSQL server could not be prepared, started or stopped. */
export class EmbeddedPostgresError extends SkiplockError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('ERR_EMBEDDED_POSTGRES', message, options);
  }
}

/**
 * How `ctx.sleep` and `ctx.waitForEvent` suspend a job (SPEC §12): the job is already back in
 * the database — `pending` until `until` (a sleep), or `waiting` for `event` (until it is
 * emitted, or `until` when the wait has a timeout) — with its lease and slot freed and the
 * attempt not spent. Let it propagate out of the handler: whatever the handler does after it is
 * ignored, and the job runs again from the top then (its completed steps return their stored
 * values at once).
 */
export class JobSuspended extends SkiplockError {
  readonly jobId: string;
  /** What the job waits for. */
  readonly kind: 'sleep' | 'event';
  /** When it runs again (a sleep's instant, an event wait's timeout; null: only the event). */
  readonly until: Date | null;
  /** The event waited for (kind 'event'). */
  readonly event: string | null;

  constructor(jobId: string, kind: 'sleep' | 'event', until: Date | null, event: string | null) {
    const what =
      kind === 'sleep'
        ? `sleeping until ${until?.toISOString()}`
        : `waiting for event ${JSON.stringify(event)}${until ? ` until ${until.toISOString()}` : ''}`;
    super(
      'ERR_JOB_SUSPENDED',
      `Job ${jobId} is suspended (${what}): let this error propagate out of the handler; the job runs again then, its completed steps answered from their stored values`,
    );
    this.jobId = jobId;
    this.kind = kind;
    this.until = until;
    this.event = event;
  }
}
