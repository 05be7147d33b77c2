/**
 * How the statement families of this folder run their SQL: as named prepared statements on the
 * engine's own pool (parsed and planned once per connection), as plain queries anywhere else (a
 * caller's transaction client, a pooler), and with driver errors mapped to Skiplock errors that
 * keep the SQLSTATE.
 */
import { createHash } from 'node:crypto';
import { toDatabaseError } from '../db/database-error.js';
import type { Executor } from '../db/executor.js';
import { notifyChannel } from '../db/identifier.js';
import { DatabaseError, type SkiplockError } from '../errors.js';
import type { Lease } from '../types.js';

export class Runner {
  readonly channel: string;
  /** Statement text → prepared-statement name (unique per schema). */
  private readonly names = new Map<string, string>();
  /** The executor on which statements run as named prepared statements (our own pg pool). */
  private preparedOn: Executor | null = null;
  private readonly prefix: string;

  constructor(readonly schema: string) {
    this.channel = notifyChannel(schema);
    this.prefix = `skiplock_${createHash('sha256').update(schema).digest('hex').slice(0, 8)}_`;
  }

  /** Names a family's statements for preparing (names are the statements' keys, unique across families). */
  register(statements: Record<string, string>): void {
    const taken = new Set(this.names.values());
    for (const [key, text] of Object.entries(statements)) {
      const name = `${this.prefix}${key}`;
      // One name for two texts would run the wrong statement on a connection that prepared the other.
      if (taken.has(name) && this.names.get(text) !== name)
        throw new Error(`statement name ${key} is used twice`);
      this.names.set(text, name);
    }
  }

  /**
   * Runs every statement on `pool` as a named prepared statement: parsed and planned once per
   * connection (1.2–1.4× on the claim/complete loop, TECH-NOTES). Off behind PgBouncer in
   * transaction mode, where a session's prepared statements do not follow the client.
   */
  prepareOn(pool: Executor | null): void {
    this.preparedOn = pool;
  }

  /** Runs one statement, mapping driver errors to Skiplock errors that keep the SQLSTATE. */
  async run<R = Record<string, unknown>>(db: Executor, text: string, values: unknown[]): Promise<R[]> {
    const name = db === this.preparedOn ? this.names.get(text) : undefined;
    try {
      const result = name
        ? await (db as unknown as NamedQuery).query({ name, text, values })
        : await db.query(text, values);
      return result.rows as R[];
    } catch (error) {
      const mapped = toDatabaseError(error, this.schema);
      throw name ? preparedStatementLost(mapped, error) : mapped;
    }
  }

  /**
   * As {@link run}, each row read as an array of its columns in select order (pg's `rowMode:
   * 'array'`: no object with named keys per row — for statements that return many rows on the
   * hot path). An executor that ignores the row mode still gives objects, whose values are in
   * the same order.
   */
  async runArrays<R extends unknown[]>(db: Executor, text: string, values: unknown[]): Promise<R[]> {
    const name = db === this.preparedOn ? this.names.get(text) : undefined;
    try {
      const result = await (db as unknown as NamedQuery).query(
        name ? { name, text, values, rowMode: 'array' } : { text, values, rowMode: 'array' },
      );
      const rows = result.rows;
      return (
        rows.length > 0 && !Array.isArray(rows[0]) ? rows.map((row) => Object.values(row as object)) : rows
      ) as R[];
    } catch (error) {
      const mapped = toDatabaseError(error, this.schema);
      throw name ? preparedStatementLost(mapped, error) : mapped;
    }
  }
}

/** A family of statements (one operation family) and the methods that bind their parameters. */
export abstract class StatementFamily<S extends Record<string, string>> {
  constructor(
    private readonly runner: Runner,
    protected readonly sql: S,
  ) {
    runner.register(sql);
  }

  protected get schema(): string {
    return this.runner.schema;
  }

  /** The schema's NOTIFY channel. */
  protected get channel(): string {
    return this.runner.channel;
  }

