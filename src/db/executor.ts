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
  /** pg clients are EventEmitters: a connection error between statements arrives as 'error'. */
  on?(event: 'error', listener: (error: Error) => void): unknown;
  off?(event: 'error', listener: (error: Error) => void): unknown;
}

/** A pool: runs statements, and lends a session when one is needed. */
export interface PoolExecutor extends Executor {
  connect(): Promise<SessionExecutor>;
}

/** True for anything with a callable `query`. */
export function isExecutor(value: unknown): value is Executor {
  return typeof (value as { query?: unknown } | null)?.query === 'function';
}

/**
 * Checks a session out of `pool` and keeps an 'error' listener on it for as long as it is held
 * (pg-pool removes its own on checkout): a connection that dies between statements — the server
 * restarting, an admin's pg_terminate_backend, a failover — must fail the holder's next
 * statement, never crash the process with an unhandled 'error' event (TECH-NOTES). A session
 * that saw such an error, or that `fn` marks broken, is released with the error so the pool
 * destroys it instead of lending it again.
 */
export async function withSession<T>(
  pool: PoolExecutor,
  fn: (session: SessionExecutor, markBroken: (error: unknown) => void) => Promise<T>,
): Promise<T> {
  const session = await pool.connect();
  let broken: Error | undefined;
  const markBroken = (error: unknown) => {
    broken ??= error instanceof Error ? error : new Error(String(error));
  };
  session.on?.('error', markBroken);
  // The caller's code gets this client (ctx.transaction, queue.transaction): a `release()` out
  // of pg habit would hand a connection with an open transaction to other callers.
  const release = session.release.bind(session);
  session.release = () => {
    throw new Error(
      'Do not release the client of queue.transaction() or ctx.transaction(): Skiplock releases it when your function returns',
    );
  };
  try {
    return await fn(session, markBroken);
  } finally {
    release(broken ?? false);
    session.off?.('error', markBroken);
  }
}

/** A failure of the connection itself (no SQLSTATE: reset, refused, timed out), not an SQL error. */
export function isDriverError(error: unknown): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code !== 'string' || !/^[0-9A-Z]{5}$/.test(code);
}

/** Runs `fn` inside one transaction on a session from `pool`, rolling back if it throws. */
export async function inTransaction<T>(
  pool: PoolExecutor,
  fn: (session: Executor) => Promise<T>,
): Promise<T> {
  return withSession(pool, async (session, markBroken) => {
    // Skiplock's own transactions count what other claims committed before a lock was granted
    // (limited queues): that needs READ COMMITTED, whatever the role's default.
    await run(session, 'BEGIN ISOLATION LEVEL READ COMMITTED', markBroken);
    let result: T;
    try {
      result = await fn(session);
    } catch (error) {
      try {
        await session.query('ROLLBACK');
      } catch (rollbackError) {
        markBroken(rollbackError); // the session is unusable: do not return it to the pool
      }
      throw error;
    }
    await run(session, 'COMMIT', markBroken);
    return result;
  });
}

/** One statement of our own on a session; a driver-level failure marks the session broken. */
async function run(session: Executor, text: string, markBroken: (error: unknown) => void): Promise<void> {
  try {
    await session.query(text);
  } catch (error) {
    if (isDriverError(error)) markBroken(error);
    throw error;
  }
}
