import { DatabaseError, NotMigratedError, SkiplockError } from '../errors.js';

/** SQLSTATEs meaning "the table or schema is not there": the caller has not migrated. */
const MISSING_OBJECT = new Set(['42P01', '3F000', '42703']);

/**
 * Turns a driver error into a {@link DatabaseError} that keeps the SQLSTATE and the server's
 * fields, or a {@link NotMigratedError} when Skiplock's tables are missing. Skiplock's own
 * errors pass through unchanged.
 */
export function toDatabaseError(error: unknown, schema: string): SkiplockError {
  if (error instanceof SkiplockError) return error;
  const e = (typeof error === 'object' && error !== null ? error : {}) as Record<string, unknown>;
  const sqlState = typeof e.code === 'string' && /^[0-9A-Z]{5}$/.test(e.code) ? e.code : undefined;
  if (sqlState !== undefined && MISSING_OBJECT.has(sqlState)) {
    return new NotMigratedError(schema, { cause: error });
  }
  let message = error instanceof Error ? error.message : String(error);
  if (/unsupported startup parameter/i.test(message)) {
    message +=
      ": a connection pooler (PgBouncer) refused the statement_timeout Skiplock sends at connect. Pass `preparedStatements: false` (CLI: --no-prepared-statements), which also leaves it out, or add it to PgBouncer's ignore_startup_parameters";
  }
  const where = sqlState ? ` (SQLSTATE ${sqlState})` : typeof e.code === 'string' ? ` (${e.code})` : '';
  return new DatabaseError(
    `Database error${where}: ${message}`,
    {
      sqlState,
      detail: typeof e.detail === 'string' ? e.detail : undefined,
      hint: typeof e.hint === 'string' ? e.hint : undefined,
      constraint: typeof e.constraint === 'string' ? e.constraint : undefined,
    },
    { cause: error },
  );
}

/**
 * A connection refused for a reason no retry fixes: a pooler that rejects a startup parameter
 * (its message then says what to change).
 */
export function isMisconfiguration(error: unknown): boolean {
  return error instanceof Error && /unsupported startup parameter/i.test(error.message);
}

/** Where it is defined (core: pure logic); importers here keep their path. */
export { isConnectionError } from '../core/database-outage.js';

/**
 * Errors a retry can fix when starting a worker: the database away, restarting, or read-only
 * during a failover (25006). Not a misconfiguration, which no retry fixes.
 */
export function isTransientError(error: unknown): boolean {
  if (!(error instanceof DatabaseError) || isMisconfiguration(error)) return false;
  return error.sqlState === undefined || /^(08|57P|53|25006)/.test(error.sqlState);
}