  protected run<R = Record<string, unknown>>(db: Executor, text: string, values: unknown[]): Promise<R[]> {
    return this.runner.run<R>(db, text, values);
  }

  protected runArrays<R extends unknown[]>(db: Executor, text: string, values: unknown[]): Promise<R[]> {
    return this.runner.runArrays<R>(db, text, values);
  }
}

/**
 * A copy sorted by numeric job id, so concurrent batch statements lock rows in one order. Ids
 * are decimal strings of positive bigints without leading zeros: a shorter one is smaller, and
 * equal lengths compare as text (no BigInt per comparison).
 */
export function byId<T>(items: readonly T[], id: (item: T) => string): T[] {
  return [...items].sort((a, b) => {
    const x = id(a);
    const y = id(b);
    return x.length - y.length || (x < y ? -1 : x > y ? 1 : 0);
  });
}

/**
 * Array parameters written as PostgreSQL array literals here rather than by the driver, whose
 * per-element escaping (`prepareValue`, `arrayString`, `escapeElement`) was ~5 % of a draining
 * worker's CPU: ids, counts and tokens are decimal digits (nothing to escape), and a batch's
 * worker ids are one string repeated (escaped once).
 */
export function digitsArray(values: readonly (string | number | null)[]): string {
  let out = '';
  for (let i = 0; i < values.length; i++) {
    const value = values[i];
    out += (i === 0 ? '' : ',') + (value === null ? 'NULL' : value);
  }
  return `{${out}}`;
}

/**
 * A text[] literal, null as NULL; each run of one repeated value escaped once (a batch's worker
 * ids, queues and tasks repeat).
 */
export function textArray(values: readonly (string | null)[]): string {
  let last: string | null = null;
  let quoted = 'NULL';
  const parts = new Array<string>(values.length);
  for (let i = 0; i < values.length; i++) {
    const value = values[i] as string | null;
    if (value === null) {
      parts[i] = 'NULL';
      continue;
    }
    if (value !== last) {
      last = value;
      quoted = `"${value.replace(/[\\"]/g, '\\$&')}"`;
    }
    parts[i] = quoted;
  }
  return `{${parts.join(',')}}`;
}

/** A JSON array of JSON texts (each already valid JSON): one jsonb parameter, nothing escaped. */
export function jsonArray(texts: readonly string[]): string {
  return `[${texts.join(',')}]`;
}

export function leaseValues(lease: Lease): [string, string, number, string] {
  return [lease.id, lease.workerId, lease.attempt, lease.token];
}

/** One claim of one job: id and token (the token alone is unique per job, not across jobs). */
export function leaseKey(lease: Lease): string {
  return `${lease.id}/${lease.token}`;
}

/**
 * SQLSTATEs of a named prepared statement that a connection "already" has (42P05) or "does not"
 * have (26000) although the driver thinks otherwise: the mark of a transaction-pooling proxy
 * (PgBouncer in transaction mode) handing each transaction another server connection.
 */
const PREPARED_LOST = new Set(['42P05', '26000']);

/** A named statement's 42P05/26000 becomes an error that names the proxy and the fix. */
function preparedStatementLost(mapped: SkiplockError, cause: unknown): SkiplockError {
  if (!(mapped instanceof DatabaseError) || !PREPARED_LOST.has(mapped.sqlState ?? '')) return mapped;
  return new DatabaseError(
    `${mapped.message}. Skiplock's prepared statements do not survive a transaction-pooling proxy: ` +
      'behind PgBouncer in transaction mode, turn them off (`new Queue({ preparedStatements: false })`, ' +
      '`new Worker({ listen: false, … })`, or `--no-prepared-statements` on the command line), ' +
      'or use PgBouncer ≥ 1.21 with `max_prepared_statements` set. See docs/pgbouncer.md',
    mapped,
    { cause },
  );
}

/** pg's query with a QueryConfig (a named prepared statement). */
interface NamedQuery {
  query(config: {
    name?: string;
    text: string;
    values: unknown[];
    rowMode?: 'array';
  }): Promise<{ rows: unknown[] }>;
}
