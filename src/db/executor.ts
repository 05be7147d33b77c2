/**
 * The executor seam: everything Skiplock needs from a driver. A `pg.Pool`, `pg.Client` and
 * `pg.PoolClient` all fit as they are; another driver or an ORM's transaction fits with a
 * three-line adapter.
 */

/** Runs one parameterised statement. */
export interface Executor {
  // biome-ignore lint/suspicious/noExplicitAny: rows are typed by each store statement.
  query(text: string, values?: unknown[]): Promise<{ rows: any[] }>;
}

/** A connection checked out of a pool, for work that needs one session (transactions). */
export interface SessionExecutor extends Executor {
  release(error?: Error | boolean): void;
}

/** A pool: runs statements, and lends a session when one is needed. */
export interface PoolExecutor extends Executor {
  connect(): Promise<SessionExecutor>;
}

/** True for anything with a callable `query`. */
export function isExecutor(value: unknown): value is Executor {
  return typeof (value as { query?: unknown } | null)?.query === 'function';
}

/** Runs `fn` inside one transaction on a session from `pool`, rolling back if it throws. */
export async function inTransaction<T>(
  pool: PoolExecutor,
  fn: (session: Executor) => Promise<T>,
): Promise<T> {
  const session = await pool.connect();
  let broken: Error | undefined;
  try {
    await session.query('BEGIN');
    const result = await fn(session);
    await session.query('COMMIT');
    return result;
  } catch (error) {
    try {
      await session.query('ROLLBACK');
    } catch (rollbackError) {
      // The session is unusable (connection lost): do not return it to the pool.
      broken = rollbackError instanceof Error ? rollbackError : new Error(String(rollbackError));
    }
    throw error;
  } finally {
    session.release(broken ?? false);
  }
}
