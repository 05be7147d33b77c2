/**
 * What every adapter shares: the check that it was given a transaction of its library, rows made
 * to look like pg's, and errors that keep PostgreSQL's SQLSTATE whatever the library wraps them in.
 */
import { ValidationError } from '../errors.js';

/** Throws a ValidationError on `client` unless `ok`, telling the user what to pass instead. */
export function requireTransaction(ok: boolean, expected: string): void {
  if (!ok) throw new ValidationError('client', `must be ${expected}`);
}

/** True when `value` has a method called `name`. */
export function hasMethod(value: unknown, name: string): boolean {
  return typeof (value as Record<string, unknown> | null | undefined)?.[name] === 'function';
}

/**
 * Rows as pg returns them: plain objects keyed by column name, an int8 (a count, an id) as a
 * decimal string — Prisma and postgres.js (with its BigInt option) give a BigInt instead.
 */
export function pgRows(rows: ArrayLike<unknown>): Record<string, unknown>[] {
  return Array.from(rows, (row) => {
    const plain: Record<string, unknown> = {};
    for (const [column, value] of Object.entries(row as Record<string, unknown>)) {
      // Skiplock's statements name every column in lower case (dedupe_key, …): a capital means
      // the library renamed it, and Skiplock would misread the row (a dedupe hit, say)
      if (/[A-Z]/.test(column)) throw renamedColumn(column);
      plain[column] = typeof value === 'bigint' ? value.toString() : value;
    }
    return plain;
  });
}

function renamedColumn(column: string): ValidationError {
  return new ValidationError(
    'client',
    `its library renamed a column of Skiplock's statement (got "${column}"): a column transform (postgres.js's transform: postgres.camel, Knex's postProcessResponse, …) is on. Pass a transaction of an instance without it (see docs/integrations.md)`,
  );
}

const SQLSTATE = /^[0-9A-Z]{5}$/;

function sqlStateOf(error: unknown): string | undefined {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === 'string' && SQLSTATE.test(code) ? code : undefined;
}

/**
 * The error to throw for a failed statement: the driver's own error (with its SQLSTATE in
 * `code`, which Skiplock's errors keep and its savepoint logic reads) when the library wrapped it
 * in an error of its own — Drizzle's DrizzleQueryError keeps it as `cause`.
 */
export function driverError(error: unknown): unknown {
  let current: unknown = error;
  for (let depth = 0; depth < 5 && current != null; depth++) {
    if (sqlStateOf(current) !== undefined) return current;
    current = (current as { cause?: unknown }).cause;
  }
  return error;
}

/**
 * Array parameters as PostgreSQL array literals (`{"a",NULL}`), the text pg sends for them.
 * Drivers that serialise by the server's parameter type pass a string through unchanged, where
 * their own array serialiser may not be there: Drizzle's postgres.js driver replaces the
 * serialisers of the date types and their arrays with ones that pass the value through as it is.
 */
export function arraysAsLiterals(values: readonly unknown[]): unknown[] {
  return values.map((value) => (Array.isArray(value) ? arrayLiteral(value) : value));
}

function arrayLiteral(items: readonly unknown[]): string {
  const elements = items.map((item) => {
    if (item === null || item === undefined) return 'NULL';
    if (Array.isArray(item)) return arrayLiteral(item);
    const text = item instanceof Date ? item.toISOString() : String(item);
    return `"${text.replaceAll('\\', '\\\\').replaceAll('"', '\\"')}"`;
  });
  return `{${elements.join(',')}}`;
}
