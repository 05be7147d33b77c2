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
  const message = error instanceof Error ? error.message : String(error);
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
